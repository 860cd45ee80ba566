// One training step on the emulated GPU, recorded launch by launch for the cost model
// (jit/cost/launch_model.h). The emulator (TOWERJIT_CUDA=emulator) records what each launch
// did (emulator/driver/launch_log.h); the loop kernels' bytes come from the index each program
// writes under TOWERJIT_DUMP (jit/dump.h: every buffer a kernel reads or writes, once).
//
//   tj::cost::prepare_emulated_gpu(tj::cost::gpu_spec("h200"), "/tmp/dump");  // before any CUDA use
//   ... build the TowerTrainer on gpu:0 ...
//   trainer.step(feeds);                                       // compiles; not recorded
//   auto launches = tj::cost::record_step(trainer, feeds, "/tmp/dump");
#pragma once

#include <string>
#include <vector>

#include "jit/cost/gpu_specs.h"
#include "jit/cost/launch_model.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit::cost {

// Sets the environment a recorded step needs, before the process first uses CUDA: the
// emulated GPU (TOWERJIT_CUDA=emulator) reporting `gpu`'s SM count, each program's index
// written to `dump_dir`, `memory_mb` of emulated memory unless TOWERJIT_EMULATED_GPU_MB says,
// and convolutions on cuDNN's algorithms without the implicit GEMM timed beside them unless
// TOWERJIT_CONV_IMPLICIT_GEMM says. A
// process that already loaded NVIDIA's driver keeps it (the libraries load once): call this
// first.
void prepare_emulated_gpu(const GpuSpec& gpu, const std::string& dump_dir, int memory_mb = 16384);

// Runs `trainer.step(feeds)` once with the launch records on and returns them, in the order
// they ran, bytes and FLOPs filled in: loop kernels from the programs' indexes in `dump_dir`
// (bytes read + written at `batch`; FLOPs: one a fused op a point), the rest from the records.
// Throws towerjit::Error when the emulator is not loaded or an index is missing.
std::vector<Launch> record_step(TowerTrainer& trainer, const HostFeeds& feeds, const std::string& dump_dir,
                                int64_t batch);

// The records as the emulator writes them (JSON lines), joined with the indexes in `dump_dir`
// at `batch`: record_step's second half, for records kept in a file.
std::vector<Launch> launches_from_records(const std::string& json_lines, const std::string& dump_dir, int64_t batch);

}  // namespace towerjit::cost
