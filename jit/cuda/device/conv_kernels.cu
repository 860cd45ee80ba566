// Convolutions without cuDNN: implicit GEMMs. Each pass is a matrix product whose operands are
// read straight from the tensors through the convolution's index map, never materialised as
// im2col columns (runtime/cuda/library.cpp launches them). NCHW throughout:
//
//   pass             rows (M)  columns (N)       depth (K)        A[m, k]                 B[k, n]
//   forward          o         images x oh*ow    c*kh*kw          w[o][c,ky,kx]           x at (image, c, oy*s-p+ky, ox*s-p+kx)
//   data gradient    c         images x h*w      o*kh*kw          w[o][c][ky][kx]         dy at (image, o, (y+p-ky)/s, (x+p-kx)/s)
//   filter gradient  o         c*kh*kw           images x oh*ow   dy[image][o][oy, ox]    x at (image, c, oy*s-p+ky, ox*s-p+kx)
//
// An index outside the image, or one the stride does not divide, reads 0. A block of 256
// threads computes a 64 x 64 tile of the product, 4 x 4 outputs a thread, staging 16 steps of
// depth of each operand in shared memory at a time; a block-stride loop over the tiles, so any
// grid does. Every output is one thread's sum over its depth in ascending order, the same order
// whichever block computes it: bitwise reproducible, and no atomics. The filter gradient's depth
// (every image's every output pixel) is cut into `splits` consecutive slices, each a product
// of its own into the scratch, which tj_sum_slices (below) then adds in a fixed order. The
// forward takes the call's epilogue (jit/passes/epilogues.h) as it stores: the bias of the
// output channel (row m) added to the sum, then the DSL's relu, the loop kernel's operations.

#define TJ_IG_TILE 64   // rows and columns of a block's tile
#define TJ_IG_DEPTH 16  // depth staged per step
#define TJ_IG_ROW 68    // a stage's row in shared memory: the tile padded by 4, so threads
                        // storing consecutive depths write different banks
#define TJ_IG_THREADS 256
#define TJ_IG_PER_THREAD 4  // TJ_IG_TILE / 16 rows (and columns) a thread

// The three passes' operands, each element from its tensor through the index map above. `I` is
// the index type: int where every index of the call fits (tj_fits_i32), else 64 bits.
template <typename I>
struct TjConvDims {
  I n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw;
  __device__ __forceinline__ explicit TjConvDims(const TjConvShape& g)
      : n((I)g.n), c((I)g.c), h((I)g.h), w((I)g.w), o((I)g.o), kh((I)g.kh), kw((I)g.kw), oh((I)g.oh), ow((I)g.ow),
        sh((I)g.stride_h), sw((I)g.stride_w), ph((I)g.pad_h), pw((I)g.pad_w) {}
  // x at (image, channel, oy*s-p+ky, ox*s-p+kx), for the filter tap `tap` = (c, ky, kx) and
  // the output pixel `pixel` = oy*ow + ox; 0 in the padding.
  __device__ __forceinline__ float patch(const float* x, I image, I tap, I pixel) const {
    const I kx = tap % kw, ky = tap / kw % kh, ci = tap / (kw * kh);
    const I iy = pixel / ow * sh - ph + ky, ix = pixel % ow * sw - pw + kx;
    return iy >= 0 && iy < h && ix >= 0 && ix < w ? x[((image * c + ci) * h + iy) * w + ix] : 0.0f;
  }
};

template <typename I>
struct TjConvForwardOperands {  // y[image, o, pixel] = sum over taps of w[o, tap] x-patch[tap, (image, pixel)]
  const float* x;
  const float* wt;
  TjConvDims<I> d;
  static constexpr bool a_depth_fastest = true, b_depth_fastest = false;
  __device__ __forceinline__ I rows() const { return d.o; }
  __device__ __forceinline__ I cols() const { return d.n * d.oh * d.ow; }
  __device__ __forceinline__ I depth() const { return d.c * d.kh * d.kw; }
  __device__ __forceinline__ float a(I m, I k) const { return wt[m * depth() + k]; }
  __device__ __forceinline__ float b(I k, I col) const {
    const I pixels = d.oh * d.ow;
    return d.patch(x, col / pixels, k, col % pixels);
  }
  __device__ __forceinline__ I out(I m, I col) const {
    const I pixels = d.oh * d.ow;
    return (col / pixels * d.o + m) * pixels + col % pixels;
  }
};

