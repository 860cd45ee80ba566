// The library routines of the kernel IR that are not matrix products, as CUDA C. Compiled by
// NVRTC after philox.h, preamble.cuh and library_params.h, once per architecture (module
// "towerjit_library", with conv_kernels.cu after it). Matrix products go to cuBLAS, convolutions
// to cuDNN or, without it, to conv_kernels.cu's implicit GEMMs (runtime/cuda/library.cpp).
//
// Every kernel is a grid-stride loop over its outputs (launch any grid, 256 threads), and
// every value is written by exactly one thread in a fixed order: no atomics on data, so
// results are bitwise reproducible. The one atomic is the error report of one_hot and of the
// gathers (the smallest bad position wins, so the report is deterministic too).

// Index math in 32 bits where every index of the call, and the grid-stride loop's last step,
// stay below 2^31 (a 32-bit division is a fraction of the cost of a 64-bit one on a GPU);
// else in 64.
__device__ __forceinline__ bool tj_fits_i32(tj_i64 largest) {
  return largest + TJ_GRID_THREADS < 2147483647LL;
}

// A matrix product's epilogue where cuBLASLt did not apply it (runtime/cuda/library.cpp):
// out[r][j] = out[r][j] + bias[j], then with `relu` the DSL's relu (NaN stays NaN), over `rows`
// rows of `cols` (every matrix of a batch, rows stacked). The same float operations as the loop
// kernel the epilogue replaced (jit/passes/epilogues.h).
extern "C" __global__ void tj_matmul_epilogue(float* __restrict__ out, const float* __restrict__ bias,
                                              long long rows, long long cols, int relu) {
  const tj_i64 total = rows * cols;
  for (tj_i64 i = TJ_GLOBAL_THREAD; i < total; i += TJ_GRID_THREADS) {
    const float v = out[i] + bias[i % cols];  // the fallback only: a 64-bit remainder is acceptable
    out[i] = relu && v <= 0.0f ? 0.0f : v;
  }
}

// A convolution's epilogue after cuDNN's forward (runtime/cuda/library.cpp): y[i] = y[i] +
// bias[channel of i], then with `relu` the DSL's relu (NaN stays NaN), over y [images,
// channels, pixels]; the loop kernel's float operations.
extern "C" __global__ void tj_conv_epilogue(float* __restrict__ y, const float* __restrict__ bias, long long total,
                                            long long channels, long long pixels, int relu) {
  if (tj_fits_i32(total)) {
    const int c = (int)channels, p = (int)pixels;
    for (int i = (int)TJ_GLOBAL_THREAD; i < total; i += (int)TJ_GRID_THREADS) {
      TJ_WORK(1);
      const float v = y[i] + bias[i / p % c];
      y[i] = relu && v <= 0.0f ? 0.0f : v;
    }
    return;
  }
  for (tj_i64 i = TJ_GLOBAL_THREAD; i < total; i += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const float v = y[i] + bias[i / pixels % channels];
    y[i] = relu && v <= 0.0f ? 0.0f : v;
  }
}

