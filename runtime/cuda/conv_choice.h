// Which code runs each convolution pass at each shape: cuDNN's algorithm (cudnn.h) or
// towerjit's implicit GEMM (implicit_gemm_conv.h), chosen once per (device, pass, shape, type,
// TF32, workspace cap) and cached, as PyTorch's cudnn.benchmark chooses among cuDNN's own.
//
// Where cuDNN is used and the pass is f32, both are timed on the device, on scratch operands of
// the shape, before any of the run is queued: cuDNN's deterministic algorithms by its find
// (Cudnn::plan), the implicit GEMM by events around kTimedRuns launches after one untimed
// launch (which loads the kernel, as CUDA loads modules lazily). The faster is kept. Both are
// deterministic, so a run stays bitwise reproducible once the choice is made; the choice itself
// rests on timings, as cuDNN's find does, hence its store below (docs/cuda.md#convolutions). Why race them: on an
// H200, cuDNN's one deterministic f32 filter gradient that sums products (ALGO_1) took 60% of
// the resnet's step (docs/cuda.md#figures).
//
// Each choice is stored in the compile cache (jit/cpu/compile_cache.h; not with
// TOWERJIT_CACHE=off), keyed by the GPU's model, cuDNN's version and the implicit GEMMs'
// source: a later run on the same kind of GPU reads it instead of timing (a cuDNN algorithm
// read so is listed for the shape, not timed, and held to the same rules), so its steps are
// bitwise those of the run that chose, and it starts sooner. Processes (or GPUs) choosing one
// shape at once time it one at a time (jit/cpu/cache_entry_lock.h): the first times and
// stores, the others then read its entry, so two ranks of a job run the same algorithm and no
// timing runs beside another's on a shared GPU.
//
// Without cuDNN every pass is the implicit GEMM; 16-bit passes are cuDNN's alone (the implicit
// GEMMs are f32 only); TOWERJIT_CONV_IMPLICIT_GEMM=off leaves the choice to cuDNN alone.
#pragma once

#include <cstddef>
#include <source_location>
#include <string>

#include "runtime/cuda/cudnn.h"

namespace towerjit::cuda {

struct ConvChoice {
  bool implicit_gemm = false;  // towerjit's kernels; else cuDNN's planned algorithm
  size_t scratch_bytes = 0;    // the workspace of the code chosen
  float cudnn_ms = 0, implicit_gemm_ms = 0;  // the timings compared (0: not timed)
};

// The choice for the pass at shape `g` of `dtype`, with cuDNN through `dnn` (null: none). Made
// on the first call for the key, which synchronises dnn's stream (call it before queuing the
// run's work); cached after.
ConvChoice choose_convolution(Cudnn* dnn, ConvPass pass, const TjConvShape& g, DType dtype, const std::string& what,
                              std::source_location loc);

// How many passes' choices this process made, and how many of them went to the implicit GEMM
// (the bench prints them beside a step).
struct ConvChoiceCounts {
  int64_t made = 0, implicit_gemm = 0;
  int64_t loaded = 0;  // of those made, read from the compile cache rather than timed
};
ConvChoiceCounts conv_choice_counts();

}  // namespace towerjit::cuda
