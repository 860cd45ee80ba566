// Runs a graph through CudaProgram and through the reference interpreter, as
// tests/jit/jit_check.h does for the CPU JIT, and compares with the same require_close (within the reference's error bounds).
#pragma once

#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "jit/knobs.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/driver_api.h"
#include "tests/jit/jit_check.h"

namespace towerjit::testing {

// Sets an environment variable for one scope (the knobs are read when a program is made).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { old_ ? (void)::setenv(name_, old_->c_str(), 1) : (void)::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs `fetches` both ways; with `updates`, also runs the update ops and compares variables.
inline JitRun run_gpu_and_reference(const Graph& g, const std::vector<Tensor>& fetches,
                                    const reference::Feeds& feeds, reference::Variables& variables,
                                    bool updates = false, uint64_t step = 0) {
  JitRun r;
  HostFeeds hf;
  for (const auto& [name, a] : feeds) hf[name] = to_host(a);
  HostVariables hv;
  for (const auto& [name, a] : variables) hv[name] = to_host(a);
  CudaProgram program(g, fetches, updates);
  for (const auto& t : program.run(hf, hv, step)) r.jit.push_back(to_array(t));
  // The bound follows the mode the program ran in: TF32 products when TOWERJIT_ALLOW_TF32=on.
  reference_side(r, g, fetches, feeds, variables, updates, step, knobs::allow_tf32());
  if (updates)
    for (const auto& [name, a] : variables) r.jit.push_back(to_array(hv.at(name)));
  return r;
}

// Two runs' fetches, the same dtypes and bits (f32, i32 and 16-bit ones alike).
inline void check_same_bits(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("fetch " << i);
    REQUIRE(a[i].dtype == b[i].dtype);
    CHECK(a[i].f32.size() + a[i].i32.size() + a[i].b16.size() > 0);
    REQUIRE(a[i].f32.size() == b[i].f32.size());  // compared as bits: -0 is not +0, a NaN is its own
    CHECK(std::memcmp(a[i].f32.data(), b[i].f32.data(), a[i].f32.size() * sizeof(float)) == 0);
    CHECK(a[i].i32 == b[i].i32);
    CHECK(a[i].b16 == b[i].b16);
  }
}

// A batch of `batch` MNIST-shaped examples: "image" [batch, 784] uniform in [0, 1), "label"
// [batch] classes 0-9, drawn from `seed`.
inline HostFeeds batch_feeds(int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  HostTensor image(Shape{batch, 784}), label(Shape{batch}, DType::i32);
  for (float& v : image.f32) v = pixel(rng);
  for (int32_t& v : label.i32) v = static_cast<int32_t>(rng() % 10);
  return {{"image", image}, {"label", label}};
}

// `g`'s variables as the reference initialises them with seed 1, in host memory.
inline HostVariables initial(const Graph& g) {
  HostVariables out;
  for (const auto& [name, a] : reference::initialize_variables(g, 1)) out[name] = to_host(a);
  return out;
}

// Cases that use gpu:0 and gpu:1: on a machine with fewer GPUs (a lent H200 has one) they say so
// and return. The emulated GPU has two (tests_gpu/main.cpp), so every machine runs them there.
inline bool skip_unless_gpus(int needed) {
  if (cuda::cuda_device_count() >= needed) return false;
  WARN("skipped: needs " << needed << " GPUs, this machine has " << cuda::cuda_device_count());
  return true;
}

}  // namespace towerjit::testing
