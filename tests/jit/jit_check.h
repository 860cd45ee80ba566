// Runs a graph through the CPU JIT and through the reference interpreter and compares.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <sstream>

#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"

namespace towerjit::testing {

inline HostTensor to_host(const reference::Array& a) {
  HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (a.dtype == DType::f32) t.f32[i] = static_cast<float>(a[i]);
    else t.i32[i] = static_cast<int32_t>(a[i]);
  }
  return t;
}

inline reference::Array to_array(const HostTensor& t) {
  reference::Array a(t.shape, t.dtype);
  for (int64_t i = 0; i < a.size(); ++i) a[i] = t.dtype == DType::f32 ? t.f32[i] : t.i32[i];
  return a;
}

// Random f32 values in [lo, hi), rounded to float so both sides see the same numbers.
inline reference::Array random_array(Shape shape, uint32_t seed, double lo = -1, double hi = 1) {
  reference::Array a(shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& v : a.data) v = static_cast<float>(dist(rng));
  return a;
}

struct JitRun {
  std::vector<reference::Array> jit, ref;
  std::unique_ptr<CpuProgram> program;
};

// Runs `fetches` both ways; with `updates`, also runs the update ops and compares variables.
// `step` keys random numbers.
inline JitRun run_both(const Graph& g, const std::vector<Tensor>& fetches,
                       const reference::Feeds& feeds, reference::Variables& variables,
                       bool updates = false, ThreadPool* pool = nullptr, uint64_t step = 0) {
  JitRun r;
  HostFeeds hf;
  for (const auto& [name, a] : feeds) hf[name] = to_host(a);
  HostVariables hv;
  for (const auto& [name, a] : variables) hv[name] = to_host(a);
  r.program = std::make_unique<CpuProgram>(g, fetches, updates, pool);
  for (const auto& t : r.program->run(hf, hv, step)) r.jit.push_back(to_array(t));
  r.ref = reference::run(g, fetches, feeds, variables, {.step = step, .run_update_ops = updates});
  if (updates)
    for (const auto& [name, a] : variables) {
      r.jit.push_back(to_array(hv.at(name)));
      r.ref.push_back(a);
    }
  return r;
}

// Largest |jit - ref| / max(1, |ref|) over all outputs, and where it is.
inline void require_close(const JitRun& r, double rtol, const std::string& what) {
  REQUIRE(r.jit.size() == r.ref.size());
  for (size_t o = 0; o < r.jit.size(); ++o) {
    INFO(what << ": output " << o);
    REQUIRE(r.jit[o].shape == r.ref[o].shape);
    double worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < r.ref[o].size(); ++i) {
      const double err = std::abs(r.jit[o][i] - r.ref[o][i]) / std::max(1.0, std::abs(r.ref[o][i]));
      if (!(err <= worst)) worst = err, at = i;
    }
    INFO("shape " << r.ref[o].shape.str() << ", largest relative error " << worst << " at " << at
                  << " (jit " << (at >= 0 ? r.jit[o][at] : 0) << ", reference "
                  << (at >= 0 ? r.ref[o][at] : 0) << "), tolerance " << rtol);
    CHECK(worst <= rtol);
  }
}

// Runs `fetches` through the CPU JIT and requires them within `rtol` of `expected` (what the
// reference interpreter computed for the same feeds and variables).
inline void require_jit_matches(const Graph& g, const std::vector<Tensor>& fetches,
                                const reference::Feeds& feeds, const reference::Variables& variables,
                                const std::vector<reference::Array>& expected, double rtol,
                                const std::string& what) {
  HostFeeds hf;
  for (const auto& [name, a] : feeds) hf[name] = to_host(a);
  HostVariables hv;
  for (const auto& [name, a] : variables) hv[name] = to_host(a);
  JitRun r;
  r.program = std::make_unique<CpuProgram>(g, fetches);
  for (const auto& t : r.program->run(hf, hv)) r.jit.push_back(to_array(t));
  r.ref = expected;
  require_close(r, rtol, what + " (CPU JIT)");
}

}  // namespace towerjit::testing