template <typename I>
struct TjConvDataGradOperands {  // dx[image, c, pixel] = sum over (o, ky, kx) of w[o, c, ky, kx] dy[image, o, ...]
  const float* dy;
  const float* wt;
  TjConvDims<I> d;
  static constexpr bool a_depth_fastest = true, b_depth_fastest = false;
  __device__ __forceinline__ I rows() const { return d.c; }
  __device__ __forceinline__ I cols() const { return d.n * d.h * d.w; }
  __device__ __forceinline__ I depth() const { return d.o * d.kh * d.kw; }
  __device__ __forceinline__ float a(I m, I k) const {
    const I taps = d.kh * d.kw;
    return wt[(k / taps * d.c + m) * taps + k % taps];
  }
  __device__ __forceinline__ float b(I k, I col) const {
    const I pixels = d.h * d.w, image = col / pixels, pixel = col % pixels;
    const I kx = k % d.kw, ky = k / d.kw % d.kh, oc = k / (d.kw * d.kh);
    const I ty = pixel / d.w + d.ph - ky, tx = pixel % d.w + d.pw - kx;
    if (ty < 0 || tx < 0 || ty % d.sh != 0 || tx % d.sw != 0) return 0.0f;
    const I oy = ty / d.sh, ox = tx / d.sw;
    return oy < d.oh && ox < d.ow ? dy[((image * d.o + oc) * d.oh + oy) * d.ow + ox] : 0.0f;
  }
  __device__ __forceinline__ I out(I m, I col) const {
    const I pixels = d.h * d.w;
    return (col / pixels * d.c + m) * pixels + col % pixels;
  }
};

template <typename I>
struct TjConvFilterGradOperands {  // dw[o, tap] = sum over (image, pixel) of dy[image, o, pixel] x-patch[tap, ...]
  const float* x;
  const float* dy;
  TjConvDims<I> d;
  static constexpr bool a_depth_fastest = true, b_depth_fastest = true;
  __device__ __forceinline__ I rows() const { return d.o; }
  __device__ __forceinline__ I cols() const { return d.c * d.kh * d.kw; }
  __device__ __forceinline__ I depth() const { return d.n * d.oh * d.ow; }
  __device__ __forceinline__ float a(I m, I k) const {
    const I pixels = d.oh * d.ow;
    return dy[(k / pixels * d.o + m) * pixels + k % pixels];
  }
  __device__ __forceinline__ float b(I k, I col) const {
    const I pixels = d.oh * d.ow;
    return d.patch(x, k / pixels, col, k % pixels);
  }
  __device__ __forceinline__ I out(I m, I col) const { return m * cols() + col; }
};

// A thread's share of one operand's stage: element `e` = threadIdx.x + j * TJ_IG_THREADS of the
// stage is s[kk][i], element (i, k0 + kk) of A or (k0 + kk, i) of B, 0 beyond the matrix or the
// slice's depth. Consecutive threads take consecutive depths where the operand is contiguous
// along its depth, else consecutive rows or columns, so their reads coalesce.
#define TJ_IG_LOADS (TJ_IG_TILE * TJ_IG_DEPTH / TJ_IG_THREADS)
template <bool DepthFastest>
__device__ __forceinline__ int tj_ig_depth_of(int e) { return DepthFastest ? e % TJ_IG_DEPTH : e / TJ_IG_TILE; }
template <bool DepthFastest>
__device__ __forceinline__ int tj_ig_line_of(int e) { return DepthFastest ? e / TJ_IG_DEPTH : e % TJ_IG_TILE; }

template <typename I, bool DepthFastest, typename Read>
__device__ __forceinline__ void tj_ig_load(float (&r)[TJ_IG_LOADS], I first, I extent, I k0, I k_end,
                                           const Read& read) {
  for (int j = 0; j < TJ_IG_LOADS; ++j) {
    const int e = threadIdx.x + j * TJ_IG_THREADS;
    const I k = k0 + tj_ig_depth_of<DepthFastest>(e), at = first + tj_ig_line_of<DepthFastest>(e);
    r[j] = k < k_end && at < extent ? read(at, k) : 0.0f;
  }
}
template <bool DepthFastest>
__device__ __forceinline__ void tj_ig_store(float (*s)[TJ_IG_ROW], const float (&r)[TJ_IG_LOADS]) {
  for (int j = 0; j < TJ_IG_LOADS; ++j) {
    const int e = threadIdx.x + j * TJ_IG_THREADS;
    s[tj_ig_depth_of<DepthFastest>(e)][tj_ig_line_of<DepthFastest>(e)] = r[j];
  }
}

// A pass's epilogue: out = act(sum + bias[row]); none where `bias` is null.
struct TjRowEpilogue {
  const float* bias;
  int relu;
  __device__ __forceinline__ float operator()(float sum, long long row) const {
    if (!bias) return sum;
    const float v = sum + bias[row];
    return relu && v <= 0.0f ? 0.0f : v;
  }
};

