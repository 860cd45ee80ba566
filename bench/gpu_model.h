// `towerjit_bench --gpu-model h200 --workload mlp|cnn|resnet|gpt [--batch N] [--graph]
// [--precision f32|bf16|f16]`:
// one training step of the Fashion-MNIST example's model (examples/models.h; 784-512-512-10 for
// mlp) on the emulated GPU with the variables on it, as `fashion_mnist --towers gpu:0 --steps 1`
// with TOWERJIT_GPU_VARIABLES=on runs it, recorded launch by launch (runtime/cost/) and priced on
// a named GPU by the cost model (jit/cost/launch_model.h): a predicted time per kernel and per
// step, the roofline floor, their ratio and the launches a step; gpt is the gpt-small bench
// case (examples/gpt.h, batch 32, its fused attention included). See docs/performance.md.
// With `--measure STEPS` it runs the same step on the real GPU instead and prints its median
// time (scripts/gpu-check.sh puts the two side by side); with `--measure-fit STEPS`, fit() over
// a dataset in host memory, each batch copied to the GPU while the step before trains and
// without (TOWERJIT_PREFETCH_FEEDS), the mean time a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/dtype.h"
#include "jit/cost/launch_model.h"

namespace towerjit::bench {

// A workload's step, recorded: `workload` is "mlp", "cnn", "resnet" or "gpt"; `batch` 0 takes
// the batch (4096 for mlp, 32 for gpt, 512 otherwise). The process must not have used CUDA before.
struct ModelledStep {
  std::string workload;
  int64_t batch = 0;
  int layers = 0;  // the model's layers (convolutions, batch norms, pools, dense layers)
  std::vector<cost::Launch> launches;
  double record_seconds = 0;  // the emulator's time for the recorded step
  double warmup_seconds = 0;  // the first step's, compiles included
};
// `precision`: the products' operands (Towers::precision), f32, bf16 or f16.
ModelledStep record_workload(const cost::GpuSpec& gpu, const std::string& workload, int64_t batch,
                             DType precision = DType::f32);

// The batch for a workload.
int64_t default_batch(const std::string& workload);

// The command: parses its arguments (argv holds --gpu-model), prints the table, returns the
// exit code.
int gpu_model_main(int argc, char** argv);

}  // namespace towerjit::bench