// The max pools' elements: float, or bf16 / f16 held as their bit patterns (this module is
// compiled without the toolkit's half headers): widened exactly to compare and sum, a sum
// rounded back to nearest even. A max pool copies its window's largest element as it is.
struct TjF32 {
  typedef float Bits;
  static __device__ __forceinline__ float value(float v) { return v; }
  static __device__ __forceinline__ float round(float v) { return v; }
};
struct TjBf16 {
  typedef unsigned short Bits;
  static __device__ __forceinline__ float value(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
  static __device__ __forceinline__ unsigned short round(float v) {
    const unsigned u = __float_as_uint(v);
    if (v != v) return (unsigned short)((u >> 16) | 0x7FC0);  // NaN: quiet, of its sign
    return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // ties to even; a carry is right
  }
};
struct TjF16 {
  typedef unsigned short Bits;
  static __device__ __forceinline__ float value(unsigned short h) {
    const unsigned sign = (unsigned)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0) return __uint_as_float(sign) + (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;  // m 2^-24
    if (e == 31) return __uint_as_float(sign | 0x7F800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
  }
  static __device__ __forceinline__ unsigned short round(float v) {
    unsigned u = __float_as_uint(v);
    const unsigned short sign = (unsigned short)((u >> 16) & 0x8000);
    u &= 0x7FFFFFFFu;
    if (u > 0x7F800000u) return sign | 0x7E00;   // NaN: quiet
    if (u >= 0x477FF000u) return sign | 0x7C00;  // from 65520 on: infinity
    if (u < 0x38800000u)                         // below 2^-14: a subnormal, in units of 2^-24 (exact scaling)
      return sign | (unsigned short)rintf(__uint_as_float(u) * 16777216.0f);
    u += 0xC8000000u + 0xFFFu + ((u >> 13) & 1u);  // the exponent rebiased (127 -> 15), ties to even
    return sign | (unsigned short)(u >> 13);
  }
};

// The first maximum of a window in row-major window order (as the CPU backend), as a flat
// index into x, or -1 for a window entirely in the padding. A NaN counts as larger than every
// number (the first NaN wins): the pool is NaN where its window holds one, and its gradient
// goes to that NaN, as the reference's.
template <typename T>
__device__ __forceinline__ tj_i64 tj_window_argmax(const typename T::Bits* x, TjPoolShape s, tj_i64 plane,
                                                    tj_i64 oy, tj_i64 ox) {
  const tj_i64 y0 = oy * s.stride_h - s.pad_h, x0 = ox * s.stride_w - s.pad_w;
  tj_i64 arg = -1;
  float best = -TJ_INF;
  for (int dy = 0; dy < s.kh; ++dy)
    for (int dx = 0; dx < s.kw; ++dx) {
      const tj_i64 iy = y0 + dy, ix = x0 + dx;
      if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
      const tj_i64 i = (plane * s.h + iy) * s.w + ix;
      const float v = T::value(x[i]);
      if (arg < 0 || v > best || (v != v && best == best)) best = v, arg = i;
    }
  return arg;
}

template <typename T>
__device__ __forceinline__ void tj_max_pool2d_body(const typename T::Bits* __restrict__ x,
                                                   typename T::Bits* __restrict__ y, TjPoolShape s) {
  const tj_i64 total = s.planes * s.oh * s.ow;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 arg = tj_window_argmax<T>(x, s, p / (s.oh * s.ow), p / s.ow % s.oh, p % s.ow);
    y[p] = arg < 0 ? T::round(-TJ_INF) : x[arg];
  }
}
extern "C" __global__ void tj_max_pool2d(const float* __restrict__ x, float* __restrict__ y, TjPoolShape s) {
  tj_max_pool2d_body<TjF32>(x, y, s);
}
extern "C" __global__ void tj_max_pool2d_bf16(const unsigned short* __restrict__ x, unsigned short* __restrict__ y,
                                              TjPoolShape s) {
  tj_max_pool2d_body<TjBf16>(x, y, s);
}
extern "C" __global__ void tj_max_pool2d_f16(const unsigned short* __restrict__ x, unsigned short* __restrict__ y,
                                             TjPoolShape s) {
  tj_max_pool2d_body<TjF16>(x, y, s);
}

// The windows (in output coordinates) that contain input coordinate i along one axis.
__device__ __forceinline__ void tj_windows_of(tj_i64 i, int k, int stride, int pad, tj_i64 out,
                                              tj_i64* lo, tj_i64* hi) {
  const tj_i64 t = i + pad;  // window o covers [o*stride, o*stride + k) in padded coordinates
  *lo = t - k + 1 <= 0 ? 0 : (t - k + 1 + stride - 1) / stride;
  *hi = t / stride < out - 1 ? t / stride : out - 1;
}

// dx[i] = sum of dy over the windows whose first maximum is element i, in window order (in
// float; a 16-bit dx rounded once). With relu_mask, 0 where x[i] is not > 0 (NaN included),
// without looking at its windows.
template <typename T>
__device__ __forceinline__ void tj_max_pool2d_grad_body(const typename T::Bits* __restrict__ x,
                                                        const typename T::Bits* __restrict__ dy,
                                                        typename T::Bits* __restrict__ dx, TjPoolShape s) {
  const tj_i64 total = s.planes * s.h * s.w;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 ix = p % s.w, iy = p / s.w % s.h, plane = p / (s.w * s.h);
    tj_i64 y_lo, y_hi, x_lo, x_hi;
    tj_windows_of(iy, s.kh, s.stride_h, s.pad_h, s.oh, &y_lo, &y_hi);
    tj_windows_of(ix, s.kw, s.stride_w, s.pad_w, s.ow, &x_lo, &x_hi);
    float sum = 0.0f;
    if (!s.relu_mask || T::value(x[p]) > 0.0f)
      for (tj_i64 oy = y_lo; oy <= y_hi; ++oy)
        for (tj_i64 ox = x_lo; ox <= x_hi; ++ox)
          if (tj_window_argmax<T>(x, s, plane, oy, ox) == p) sum += T::value(dy[(plane * s.oh + oy) * s.ow + ox]);
    dx[p] = T::round(sum);
  }
}
extern "C" __global__ void tj_max_pool2d_grad(const float* __restrict__ x, const float* __restrict__ dy,
                                              float* __restrict__ dx, TjPoolShape s) {
  tj_max_pool2d_grad_body<TjF32>(x, dy, dx, s);
}
extern "C" __global__ void tj_max_pool2d_grad_bf16(const unsigned short* __restrict__ x,
                                                   const unsigned short* __restrict__ dy,
                                                   unsigned short* __restrict__ dx, TjPoolShape s) {
  tj_max_pool2d_grad_body<TjBf16>(x, dy, dx, s);
}
extern "C" __global__ void tj_max_pool2d_grad_f16(const unsigned short* __restrict__ x,
                                                  const unsigned short* __restrict__ dy,
                                                  unsigned short* __restrict__ dx, TjPoolShape s) {
  tj_max_pool2d_grad_body<TjF16>(x, dy, dx, s);
}

// The mean over the window's in-bounds elements, divided by the full window size (padding
// counts as zeros), as the CPU backend.
extern "C" __global__ void tj_avg_pool2d(const float* __restrict__ x, float* __restrict__ y,
                                         TjPoolShape s) {
  const tj_i64 total = s.planes * s.oh * s.ow;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 ox = p % s.ow, oy = p / s.ow % s.oh, plane = p / (s.oh * s.ow);
    const tj_i64 y0 = oy * s.stride_h - s.pad_h, x0 = ox * s.stride_w - s.pad_w;
    float sum = 0.0f;
    for (int dy = 0; dy < s.kh; ++dy)
      for (int dx = 0; dx < s.kw; ++dx) {
        const tj_i64 iy = y0 + dy, ix = x0 + dx;
        if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) sum += x[(plane * s.h + iy) * s.w + ix];
      }
    y[p] = sum / (float)(s.kh * s.kw);
  }
}

