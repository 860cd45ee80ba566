// The helpers every generated CUDA module starts with (after philox.h): index types,
// non-finite constants, and the warp / block reductions of reduction kernels. No #include:
// NVRTC compiles it without the CUDA toolkit headers (a module holding bf16 or f16 includes
// cuda_bf16.h and cuda_fp16.h before it: cuda_emitter.cpp).

typedef long long tj_i64;

#define TJ_INF __int_as_float(0x7f800000)
#define TJ_NAN __int_as_float(0x7fc00000)
#define TJ_INT_MIN (-2147483647 - 1)

// The thread's first item and the grid's stride in a grid-stride loop.
#define TJ_GLOBAL_THREAD ((tj_i64)blockIdx.x * blockDim.x + threadIdx.x)
#define TJ_GRID_THREADS ((tj_i64)gridDim.x * blockDim.x)

// A unit of a thread's serial work (one point of a loop kernel, one output of a library
// kernel): nothing on a GPU; the emulated GPU counts it for its launch records (cuda_host.h).
#ifndef TJ_WORK
#define TJ_WORK(n)
#endif
// The same for the work of the grid's tail: what the last block to finish does after all the
// others (a reduction's one-pass combine); counted apart, as it runs after the rest.
#ifndef TJ_TAIL_WORK
#define TJ_TAIL_WORK(n)
#endif

struct TjSum {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// As the CPU backend: the new value wins only when strictly greater, or when it is NaN (v != v;
// never for integers). A NaN acc then stays, so a NaN anywhere in the slice is the maximum, as
// the reference's; fmaxf would drop it.
struct TjMax {
  template <typename T> __device__ __forceinline__ T operator()(T acc, T v) const {
    return v > acc || v != v ? v : acc;
  }
};

// A partial log-sum-exp: running maximum m and the sum s of exp(x - m) (identity: -inf, 0).
struct TjLseAcc {
  float m, s;
};
__device__ __forceinline__ TjLseAcc tj_lse_identity() { return TjLseAcc{-TJ_INF, 0.0f}; }
__device__ __forceinline__ float tj_lse_result(TjLseAcc a) { return a.m + logf(a.s); }
// Two partials as one, the same formula as the CPU backend's: an empty side (m = -inf)
// contributes nothing, so expf never sees -inf - -inf; a NaN propagates through the sum.
struct TjLse {
  __device__ __forceinline__ TjLseAcc operator()(TjLseAcc a, TjLseAcc b) const {
    if (b.m == -TJ_INF) return a;
    if (a.m == -TJ_INF) return b;
    const bool gt = b.m > a.m;
    const float e = expf(gt ? a.m - b.m : b.m - a.m);
    return gt ? TjLseAcc{b.m, a.s * e + b.s} : TjLseAcc{a.m, a.s + b.s * e};
  }
  __device__ __forceinline__ TjLseAcc operator()(TjLseAcc a, float v) const {
    return (*this)(a, TjLseAcc{v, 1.0f});
  }
};

// A partial another block wrote in this launch, read from L2 (ld.global.cg): never a line this
// SM's L1 might hold from before (reduction_writer.h, the one-pass combine).
__device__ __forceinline__ float tj_load_cg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ int tj_load_cg(const int* p) { return __ldcg(p); }
__device__ __forceinline__ TjLseAcc tj_load_cg(const TjLseAcc* p) { return TjLseAcc{__ldcg(&p->m), __ldcg(&p->s)}; }

template <typename T>
__device__ __forceinline__ T tj_shfl_down(T v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ TjLseAcc tj_shfl_down(TjLseAcc v, int d) {
  return TjLseAcc{__shfl_down_sync(0xffffffffu, v.m, d), __shfl_down_sync(0xffffffffu, v.s, d)};
}

// Combines the 32 lanes' values in a fixed tree (same order every run); lane 0 holds the result.
template <typename T, typename Op>
__device__ __forceinline__ T tj_warp_reduce(T v, Op op) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = op(v, tj_shfl_down(v, d));
  return v;
}

// Combines the block's values: each warp, then warp 0 over the warps' results. Thread 0 holds
// the result. `smem` holds one value per warp; the trailing barrier lets the caller reuse it.
template <typename T, typename Op>
__device__ __forceinline__ T tj_block_reduce(T v, Op op, T identity, T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = tj_warp_reduce(v, op);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? smem[lane] : identity;
    v = tj_warp_reduce(v, op);
  }
  __syncthreads();
  return v;
}
