// The reference interpreter: evaluates any graph with plain loops in double precision. It is
// the oracle every backend is tested against, so it is written to be obviously right, not fast.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dsl/tensor.h"
#include "jit/reference/array.h"

namespace towerjit::reference {

using Feeds = std::map<std::string, Array>;      // input name -> value
using Variables = std::map<std::string, Array>;  // variable name -> value

// Initial values of every variable of `graph`, from their initialisers and `seed`, in double
// (initial_values: init::constant(0.1) is 0.1 here; an f32 backend rounds it once).
Variables initialize_variables(const Graph& graph, uint64_t seed);

// How far a float32 backend's results may lie from the interpreter's exact ones, element by
// element (jit/reference/error_bounds.cpp: each op's rounding and what it makes of its inputs'
// errors). The oracle's tolerance: tests compare every backend against these.
struct ErrorBounds {
  std::vector<Array> fetches;  // one per fetch
  Variables variables;         // one per variable passed in, after the update ops when they ran
};

struct RunOptions {
  uint64_t step = 0;           // keys random_uniform, so dropout masks change per step
  bool run_update_ops = false; // evaluate the graph's update ops and write them to the variables
  ErrorBounds* bounds = nullptr;  // when set, filled with the results' error bounds
  // Bound matrix products and convolutions as a backend computing them on TF32 tensor cores
  // does (a GPU with TOWERJIT_ALLOW_TF32=on: cuBLASLt and cuDNN) instead of in full f32.
  bool tf32_products = false;
};

// Evaluates `fetches`. The batch size is read from the fed inputs whose shape holds B. Errors
// (towerjit::Error): a missing or ill-shaped feed, a missing variable, an index out of range.
std::vector<Array> run(const Graph& graph, const std::vector<Tensor>& fetches, const Feeds& feeds,
                       Variables& variables, RunOptions options = {});

}  // namespace towerjit::reference