extern "C" __global__ void tj_avg_pool2d_grad(const float* __restrict__ dy, float* __restrict__ dx,
                                              TjPoolShape s) {
  const tj_i64 total = s.planes * s.h * s.w;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 ix = p % s.w, iy = p / s.w % s.h, plane = p / (s.w * s.h);
    tj_i64 y_lo, y_hi, x_lo, x_hi;
    tj_windows_of(iy, s.kh, s.stride_h, s.pad_h, s.oh, &y_lo, &y_hi);
    tj_windows_of(ix, s.kw, s.stride_w, s.pad_w, s.ow, &x_lo, &x_hi);
    float sum = 0.0f;
    for (tj_i64 oy = y_lo; oy <= y_hi; ++oy)
      for (tj_i64 ox = x_lo; ox <= x_hi; ++ox)
        sum += dy[(plane * s.oh + oy) * s.ow + ox] / (float)(s.kh * s.kw);
    dx[p] = sum;
  }
}

// out[i][j] = labels[i] == j. A label outside [0, depth) leaves its row zero and reports the
// smallest such i as (i << 32 | label) through `error`, which the runtime sets to ~0 before
// the launch and reads after it, raising the same error as the CPU backend.
extern "C" __global__ void tj_one_hot(const int* __restrict__ labels, float* __restrict__ out,
                                      tj_i64 count, tj_i64 depth, tj_u64* error) {
  const tj_i64 total = count * depth;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 i = p / depth, j = p % depth;
    const int v = labels[i];
    out[p] = v == j ? 1.0f : 0.0f;
    if (j == 0 && (v < 0 || v >= depth)) atomicMin(error, ((tj_u64)i << 32) | (tj_u32)v);
  }
}

// out[o][i][in] = table[o][indices[i]][in], 4-byte elements of any dtype. An index outside
// [0, rows) writes 0 and reports the smallest such i as (i << 32 | index) through `error`, as
// tj_one_hot does.
extern "C" __global__ void tj_gather(const tj_u32* __restrict__ table, const int* __restrict__ indices,
                                     tj_u32* __restrict__ out, tj_i64 outer, tj_i64 rows, tj_i64 count,
                                     tj_i64 inner, tj_u64* error) {
  const tj_i64 total = outer * count * inner;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 in = p % inner, i = p / inner % count, o = p / (inner * count);
    const int v = indices[i];
    const bool ok = v >= 0 && v < rows;
    out[p] = ok ? table[(o * rows + v) * inner + in] : 0u;
    if (!ok && in == 0 && o == 0) atomicMin(error, ((tj_u64)i << 32) | (tj_u32)v);
  }
}

// d table[o][v][in] += dy[o][i][in] for every i with indices[i] == v, into a table the host
// zeroed. One thread owns column (o, in) of every row and adds its slices in index order: no
// two threads write one element, so no atomics, and each sum runs in the CPU backend's order
// (bitwise equal results). The parallelism is outer * inner (the embedding's width): enough
// for the dense form, which sparse gradients (rows and values, never this table) are to
// replace. A bad index is skipped and reported as in tj_gather.
extern "C" __global__ void tj_gather_grad(const int* __restrict__ indices, const float* __restrict__ dy,
                                          float* __restrict__ out, tj_i64 outer, tj_i64 rows, tj_i64 count,
                                          tj_i64 inner, tj_u64* error) {
  const tj_i64 total = outer * inner;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    const tj_i64 in = p % inner, o = p / inner;
    for (tj_i64 i = 0; i < count; ++i) {
      TJ_WORK(1);
      const int v = indices[i];
      if (v < 0 || v >= rows) {
        if (p == 0) atomicMin(error, ((tj_u64)i << 32) | (tj_u32)v);
        continue;
      }
      out[(o * rows + v) * inner + in] += dy[(o * count + i) * inner + in];
    }
  }
}

// The sparse apply (ops.def: CombineRows, ScatterRows; rows of axis 0), deterministic without
// atomics or a sort. tj_combine_rows_links, a thread a position i: first[i], the first position
// holding i's index, and next[i], the next one after i (count ends the chain); an index outside
// [0, rows) goes to the error slot, as tj_gather's do, and leaves its position out of every
// chain. count^2 / 2 comparisons of ints at most, in parallel over i.
extern "C" __global__ void tj_combine_rows_links(const int* __restrict__ indices, int* __restrict__ first,
                                                 int* __restrict__ next, tj_i64 count, tj_i64 rows,
                                                 tj_u64* error) {
  for (tj_i64 i = TJ_GLOBAL_THREAD; i < count; i += TJ_GRID_THREADS) {
    TJ_WORK(count);
    const int v = indices[i];
    if (v < 0 || v >= rows) {
      atomicMin(error, ((tj_u64)i << 32) | (tj_u32)v);
      first[i] = -1;
      next[i] = (int)count;
      continue;
    }
    tj_i64 f = i, n = count;
    for (tj_i64 j = 0; j < i; ++j)
      if (indices[j] == v) { f = j; break; }
    for (tj_i64 j = i + 1; j < count; ++j)
      if (indices[j] == v) { n = j; break; }
    first[i] = (int)f;
    next[i] = (int)n;
  }
}

