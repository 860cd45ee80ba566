// The generated CUDA of a bare graph, for a user's program (public: towerjit.h); the dump's
// writers and the emitter behind it are in jit/cuda/cuda_dump.h.
#pragma once

#include <string>
#include <vector>

#include "dsl/tensor.h"

namespace towerjit {

// The CUDA C (and the PTX, where NVRTC loads) of what `fetches` and `update_ops` of `graph`
// need, as a GPU would run them, on any machine: <dir>/<name>.cu, .ptx, .index.json (each
// kernel's DSL ops with the user's file:line, its launch shape, the bytes it moves) and .kir.
// Returns the paths written. Errors (towerjit::Error): a directory that cannot be written.
// TowerTrainer's programs: dump_cuda(trainer, dir) in runtime/towers/dump_programs.h.
std::vector<std::string> dump_cuda(const Graph& graph, const std::vector<Tensor>& fetches, const std::string& dir,
                                   const std::string& name = "program", const std::vector<Tensor>& update_ops = {});

}  // namespace towerjit
