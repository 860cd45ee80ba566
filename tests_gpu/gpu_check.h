// Runs a graph through CudaProgram and through the reference interpreter, as
// tests/jit/jit_check.h does for the CPU JIT, and compares with the same require_close (within the reference's error bounds).
#pragma once

#include "jit/knobs.h"
#include "runtime/cuda/cuda_program.h"
#include "tests/jit/jit_check.h"

namespace towerjit::testing {

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

}  // namespace towerjit::testing
