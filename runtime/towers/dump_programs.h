// The CUDA of every program a TowerTrainer compiled, whatever its towers' devices: reading the
// generated CUDA of your own model needs no GPU and no internal header.
//
//   tj::TowerTrainer trainer(graph, loss, tj::Towers({tj::cpu(0), tj::cpu(1)}), tj::adam(1e-3), {.logits = logits});
//   tj::dump_cuda(trainer, "runs/cuda");  // tower_step.cu, apply.cu, predict.cu, ... and programs.txt
#pragma once

#include <string>
#include <vector>

#include "jit/cuda/dump_graph.h"  // dump_cuda of a bare graph
#include "runtime/towers/tower_trainer.h"

namespace towerjit {

// Writes, for each program the trainer compiled (tower step, apply, predict, ...), <dir>/<name>.cu, .ptx
// where NVRTC loads, .index.json (each kernel's DSL ops with the user's file:line, its launch
// shape, the bytes it moves) and .kir, and <dir>/programs.txt saying when each runs. Returns
// the paths written. Errors (towerjit::Error): a directory that cannot be written.
std::vector<std::string> dump_cuda(const TowerTrainer& trainer, const std::string& dir, Loc loc = Loc::current());

}  // namespace towerjit