// tj_combine_rows_sum, a thread a (position, column): the chain's first position sums the
// chain's values in position order from 0, as the CPU routine does after its stable sort
// (runtime/cpu/library.cpp combine_rows: bitwise the same), and writes the sum at every
// position of the chain; the chain's other positions do nothing.
extern "C" __global__ void tj_combine_rows_sum(const float* __restrict__ values, const int* __restrict__ first,
                                               const int* __restrict__ next, float* __restrict__ out,
                                               tj_i64 count, tj_i64 inner) {
  const tj_i64 total = count * inner;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    const tj_i64 i = p / inner, c = p % inner;
    TJ_WORK(1);
    if (first[i] != i) continue;
    float sum = 0.0f;
    for (tj_i64 j = i; j < count; j = next[j]) {
      TJ_WORK(2);
      sum += values[j * inner + c];
    }
    for (tj_i64 j = i; j < count; j = next[j]) out[j * inner + c] = sum;
  }
}

// out[indices[i]] = rows[i], a thread a (position, column), into a copy of the table (or the
// table itself, written in place). The positions of one index carry one value (combine_rows
// made them so), so their stores agree in whatever order they land. An index out of range is
// reported and not stored.
extern "C" __global__ void tj_scatter_rows(const int* __restrict__ indices, const float* __restrict__ rows_in,
                                           float* __restrict__ out, tj_i64 count, tj_i64 rows, tj_i64 inner,
                                           tj_u64* error) {
  const tj_i64 total = count * inner;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 i = p / inner, c = p % inner;
    const int v = indices[i];
    if (v < 0 || v >= rows) {
      if (c == 0) atomicMin(error, ((tj_u64)i << 32) | (tj_u32)v);
      continue;
    }
    out[(tj_i64)v * inner + c] = rows_in[p];
  }
}

// x[i] *= s in place, the product in double rounded once to float: bitwise the host's
// static_cast<float>(s * x) (an async tower's factor on a sparse gradient's values, which reach
// the apply unscaled: runtime/towers/variable_homes.cpp).
extern "C" __global__ void tj_scale(float* __restrict__ x, tj_i64 n, double s) {
  for (tj_i64 i = TJ_GLOBAL_THREAD; i < n; i += TJ_GRID_THREADS) {
    TJ_WORK(1);
    x[i] = (float)(s * (double)x[i]);
  }
}

// Several copies within the device in one launch (TjCopyJobs): each job's blocks stride over
// its words.
extern "C" __global__ void tj_copy_words(TjCopyJobs jobs) {
  const int j = blockIdx.x / jobs.blocks_per_job;
  if (j >= jobs.count) return;
  unsigned* __restrict__ dst = (unsigned*)jobs.dst[j];
  const unsigned* __restrict__ src = (const unsigned*)jobs.src[j];
  const tj_i64 first = (tj_i64)(blockIdx.x % jobs.blocks_per_job) * blockDim.x + threadIdx.x;
  for (tj_i64 i = first; i < jobs.words[j]; i += (tj_i64)jobs.blocks_per_job * blockDim.x) {
    TJ_WORK(1);
    dst[i] = src[i];
  }
}

// out[o][in] = the first j with the largest x[o][j][in].
extern "C" __global__ void tj_argmax(const float* __restrict__ x, int* __restrict__ out,
                                     tj_i64 outer, tj_i64 n, tj_i64 inner) {
  const tj_i64 total = outer * inner;
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    const tj_i64 o = p / inner, in = p % inner;
    tj_i64 best = 0;
    for (tj_i64 j = 1; j < n; ++j) {  // the first maximum; a NaN is larger than every number
      const float v = x[(o * n + j) * inner + in], b = x[(o * n + best) * inner + in];
      if (v > b || (v != v && b == b)) best = j;
    }
    out[p] = (int)best;
  }
}

// dst = src placed at box.origin, zeros elsewhere (Pad). 4-byte elements of any dtype.
extern "C" __global__ void tj_pad(const tj_u32* __restrict__ src, tj_u32* __restrict__ dst, TjBox box) {
  tj_i64 total = 1;
  for (int d = 0; d < box.rank; ++d) total *= box.dst[d];
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    tj_i64 rem = p, s = 0, stride = 1;
    bool in = true;
    for (int d = box.rank - 1; d >= 0; --d) {
      const tj_i64 c = rem % box.dst[d] - box.origin[d];
      rem /= box.dst[d];
      in = in && c >= 0 && c < box.src[d];
      s += c * stride;
      stride *= box.src[d];
    }
    dst[p] = in ? src[s] : 0u;
  }
}

// Writes src into dst at box.origin and nothing else (one launch per part of a Concat).
extern "C" __global__ void tj_copy_box(const tj_u32* __restrict__ src, tj_u32* __restrict__ dst, TjBox box) {
  tj_i64 total = 1;
  for (int d = 0; d < box.rank; ++d) total *= box.src[d];
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < total; p += TJ_GRID_THREADS) {
    TJ_WORK(1);
    tj_i64 rem = p, o = 0, stride = 1;
    for (int d = box.rank - 1; d >= 0; --d) {
      o += (rem % box.src[d] + box.origin[d]) * stride;
      rem /= box.src[d];
      stride *= box.dst[d];
    }
    dst[o] = src[p];
  }
}