// The product of `ops` into `out` (through ops.out, `epilogue` applied), its depth cut into
// `splits` slices of `slice` (a multiple of TJ_IG_DEPTH); slice s writes at out + s * rows * cols.
template <typename I, typename Ops>
__device__ __forceinline__ void tj_implicit_gemm(const Ops& ops, float* __restrict__ out, I splits, I slice,
                                                 float (*as)[TJ_IG_ROW], float (*bs)[TJ_IG_ROW],
                                                 const TjRowEpilogue& epilogue) {
  const I rows = ops.rows(), cols = ops.cols(), depth = ops.depth();
  const I tiles_m = (rows + TJ_IG_TILE - 1) / TJ_IG_TILE, tiles_n = (cols + TJ_IG_TILE - 1) / TJ_IG_TILE;
  const I tiles = tiles_m * tiles_n;
  const int tm = threadIdx.x / 16 * TJ_IG_PER_THREAD, tn = threadIdx.x % 16 * TJ_IG_PER_THREAD;
  for (I item = blockIdx.x; item < tiles * splits; item += gridDim.x) {
    const I split = item / tiles, m0 = item % tiles / tiles_n * TJ_IG_TILE, n0 = item % tiles_n * TJ_IG_TILE;
    const I k_begin = split * slice, k_end = k_begin + slice < depth ? k_begin + slice : depth;
    float acc[TJ_IG_PER_THREAD][TJ_IG_PER_THREAD];
    for (int r = 0; r < TJ_IG_PER_THREAD; ++r)
      for (int q = 0; q < TJ_IG_PER_THREAD; ++q) acc[r][q] = 0.0f;
    // The next stage's loads are in registers while this one's products run (software
    // pipelining): their latency hides behind the multiply-adds.
    float a_next[TJ_IG_LOADS], b_next[TJ_IG_LOADS];
    const auto read_a = [&](I m, I k) { return ops.a(m, k); };
    const auto read_b = [&](I n, I k) { return ops.b(k, n); };
    tj_ig_load<I, Ops::a_depth_fastest>(a_next, m0, rows, k_begin, k_end, read_a);
    tj_ig_load<I, Ops::b_depth_fastest>(b_next, n0, cols, k_begin, k_end, read_b);
    for (I k0 = k_begin; k0 < k_end; k0 += TJ_IG_DEPTH) {
      __syncthreads();  // every thread has read the stage before
      tj_ig_store<Ops::a_depth_fastest>(as, a_next);
      tj_ig_store<Ops::b_depth_fastest>(bs, b_next);
      __syncthreads();
      if (k0 + TJ_IG_DEPTH < k_end) {
        tj_ig_load<I, Ops::a_depth_fastest>(a_next, m0, rows, k0 + TJ_IG_DEPTH, k_end, read_a);
        tj_ig_load<I, Ops::b_depth_fastest>(b_next, n0, cols, k0 + TJ_IG_DEPTH, k_end, read_b);
      }
      TJ_WORK(2 * TJ_IG_LOADS);  // the stage's loads a thread makes
      for (int kk = 0; kk < TJ_IG_DEPTH; ++kk) {
        float av[TJ_IG_PER_THREAD], bv[TJ_IG_PER_THREAD];
        for (int r = 0; r < TJ_IG_PER_THREAD; ++r) av[r] = as[kk][tm + r], bv[r] = bs[kk][tn + r];
        for (int r = 0; r < TJ_IG_PER_THREAD; ++r)
          for (int q = 0; q < TJ_IG_PER_THREAD; ++q) acc[r][q] += av[r] * bv[q];
      }
    }
    float* part = out + split * rows * cols;
    for (int r = 0; r < TJ_IG_PER_THREAD; ++r)
      for (int q = 0; q < TJ_IG_PER_THREAD; ++q) {
        const I m = m0 + tm + r, n = n0 + tn + q;
        if (m < rows && n < cols) part[ops.out(m, n)] = epilogue(acc[r][q], m);
      }
  }
}

// Each kernel holds two blocks an SM (__launch_bounds__: at most 128 registers a thread), so
// one block's stores to shared memory overlap the other's products.

// The largest index a convolution's kernels form: the tensors', and the filter gradient's
// slices of partial products.
__device__ __forceinline__ tj_i64 tj_conv_largest_index(const TjConvShape& g, tj_i64 partials) {
  const tj_i64 x = g.n * g.c * g.h * g.w, y = g.n * g.o * g.oh * g.ow, taps = g.c * g.kh * g.kw;
  tj_i64 largest = x > y ? x : y;
  if (partials > largest) largest = partials;
  return taps * g.o > largest ? taps * g.o : largest;
}

