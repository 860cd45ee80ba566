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

struct RunOptions {
  uint64_t step = 0;           // keys random_uniform, so dropout masks change per step
  bool run_update_ops = false; // evaluate the graph's update ops and write them to the variables
};

// Evaluates `fetches`. The batch size is read from the fed inputs whose shape holds B. Errors
// (towerjit::Error): a missing or ill-shaped feed, a missing variable, an index out of range.
std::vector<Array> run(const Graph& graph, const std::vector<Tensor>& fetches, const Feeds& feeds,
                       Variables& variables, RunOptions options = {});

}  // namespace towerjit::reference