// Fused attention (ops.def: Attention and its two gradient ops; docs/cuda.md). A block of
// TJ_ATTN_ROWS rows (queries for the forward and dq, keys for dk and dv) gives each row a group
// of TJ_ATTN_LANES threads, and walks the other side in tiles staged in shared memory by the
// whole block (as many rows as fit TJ_ATTN_SMEM floats, at most 64). A dot product is split
// over the group's lanes by column and summed in a fixed shuffle tree, then broadcast, so every
// lane holds the same score; each lane owns the output columns c = lane (mod TJ_ATTN_LANES).
// The forward keeps each row's running maximum and sum and rescales its output row when a tile
// raises the maximum (an online softmax): no [tq, tk] matrix is written. The backward
// recomputes each probability from q, k and the saved log-sum-exp. No atomics: the same bits
// every run. The output rows double as the accumulators. Every loop that shuffles runs the
// same trips on every lane of a warp (rows whose keys end earlier mask their updates).
#define TJ_ATTN_LANES 16
#define TJ_ATTN_ROWS 16
#define TJ_ATTN_TILE 64
#define TJ_ATTN_SMEM 4096

__device__ __forceinline__ tj_i64 tj_attn_tile(const TjAttentionShape& s) {
  const tj_i64 width = s.d > s.dv ? s.d : s.dv, w = width > 1 ? width : 1, fit = TJ_ATTN_SMEM / w;
  return fit < TJ_ATTN_TILE ? fit : TJ_ATTN_TILE;
}
__device__ __forceinline__ tj_i64 tj_attn_keys(const TjAttentionShape& s, tj_i64 i) {
  return s.causal ? (i + 1 < s.tk ? i + 1 : s.tk) : s.tk;
}
// The group's dot product of a and b (n long): each lane's columns, then a fixed tree.
__device__ __forceinline__ float tj_attn_dot(const float* a, const float* b, tj_i64 n, int lane) {
  float v = 0.0f;
  for (tj_i64 c = lane; c < n; c += TJ_ATTN_LANES) v += a[c] * b[c];
  for (int d = TJ_ATTN_LANES / 2; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d, TJ_ATTN_LANES);
  return __shfl_sync(0xffffffffu, v, 0, TJ_ATTN_LANES);
}
// Rows [first, first + n) of a [*, width] matrix into shared memory, by the whole block.
__device__ __forceinline__ void tj_attn_stage(float* to, const float* from, tj_i64 first, tj_i64 n, tj_i64 width) {
  for (tj_i64 e = threadIdx.x; e < n * width; e += blockDim.x) to[e] = from[first * width + e];
}

extern "C" __global__ void tj_attention(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, float* __restrict__ out, TjAttentionShape s) {
  __shared__ float ks[TJ_ATTN_SMEM];
  __shared__ float vs[TJ_ATTN_SMEM];
  const int lane = threadIdx.x % TJ_ATTN_LANES, r = threadIdx.x / TJ_ATTN_LANES;
  const tj_i64 tile = tj_attn_tile(s), blocks = (s.tq + TJ_ATTN_ROWS - 1) / TJ_ATTN_ROWS;
  for (tj_i64 item = blockIdx.x; item < s.batches * blocks; item += gridDim.x) {
    const tj_i64 b = item / blocks, i0 = item % blocks * TJ_ATTN_ROWS, i = i0 + r;
    const bool live = i < s.tq;
    const tj_i64 last = (i0 + TJ_ATTN_ROWS < s.tq ? i0 + TJ_ATTN_ROWS : s.tq) - 1;
    const tj_i64 block_keys = tj_attn_keys(s, last), mine = live ? tj_attn_keys(s, i) : 0;
    const float* qi = q + (b * s.tq + (live ? i : 0)) * s.d;
    float* o = out + (b * s.tq + (live ? i : 0)) * (s.dv + 1);
    float m = -TJ_INF, l = 0.0f;
    if (live)
      for (tj_i64 c = lane; c < s.dv; c += TJ_ATTN_LANES) o[c] = 0.0f;
    for (tj_i64 j0 = 0; j0 < block_keys; j0 += tile) {
      const tj_i64 n = tile < block_keys - j0 ? tile : block_keys - j0;
      __syncthreads();
      tj_attn_stage(ks, k + b * s.tk * s.d, j0, n, s.d);
      tj_attn_stage(vs, v + b * s.tk * s.dv, j0, n, s.dv);
      __syncthreads();
      const tj_i64 seen = mine - j0 < n ? mine - j0 : n;
      TJ_WORK(n * ((s.d + s.dv) / TJ_ATTN_LANES + 6));
      float scores[TJ_ATTN_TILE], top = m;
      for (tj_i64 j = 0; j < n; ++j) {
        const float sc = tj_attn_dot(qi, ks + j * s.d, s.d, lane) * s.scale;
        scores[j] = sc;
        if (j < seen) top = fmaxf(top, sc);
      }
      if (seen <= 0) continue;
      const float rescale = expf(m - top);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
      for (tj_i64 j = 0; j < seen; ++j) sum += (scores[j] = expf(scores[j] - top));
      l = l * rescale + sum;
      m = top;
      for (tj_i64 c = lane; c < s.dv; c += TJ_ATTN_LANES) {
        float acc = o[c] * rescale;
        for (tj_i64 j = 0; j < seen; ++j) acc += scores[j] * vs[j * s.dv + c];
        o[c] = acc;
      }
    }
    if (live) {
      const float inv = 1.0f / l;
      for (tj_i64 c = lane; c < s.dv; c += TJ_ATTN_LANES) o[c] *= inv;
      if (lane == 0) o[s.dv] = m + logf(l);
    }
  }
}

