#include "runtime/cuda/implicit_gemm_conv.h"

#include <algorithm>

#include "runtime/cuda/module.h"

namespace towerjit::cuda {
namespace {

// The filter gradient's product is small (o x c*kh*kw) and deep (images x oh*ow): its depth is
// cut into slices, so the tiles times the slices give the GPU about kSliceBlocks blocks, each
// slice at least kMinSliceDepth deep. The cut depends on the shape alone, so every GPU (and
// the emulator) adds in the same order and gives the same bits.
constexpr int64_t kConvTile = 64, kConvDepthStep = 16;  // TJ_IG_TILE, TJ_IG_DEPTH
constexpr int64_t kSliceBlocks = 264;    // two blocks on each of an H200's 132 SMs
constexpr int64_t kMinSliceDepth = 256;  // 16 stages of TJ_IG_DEPTH a slice: its partial's write amortised
constexpr int kBlock = 256;              // the kernels' __launch_bounds__

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The 64 x 64 tiles of a rows x cols product, times its slices of depth.
int64_t tiles(int64_t rows, int64_t cols, int64_t slices = 1) {
  return ceil_div(rows, kConvTile) * ceil_div(cols, kConvTile) * slices;
}

struct FilterSlices {
  int64_t count, depth;  // slices, and the depth of each (the last may be shorter)
};

FilterSlices filter_gradient_slices(const TjConvShape& g) {
  const int64_t depth = g.n * g.oh * g.ow, blocks = tiles(g.o, g.c * g.kh * g.kw);
  const int64_t wanted =
      std::clamp(ceil_div(kSliceBlocks, blocks), int64_t{1}, std::max<int64_t>(1, depth / kMinSliceDepth));
  const int64_t slice = ceil_div(ceil_div(depth, wanted), kConvDepthStep) * kConvDepthStep;
  return {ceil_div(depth, slice), slice};
}

// A block-stride kernel over `items` (one block each): the grid capped at 32 blocks an SM, as
// the grid-stride kernels' grids are.
template <typename... Args>
void launch_blocks(const char* name, int64_t items, DeviceContext& device, const Stream& stream,
                   const std::string& what, std::source_location loc, Args&... args) {
  if (items == 0) return;
  void* params[] = {static_cast<void*>(&args)...};
  launch(device.library_module().function(name), std::min<int64_t>(items, int64_t{32} * device.sm_count()), kBlock,
         stream, params, std::string(name) + " for " + what, loc);
}

}  // namespace

size_t implicit_gemm_scratch_bytes(ConvPass pass, const TjConvShape& g) {
  if (pass != ConvPass::filter_gradient) return 0;
  const FilterSlices s = filter_gradient_slices(g);
  return s.count > 1 ? static_cast<size_t>(s.count * g.o * g.c * g.kh * g.kw) * 4 : 0;
}

void queue_implicit_gemm(ConvPass pass, const TjConvShape& shape, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out,
                         CUdeviceptr scratch, const ConvBias& bias, DeviceContext& device, const Stream& stream,
                         const std::string& what, std::source_location loc) {
  TjConvShape g = shape;
  const int64_t taps = g.c * g.kh * g.kw;
  switch (pass) {
    case ConvPass::forward: {  // x, w -> y
      CUdeviceptr bias_ptr = bias.ptr;
      int relu = bias.relu;
      return launch_blocks("tj_conv2d_implicit", tiles(g.o, g.n * g.oh * g.ow), device, stream, what, loc, a, b, out,
                           g, bias_ptr, relu);
    }
    case ConvPass::data_gradient:  // dy, w -> dx
      return launch_blocks("tj_conv2d_grad_input_implicit", tiles(g.c, g.n * g.h * g.w), device, stream, what, loc, a,
                           b, out, g);
    case ConvPass::filter_gradient: {  // x, dy -> dw, through the slices' partials where there are several
      const FilterSlices s = filter_gradient_slices(g);
      long long count = s.count, depth = s.depth, weights = g.o * taps;
      CUdeviceptr parts = s.count > 1 ? scratch : out;
      launch_blocks("tj_conv2d_grad_filter_implicit", tiles(g.o, taps, s.count), device, stream, what, loc, a, b,
                    parts, g, count, depth);
      if (s.count > 1)  // a block per 32 weights (TJ_SUM_COLUMNS)
        launch_blocks("tj_sum_slices", ceil_div(weights, 32), device, stream, what, loc, parts, out, count, weights);
    }
  }
}

}  // namespace towerjit::cuda
