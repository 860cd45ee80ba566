// Runs a graph through the CPU JIT and through the reference interpreter and compares.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <sstream>

#include "error_bound_check.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"

namespace towerjit::testing {

inline HostTensor to_host(const reference::Array& a) {
  HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) set_value(t, i, a[i]);
  return t;
}

inline reference::Array to_array(const HostTensor& t) {
  reference::Array a(t.shape, t.dtype);
  for (int64_t i = 0; i < a.size(); ++i) a[i] = value_at(t, i);
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
  std::vector<reference::Array> jit, ref, bound;  // bound: how far jit may lie from ref
  std::unique_ptr<CpuProgram> program;
};

// The reference's results and their error bounds into `r`: the fetches, then with `updates`
// every variable after the update ops.
// `tf32_products`: bound the matrix products and convolutions as TF32 tensor cores compute
// them (a GPU with TOWERJIT_ALLOW_TF32=on).
inline void reference_side(JitRun& r, const Graph& g, const std::vector<Tensor>& fetches,
                           const reference::Feeds& feeds, reference::Variables& variables,
                           bool updates, uint64_t step, bool tf32_products = false) {
  reference::ErrorBounds bounds;
  r.ref = reference::run(g, fetches, feeds, variables,
                         {.step = step, .run_update_ops = updates, .bounds = &bounds, .tf32_products = tf32_products});
  r.bound = bounds.fetches;
  if (updates)
    for (const auto& [name, a] : variables) {
      r.ref.push_back(a);
      r.bound.push_back(bounds.variables.at(name));
    }
}

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
  reference_side(r, g, fetches, feeds, variables, updates, step);
  if (updates)
    for (const auto& [name, a] : variables) r.jit.push_back(to_array(hv.at(name)));
  return r;
}

// Every output of the backend within its error bound of the reference's.
inline void require_close(const JitRun& r, const std::string& what) {
  REQUIRE(r.jit.size() == r.ref.size());
  REQUIRE(r.bound.size() == r.ref.size());
  for (size_t o = 0; o < r.jit.size(); ++o)
    check_within_bounds(r.jit[o], r.ref[o], r.bound[o], what + ": output " + std::to_string(o));
}

// Runs `fetches` through the CPU JIT and the reference and requires them within the bounds.
inline void require_jit_matches(const Graph& g, const std::vector<Tensor>& fetches,
                                const reference::Feeds& feeds, reference::Variables variables,
                                const std::string& what) {
  require_close(run_both(g, fetches, feeds, variables), what + " (CPU JIT)");
}

}  // namespace towerjit::testing