// dq for a block of query rows: ds = exp(scale q.k - lse) (dO.v - dO.O) scale, dq += ds k.
extern "C" __global__ void tj_attention_grad_q(const float* __restrict__ q, const float* __restrict__ k,
                                               const float* __restrict__ v, const float* __restrict__ o,
                                               const float* __restrict__ dout, float* __restrict__ dq,
                                               TjAttentionShape s) {
  __shared__ float ks[TJ_ATTN_SMEM];
  __shared__ float vs[TJ_ATTN_SMEM];
  const int lane = threadIdx.x % TJ_ATTN_LANES, r = threadIdx.x / TJ_ATTN_LANES;
  const tj_i64 tile = tj_attn_tile(s), blocks = (s.tq + TJ_ATTN_ROWS - 1) / TJ_ATTN_ROWS;
  for (tj_i64 item = blockIdx.x; item < s.batches * blocks; item += gridDim.x) {
    const tj_i64 b = item / blocks, i0 = item % blocks * TJ_ATTN_ROWS, i = i0 + r;
    const bool live = i < s.tq;
    const tj_i64 last = (i0 + TJ_ATTN_ROWS < s.tq ? i0 + TJ_ATTN_ROWS : s.tq) - 1;
    const tj_i64 block_keys = tj_attn_keys(s, last), mine = live ? tj_attn_keys(s, i) : 0;
    const tj_i64 row = b * s.tq + (live ? i : 0);
    const float *qi = q + row * s.d, *oi = o + row * (s.dv + 1), *di = dout + row * (s.dv + 1);
    float* dqi = dq + row * s.d;
    const float D = tj_attn_dot(di, oi, s.dv, lane), lse = oi[s.dv];
    if (live)
      for (tj_i64 c = lane; c < s.d; c += TJ_ATTN_LANES) dqi[c] = 0.0f;
    for (tj_i64 j0 = 0; j0 < block_keys; j0 += tile) {
      const tj_i64 n = tile < block_keys - j0 ? tile : block_keys - j0;
      __syncthreads();
      tj_attn_stage(ks, k + b * s.tk * s.d, j0, n, s.d);
      tj_attn_stage(vs, v + b * s.tk * s.dv, j0, n, s.dv);
      __syncthreads();
      const tj_i64 seen = mine - j0 < n ? mine - j0 : n;
      TJ_WORK(n * ((2 * s.d + s.dv) / TJ_ATTN_LANES + 11));
      for (tj_i64 j = 0; j < n; ++j) {
        const float* kj = ks + j * s.d;
        const float score = tj_attn_dot(qi, kj, s.d, lane), dp = tj_attn_dot(di, vs + j * s.dv, s.dv, lane);
        if (j >= seen) continue;
        const float ds = expf(score * s.scale - lse) * (dp - D) * s.scale;
        for (tj_i64 c = lane; c < s.d; c += TJ_ATTN_LANES) dqi[c] += ds * kj[c];
      }
    }
  }
}

// dk and dv for a block of key rows, [tk, d + dv]: per tile of the queries that see them (their
// q, dO, lse and dO.O staged), dv += p dO and dk += ds q.
extern "C" __global__ void tj_attention_grad_kv(const float* __restrict__ q, const float* __restrict__ k,
                                                const float* __restrict__ v, const float* __restrict__ o,
                                                const float* __restrict__ dout, float* __restrict__ dkv,
                                                TjAttentionShape s) {
  __shared__ float qs[TJ_ATTN_SMEM];
  __shared__ float dos[TJ_ATTN_SMEM];
  __shared__ float lses[TJ_ATTN_TILE];
  __shared__ float Ds[TJ_ATTN_TILE];
  const int lane = threadIdx.x % TJ_ATTN_LANES, r = threadIdx.x / TJ_ATTN_LANES;
  const tj_i64 tile = tj_attn_tile(s), blocks = (s.tk + TJ_ATTN_ROWS - 1) / TJ_ATTN_ROWS;
  const tj_i64 w = s.d + s.dv;
  for (tj_i64 item = blockIdx.x; item < s.batches * blocks; item += gridDim.x) {
    const tj_i64 b = item / blocks, j0 = item % blocks * TJ_ATTN_ROWS, j = j0 + r;
    const bool live = j < s.tk;
    const float *kj = k + (b * s.tk + (live ? j : 0)) * s.d, *vj = v + (b * s.tk + (live ? j : 0)) * s.dv;
    float* dk = dkv + (b * s.tk + (live ? j : 0)) * w;
    float* dv = dk + s.d;
    if (live)
      for (tj_i64 c = lane; c < w; c += TJ_ATTN_LANES) dk[c] = 0.0f;
    for (tj_i64 i0 = s.causal ? j0 : 0; i0 < s.tq; i0 += tile) {  // earlier queries see none of these keys
      const tj_i64 n = tile < s.tq - i0 ? tile : s.tq - i0;
      __syncthreads();
      tj_attn_stage(qs, q + b * s.tq * s.d, i0, n, s.d);
      for (tj_i64 e = threadIdx.x; e < n * s.dv; e += blockDim.x)
        dos[e] = dout[(b * s.tq + i0 + e / s.dv) * (s.dv + 1) + e % s.dv];
      if (threadIdx.x < n) {  // no shuffles here: one thread a query
        const tj_i64 row = b * s.tq + i0 + threadIdx.x;
        const float *orow = o + row * (s.dv + 1), *drow = dout + row * (s.dv + 1);
        float sum = 0.0f;
        for (tj_i64 c = 0; c < s.dv; ++c) sum += drow[c] * orow[c];
        lses[threadIdx.x] = orow[s.dv];
        Ds[threadIdx.x] = sum;
      }
      __syncthreads();
      TJ_WORK(n * ((2 * s.d + 2 * s.dv) / TJ_ATTN_LANES + 11));
      for (tj_i64 t = 0; t < n; ++t) {
        const float *qi = qs + t * s.d, *doi = dos + t * s.dv;
        const float score = tj_attn_dot(qi, kj, s.d, lane), dp = tj_attn_dot(doi, vj, s.dv, lane);
        if (!live || (s.causal && i0 + t < j)) continue;  // query i0 + t does not see key j
        const float p = expf(score * s.scale - lses[t]);
        const float ds = p * (dp - Ds[t]) * s.scale;
        for (tj_i64 c = lane; c < s.d; c += TJ_ATTN_LANES) dk[c] += ds * qi[c];
        for (tj_i64 c = lane; c < s.dv; c += TJ_ATTN_LANES) dv[c] += p * doi[c];
      }
    }
  }
}