// One pass: its operands `a` and `b` (in the order of the Ops struct's members), the product's
// depth in `splits` slices of `slice` (0: the whole depth, one slice), in 32-bit index math where
// every index fits.
template <template <typename> class Ops>
__device__ __forceinline__ void tj_conv_pass(const float* a, const float* b, float* out, const TjConvShape& g,
                                             tj_i64 splits, tj_i64 slice, float (*as)[TJ_IG_ROW],
                                             float (*bs)[TJ_IG_ROW], const TjRowEpilogue& epilogue) {
  if (tj_fits_i32(tj_conv_largest_index(g, splits * g.o * g.c * g.kh * g.kw))) {
    const Ops<int> ops{a, b, TjConvDims<int>(g)};
    tj_implicit_gemm<int>(ops, out, (int)splits, slice ? (int)slice : ops.depth(), as, bs, epilogue);
  } else {
    const Ops<tj_i64> ops{a, b, TjConvDims<tj_i64>(g)};
    tj_implicit_gemm<tj_i64>(ops, out, splits, slice ? slice : ops.depth(), as, bs, epilogue);
  }
}

extern "C" __global__ void __launch_bounds__(TJ_IG_THREADS, 2)
    tj_conv2d_implicit(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, TjConvShape g,
                       const float* __restrict__ bias, int relu) {
  __shared__ float as[TJ_IG_DEPTH][TJ_IG_ROW];
  __shared__ float bs[TJ_IG_DEPTH][TJ_IG_ROW];
  tj_conv_pass<TjConvForwardOperands>(x, w, y, g, 1, 0, as, bs, TjRowEpilogue{bias, relu});
}

extern "C" __global__ void __launch_bounds__(TJ_IG_THREADS, 2)
    tj_conv2d_grad_input_implicit(const float* __restrict__ dy, const float* __restrict__ w, float* __restrict__ dx,
                                  TjConvShape g) {
  __shared__ float as[TJ_IG_DEPTH][TJ_IG_ROW];
  __shared__ float bs[TJ_IG_DEPTH][TJ_IG_ROW];
  tj_conv_pass<TjConvDataGradOperands>(dy, w, dx, g, 1, 0, as, bs, TjRowEpilogue{nullptr, 0});
}

// `out` is dw itself when `splits` is 1, else the scratch of `splits` slices' partial products.
extern "C" __global__ void __launch_bounds__(TJ_IG_THREADS, 2)
    tj_conv2d_grad_filter_implicit(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ out,
                                   TjConvShape g, long long splits, long long slice) {
  __shared__ float as[TJ_IG_DEPTH][TJ_IG_ROW];
  __shared__ float bs[TJ_IG_DEPTH][TJ_IG_ROW];
  tj_conv_pass<TjConvFilterGradOperands>(x, dy, out, g, splits, slice, as, bs, TjRowEpilogue{nullptr, 0});
}

// The filter gradient's slices summed: out[j] = the sum over slices i of parts[i * count + j].
// A block takes 32 consecutive elements (its reads coalesce), 8 threads each: lane y sums slices
// y, y + 8, ... in order, then lane 0 adds the 8 lanes' sums in lane order. A fixed order, so the
// same bits every run, and a chain of dependent reads an eighth of the slices long (264 slices:
// 33 reads a thread). A block-stride loop over the groups of 32.
#define TJ_SUM_COLUMNS 32
#define TJ_SUM_LANES (TJ_IG_THREADS / TJ_SUM_COLUMNS)
extern "C" __global__ void tj_sum_slices(const float* __restrict__ parts, float* __restrict__ out, long long slices,
                                         long long count) {
  __shared__ float lanes[TJ_SUM_LANES][TJ_SUM_COLUMNS];
  const int x = threadIdx.x % TJ_SUM_COLUMNS, y = threadIdx.x / TJ_SUM_COLUMNS;
  for (tj_i64 j0 = (tj_i64)blockIdx.x * TJ_SUM_COLUMNS; j0 < count; j0 += (tj_i64)gridDim.x * TJ_SUM_COLUMNS) {
    const tj_i64 j = j0 + x;
    float sum = 0.0f;
    TJ_WORK((slices + TJ_SUM_LANES - 1) / TJ_SUM_LANES);  // no division in the loop: 64 bits cost little
    if (j < count)
      for (tj_i64 i = y; i < slices; i += TJ_SUM_LANES) sum += parts[i * count + j];
    __syncthreads();  // every thread has read the round before's lanes
    lanes[y][x] = sum;
    __syncthreads();
    if (y == 0 && j < count) {
      float total = lanes[0][x];
      for (int l = 1; l < TJ_SUM_LANES; ++l) total += lanes[l][x];
      out[j] = total;
    }
  }
}