// Fused layer norm (ops.def: LayerNorm and its two gradient ops; docs/cuda.md). A warp takes a
// row at a time (TJ_LN_WARPS rows a block, a block-stride loop over the rows): its lanes sum
// the columns c = lane (mod 32), then a butterfly of xor shuffles adds the lanes, the same tree
// on every lane, so each holds the same bits. The row's mean, then the mean square of the
// centred row (two passes; the second reads the row from cache), then the output: one kernel,
// nothing stored beside it. The backward recomputes the statistics. The gain's and bias'
// gradients are column sums over the rows: partial sums over blocks of TJ_LN_PARAM_ROWS rows
// in row order (in the library scratch), then the blocks added in block order by a second
// kernel. No atomics: the same bits every run. The arithmetic is the sequence
// jit/reference/eval_norm.cpp bounds.
#define TJ_LN_WARPS 8
#define TJ_LN_PARAM_ROWS 64

__device__ __forceinline__ float tj_ln_warp_sum(float v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

struct TjLnStats {
  float mean, rstd;
};

// Every lane of the warp calls it with the same row.
__device__ __forceinline__ TjLnStats tj_ln_stats(const float* __restrict__ x, const TjNormShape& s, int lane) {
  const float n = (float)s.n;
  float mean = 0.0f;
  if (!s.rms) {
    float v = 0.0f;
    for (tj_i64 c = lane; c < s.n; c += 32) v += x[c];
    mean = tj_ln_warp_sum(v) / n;
  }
  float v = 0.0f;
  for (tj_i64 c = lane; c < s.n; c += 32) {
    const float d = x[c] - mean;
    v += d * d;
  }
  const float var = tj_ln_warp_sum(v) / n;
  TjLnStats st;
  st.mean = mean;
  st.rstd = 1.0f / sqrtf(var + s.eps);
  return st;
}

extern "C" __global__ void tj_layer_norm(const float* __restrict__ x, const float* __restrict__ gain,
                                         const float* __restrict__ bias, float* __restrict__ y, TjNormShape s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (tj_i64 r = (tj_i64)blockIdx.x * TJ_LN_WARPS + warp; r < s.rows; r += (tj_i64)gridDim.x * TJ_LN_WARPS) {
    TJ_WORK(3 * ((s.n + 31) / 32) + 12);
    const float* xr = x + r * s.n;
    float* yr = y + r * s.n;
    const TjLnStats st = tj_ln_stats(xr, s, lane);
    for (tj_i64 c = lane; c < s.n; c += 32) {
      const float v = (xr[c] - st.mean) * st.rstd * gain[c];
      yr[c] = s.rms ? v : v + bias[c];
    }
  }
}

// dx = rstd ((g - mean(g)) - xhat mean(g xhat)), g = dy gain (rms: without mean(g)).
extern "C" __global__ void tj_layer_norm_grad_input(const float* __restrict__ x, const float* __restrict__ gain,
                                                    const float* __restrict__ dy, float* __restrict__ dx,
                                                    TjNormShape s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float n = (float)s.n;
  for (tj_i64 r = (tj_i64)blockIdx.x * TJ_LN_WARPS + warp; r < s.rows; r += (tj_i64)gridDim.x * TJ_LN_WARPS) {
    TJ_WORK(4 * ((s.n + 31) / 32) + 22);
    const float *xr = x + r * s.n, *dyr = dy + r * s.n;
    float* dxr = dx + r * s.n;
    const TjLnStats st = tj_ln_stats(xr, s, lane);
    float a = 0.0f, b = 0.0f;
    for (tj_i64 c = lane; c < s.n; c += 32) {
      const float g = dyr[c] * gain[c];
      a += g;
      b += g * ((xr[c] - st.mean) * st.rstd);
    }
    const float m1 = s.rms ? 0.0f : tj_ln_warp_sum(a) / n, m2 = tj_ln_warp_sum(b) / n;
    for (tj_i64 c = lane; c < s.n; c += 32) {
      const float xhat = (xr[c] - st.mean) * st.rstd;
      dxr[c] = st.rstd * ((dyr[c] * gain[c] - m1) - xhat * m2);
    }
  }
}

// Block k of TJ_LN_PARAM_ROWS rows -> partials[k] = [d gain | d bias] over its rows, in row
// order: the warps compute the rows' statistics into shared memory, then each thread sums its
// columns down the rows.
extern "C" __global__ void tj_layer_norm_grad_params_partial(const float* __restrict__ x, const float* __restrict__ dy,
                                                             float* __restrict__ partials, TjNormShape s) {
  __shared__ float means[TJ_LN_PARAM_ROWS];
  __shared__ float rstds[TJ_LN_PARAM_ROWS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const tj_i64 blocks = (s.rows + TJ_LN_PARAM_ROWS - 1) / TJ_LN_PARAM_ROWS, width = s.rms ? s.n : 2 * s.n;
  for (tj_i64 k = blockIdx.x; k < blocks; k += gridDim.x) {
    const tj_i64 r0 = k * TJ_LN_PARAM_ROWS;
    const tj_i64 count = s.rows - r0 < TJ_LN_PARAM_ROWS ? s.rows - r0 : TJ_LN_PARAM_ROWS;
    __syncthreads();
    for (tj_i64 i = warp; i < count; i += TJ_LN_WARPS) {
      const TjLnStats st = tj_ln_stats(x + (r0 + i) * s.n, s, lane);
      if (lane == 0) means[i] = st.mean, rstds[i] = st.rstd;
    }
    __syncthreads();
    TJ_WORK(count * (2 * ((s.n + 31) / 32) + 6 * ((s.n + blockDim.x - 1) / blockDim.x)) / TJ_LN_WARPS);
    for (tj_i64 c = threadIdx.x; c < s.n; c += blockDim.x) {
      float g = 0.0f, b = 0.0f;
      for (tj_i64 i = 0; i < count; ++i) {
        const tj_i64 at = (r0 + i) * s.n + c;
        const float d = dy[at];
        g += d * ((x[at] - means[i]) * rstds[i]);
        b += d;
      }
      partials[k * width + c] = g;
      if (!s.rms) partials[k * width + s.n + c] = b;
    }
  }
}

// out[p] = the sum over the blocks' partials of column p, in block order.
extern "C" __global__ void tj_layer_norm_grad_params_sum(const float* __restrict__ partials, float* __restrict__ out,
                                                         long long blocks, long long width) {
  for (tj_i64 p = TJ_GLOBAL_THREAD; p < width; p += TJ_GRID_THREADS) {
    TJ_WORK(blocks);
    float v = 0.0f;
    for (tj_i64 k = 0; k < blocks; ++k) v += partials[k * width + p];
    out[p] = v;
  }
}

// The fused softmax (ops.def: Softmax, SoftmaxGrad), as the layer norm's kernels: a warp a row,
// TJ_LN_WARPS rows a block, a block-stride loop over the rows; the lanes take the columns
// c = lane (mod 32) and a butterfly of xor shuffles combines them, the same tree on every lane.
// Forward: the row's maximum (a NaN kept: fmaxf would drop it), e = exp(x - max) written into
// y, their sum, then y = e * (1 / sum); the row is read from memory once, e from cache.
// Backward: t = sum(y dy), dx = y (dy - t). The sequence jit/reference/eval_norm.cpp bounds.
__device__ __forceinline__ float tj_keep_nan_max(float m, float v) { return (v > m || v != v) ? v : m; }

extern "C" __global__ void tj_softmax(const float* __restrict__ x, float* __restrict__ y, TjRowsShape s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (tj_i64 r = (tj_i64)blockIdx.x * TJ_LN_WARPS + warp; r < s.rows; r += (tj_i64)gridDim.x * TJ_LN_WARPS) {
    TJ_WORK(3 * ((s.n + 31) / 32) + 12);
    const float* xr = x + r * s.n;
    float* yr = y + r * s.n;
    float m = xr[0];
    for (tj_i64 c = lane; c < s.n; c += 32) m = tj_keep_nan_max(m, xr[c]);
    for (int d = 16; d > 0; d >>= 1) m = tj_keep_nan_max(m, __shfl_xor_sync(0xffffffffu, m, d));
    float sum = 0.0f;
    for (tj_i64 c = lane; c < s.n; c += 32) {
      const float e = expf(xr[c] - m);
      yr[c] = e;
      sum += e;
    }
    const float inv = 1.0f / tj_ln_warp_sum(sum);
    for (tj_i64 c = lane; c < s.n; c += 32) yr[c] *= inv;  // the lane's own stores: no barrier
  }
}

extern "C" __global__ void tj_softmax_grad(const float* __restrict__ y, const float* __restrict__ dy,
                                           float* __restrict__ dx, TjRowsShape s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (tj_i64 r = (tj_i64)blockIdx.x * TJ_LN_WARPS + warp; r < s.rows; r += (tj_i64)gridDim.x * TJ_LN_WARPS) {
    TJ_WORK(2 * ((s.n + 31) / 32) + 6);
    const float *yr = y + r * s.n, *dyr = dy + r * s.n;
    float* dxr = dx + r * s.n;
    float t = 0.0f;
    for (tj_i64 c = lane; c < s.n; c += 32) t += yr[c] * dyr[c];
    t = tj_ln_warp_sum(t);
    for (tj_i64 c = lane; c < s.n; c += 32) dxr[c] = yr[c] * (dyr[c] - t);
  }
}
