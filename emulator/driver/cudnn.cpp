// The emulator's cuDNN: the legacy convolution API towerjit binds (runtime/cuda/cudnn.h), with
// cuDNN's contract, computed on the host on the handle's stream in order with the stream's
// other work: per image, im2col into host memory and one OpenBLAS sgemm (col2im after it for
// the data gradient; the filter gradient's images accumulated in image order). Descriptors are
// validated as cuDNN does (positive sizes, NCHW, the output's size, the channel counts), every
// operand must lie in device memory, and a workspace smaller than what the algorithm asked for
// (or not in device memory) is CUDNN_STATUS_BAD_PARAM.
//
// Data types: the legacy API's FLOAT_CONFIG (x, w, y f32, the convolution's type FLOAT) and
// its PSEUDO_BFLOAT16 and PSEUDO_HALF configurations (x, w, y all bf16 or all f16, the
// convolution's type FLOAT: computed in f32, the result rounded to nearest even on store).
// Other combinations (mixed tensor types, TRUE_HALF, doubles, integers) are
// CUDNN_STATUS_NOT_SUPPORTED, as cuDNN's "supported configurations" table makes the ones it
// lacks. 16-bit operands are widened exactly; their products are exact in f32, so on the
// tensor cores as here only the summation order differs (the error bound allows for it).
//
// Its algorithms are a fixed table, not cuDNN's: every algorithm computes the same way here,
// and what differs is what towerjit must choose between: workspace, determinism and time.
// Times are nominal (there is nothing to time on the host), so the "find" is repeatable; the
// table's are in units of TOWERJIT_EMULATED_CUDNN_MS (0.001 ms: less than any kernel takes on
// the emulator, so towerjit's implicit GEMM, timed beside them by events, loses the choice of
// runtime/cuda/conv_choice.h unless a test raises the unit):
//
//   pass             algo                      deterministic  workspace                   time
//   forward          0 IMPLICIT_GEMM           yes            0                           3
//                    1 IMPLICIT_PRECOMP_GEMM   yes            one image's columns         2
//                    2 GEMM                    yes            the batch's columns         1
//   data gradient    0 ALGO_0                  no             0                           0.5
//                    1 ALGO_1                  yes            0                           1
//                    3 FFT_TILING              yes            the batch's columns         0.8
//   filter gradient  0 ALGO_0                  no             0                           0.5
//                    1 ALGO_1                  yes            0                           1
//                    3 ALGO_3                  no             one image's columns         0.7
//                    6 FFT_TILING              yes            the batch's columns         0.8
//
// (columns: C*KH*KW * OH*OW floats per image). The others are CUDNN_STATUS_NOT_SUPPORTED.
// Each gradient's one deterministic algorithm that sums products (ALGO_1, the only one towerjit
// takes in f32) needs no workspace: on the H200 it took none for the workspace-cap case's shape
// (`a cuDNN workspace larger than the memory allowed ...` passed there). The transform
// (FFT_TILING, taken only with TF32 allowed) is faster with one.
//
// Math types: CUDNN_FMA_MATH computes in full f32. Under CUDNN_DEFAULT_MATH and the tensor-op
// math types cuDNN 8 and later may run f32 convolutions on TF32 tensor cores (cuDNN's
// cudnnMathType_t reference; NVIDIA_TF32_OVERRIDE aside), so here both operands are then
// rounded to TF32 (tf32.h) before the products, the worst case a caller must allow for.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dsl/half_float.h"
#include "emulator/driver/emulated_devices.h"
#include "emulator/driver/host_blas.h"
#include "emulator/driver/launch_log.h"
#include "emulator/driver/tf32.h"
#include "jit/knobs.h"

namespace {

using towerjit::emulator::host_sgemm;
using towerjit::emulator::kCblasNoTrans;
using towerjit::emulator::kCblasTrans;
constexpr int kCblasRowMajor = 101;

constexpr int kSuccess = 0, kNotInitialized = 1001, kBadParam = 2000, kNullPointer = 2002, kShapeMismatch = 2008,
              kNotSupported = 3000, kExecutionFailed = 5000;
constexpr int kNchw = 0, kFloat = 0, kHalf = 2, kBfloat16 = 9, kCrossCorrelation = 1, kFmaMath = 3, kDefaultMath = 0;
constexpr int kLastMathType = 3;  // CUDNN_TENSOR_OP_MATH 1, ..._ALLOW_CONVERSION 2, CUDNN_FMA_MATH 3

struct Handle {
  CUstream stream = nullptr;
};
struct Tensor {
  bool set = false;
  int n = 0, c = 0, h = 0, w = 0, type = kFloat;
};
struct Filter {
  bool set = false;
  int k = 0, c = 0, h = 0, w = 0, type = kFloat;
};
struct Conv {
  bool set = false;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, mode = kCrossCorrelation;
  int math = kDefaultMath;
};

// One call's geometry, checked against the descriptors, and the tensors' data type.
struct Geometry {
  long long n, c, h, w, o, kh, kw, oh, ow;
  int sh, sw, ph, pw;
  int type;
  long long cols() const { return c * kh * kw * oh * ow; }  // one image's im2col columns
  std::size_t element_bytes() const { return type == kFloat ? 4 : 2; }
};

int geometry(const Tensor* x, const Filter* f, const Conv* cv, const Tensor* y, Geometry& g) {
  if (!x || !f || !cv || !y) return kNullPointer;
  if (!x->set || !f->set || !cv->set || !y->set) return kBadParam;
  if (cv->mode != kCrossCorrelation || cv->dil_h != 1 || cv->dil_w != 1) return kNotSupported;
  if (x->type != f->type || y->type != x->type) return kNotSupported;  // no mixed configuration
  if (f->c != x->c) return kShapeMismatch;
  const long long oh = (static_cast<long long>(x->h) + 2 * cv->pad_h - f->h) / cv->stride_h + 1;
  const long long ow = (static_cast<long long>(x->w) + 2 * cv->pad_w - f->w) / cv->stride_w + 1;
  if (oh <= 0 || ow <= 0 || y->n != x->n || y->c != f->k || y->h != oh || y->w != ow) return kShapeMismatch;
  g = {x->n, x->c, x->h, x->w, f->k, f->h, f->w, oh, ow, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w, x->type};
  return kSuccess;
}

enum Pass { kForward, kData, kFilter };

struct Algo {
  int id;
  bool deterministic;
  int workspace;  // 0: none, 1: one image's columns, 2: the batch's
  float time;
};

const std::vector<Algo>& table(Pass p) {
  static const std::vector<Algo> fwd = {{2, true, 2, 1.0f}, {1, true, 1, 2.0f}, {0, true, 0, 3.0f}};
  static const std::vector<Algo> data = {{0, false, 0, 0.5f}, {3, true, 2, 0.8f}, {1, true, 0, 1.0f}};
  static const std::vector<Algo> filter = {{0, false, 0, 0.5f}, {3, false, 1, 0.7f}, {6, true, 2, 0.8f},
                                           {1, true, 0, 1.0f}};
  return p == kForward ? fwd : p == kData ? data : filter;
}
int max_count(Pass p) { return p == kForward ? 8 : p == kData ? 6 : 7; }

const Algo* find_algo(Pass p, int id) {
  for (const Algo& a : table(p))
    if (a.id == id) return &a;
  return nullptr;
}

std::size_t workspace_of(const Algo& a, const Geometry& g) {
  const std::size_t per_image = static_cast<std::size_t>(g.cols()) * 4;
  return a.workspace == 0 ? 0 : a.workspace == 1 ? per_image : per_image * static_cast<std::size_t>(g.n);
}

// cudnnConvolution*AlgoPerf_t (one layout for the three).
struct Perf {
  int algo, status;
  float time;
  std::size_t memory;
  int determinism, math_type, reserved[3];
};

// The listing (cudnnGetConvolution*Algorithm_v7) or the find (...AlgorithmEx, `limit` the
// workspace given): every algorithm of the pass, the supported fastest first, those that do
// not fit `limit` or are not supported after them with their status.
int report(Pass p, const Geometry& g, const Conv* cv, int requested, int* returned, Perf* out, std::size_t limit) {
  if (!returned || !out || requested <= 0) return kBadParam;
  const auto unit_ms = static_cast<float>(towerjit::knobs::emulated_cudnn_ms());
  std::vector<Perf> all;
  for (const Algo& a : table(p)) {
    const std::size_t ws = workspace_of(a, g);
    all.push_back({a.id, ws <= limit ? kSuccess : kNotSupported, ws <= limit ? a.time * unit_ms : -1.0f, ws,
                   a.deterministic ? 1 : 0, cv->math, {0, 0, 0}});
  }
  for (int id = 0; id < max_count(p); ++id)
    if (!find_algo(p, id)) all.push_back({id, kNotSupported, -1.0f, 0, 0, cv->math, {0, 0, 0}});
  std::stable_sort(all.begin(), all.end(), [](const Perf& a, const Perf& b) {
    return (a.status == kSuccess) > (b.status == kSuccess);
  });
  *returned = std::min<int>(requested, static_cast<int>(all.size()));
  std::copy(all.begin(), all.begin() + *returned, out);
  return kSuccess;
}

bool inside(const void* p, std::size_t bytes) {
  return bytes == 0 || (p && towerjit::emulator::device_range(reinterpret_cast<std::uintptr_t>(p), bytes));
}

// The checks every compute call makes: the algorithm, its workspace, the operands' memory.
int check_call(Pass p, const Geometry& g, const Conv* cv, int algo, const void* ws, std::size_t ws_bytes,
               const void* a, const void* b, const void* out) {
  const Algo* al = find_algo(p, algo);
  if (!al) return kNotSupported;
  if (ws_bytes < workspace_of(*al, g) || !inside(ws, workspace_of(*al, g))) return kBadParam;
  const std::size_t e = g.element_bytes();
  const std::size_t x = e * static_cast<std::size_t>(g.n * g.c * g.h * g.w);
  const std::size_t w = e * static_cast<std::size_t>(g.o * g.c * g.kh * g.kw);
  const std::size_t y = e * static_cast<std::size_t>(g.n * g.o * g.oh * g.ow);
  const std::size_t sizes[3][3] = {{x, w, y}, {y, w, x}, {x, y, w}};  // a, b, out per pass
  if (!inside(a, sizes[p][0]) || !inside(b, sizes[p][1]) || !inside(out, sizes[p][2])) return kBadParam;
  return kSuccess;
}

// One image's columns: cols[(ci*kh + ky)*kw + kx][oy*ow + ox], zero in the padding.
void im2col(const Geometry& g, const float* x, float* cols) {
  const long long s = g.oh * g.ow;
  for (long long ci = 0; ci < g.c; ++ci)
    for (long long ky = 0; ky < g.kh; ++ky)
      for (long long kx = 0; kx < g.kw; ++kx) {
        float* row = cols + ((ci * g.kh + ky) * g.kw + kx) * s;
        for (long long oy = 0; oy < g.oh; ++oy) {
          const long long iy = oy * g.sh - g.ph + ky;
          for (long long ox = 0; ox < g.ow; ++ox) {
            const long long ix = ox * g.sw - g.pw + kx;
            row[oy * g.ow + ox] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? x[(ci * g.h + iy) * g.w + ix] : 0.0f;
          }
        }
      }
}

// The adjoint: dx (one image, already scaled) += the columns gathered back.
void col2im_add(const Geometry& g, const float* cols, float* dx) {
  const long long s = g.oh * g.ow;
  for (long long ci = 0; ci < g.c; ++ci)
    for (long long ky = 0; ky < g.kh; ++ky)
      for (long long kx = 0; kx < g.kw; ++kx) {
        const float* row = cols + ((ci * g.kh + ky) * g.kw + kx) * s;
        for (long long oy = 0; oy < g.oh; ++oy) {
          const long long iy = oy * g.sh - g.ph + ky;
          if (iy < 0 || iy >= g.h) continue;
          for (long long ox = 0; ox < g.ow; ++ox) {
            const long long ix = ox * g.sw - g.pw + kx;
            if (ix >= 0 && ix < g.w) dx[(ci * g.h + iy) * g.w + ix] += row[oy * g.ow + ox];
          }
        }
      }
}

void compute(Pass p, const Geometry& g, bool tf32, float alpha, float beta, const float* a, const float* b,
             float* out) {
  const long long ckk = g.c * g.kh * g.kw, s = g.oh * g.ow, xi = g.c * g.h * g.w, yi = g.o * s;
  std::vector<float> rounded_a, rounded_b;
  if (tf32) {  // a and b per pass: (x, w), (dy, w), (x, dy)
    const long long a_count[3] = {g.n * xi, g.n * yi, g.n * xi}, b_count[3] = {g.o * ckk, g.o * ckk, g.n * yi};
    rounded_a = towerjit::emulator::tf32_copy(a, static_cast<std::size_t>(a_count[p]));
    rounded_b = towerjit::emulator::tf32_copy(b, static_cast<std::size_t>(b_count[p]));
    a = rounded_a.data(), b = rounded_b.data();
  }
  std::vector<float> cols(static_cast<std::size_t>(ckk * s));
  const towerjit::emulator::HostSgemm gemm = host_sgemm();
  const int o = static_cast<int>(g.o), k = static_cast<int>(ckk), n = static_cast<int>(s);
  for (long long i = 0; i < g.n; ++i) {
    if (p == kForward) {  // y_i[o, S] = alpha W[o, CKK] cols_i[CKK, S] + beta y_i
      im2col(g, a + i * xi, cols.data());
      gemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, o, n, k, alpha, b, k, cols.data(), n, beta, out + i * yi, n);
    } else if (p == kData) {  // cols_i = W^T dy_i; dx_i = alpha col2im(cols_i) + beta dx_i
      gemm(kCblasRowMajor, kCblasTrans, kCblasNoTrans, k, n, o, 1.0f, b, k, a + i * yi, n, 0.0f, cols.data(), n);
      std::vector<float> dx(static_cast<std::size_t>(xi), 0.0f);
      col2im_add(g, cols.data(), dx.data());
      float* dst = out + i * xi;
      for (long long j = 0; j < xi; ++j) dst[j] = alpha * dx[j] + (beta == 0.0f ? 0.0f : beta * dst[j]);
    } else {  // dW = alpha sum_i dy_i[o, S] cols_i^T[S, CKK] + beta dW, images in order
      im2col(g, a + i * xi, cols.data());
      gemm(kCblasRowMajor, kCblasNoTrans, kCblasTrans, o, k, n, alpha, b + i * yi, n, cols.data(), n, i == 0 ? beta : 1.0f, out, k);
    }
  }
  if (g.n == 0 && p == kFilter)
    for (long long j = 0; j < g.o * ckk; ++j) out[j] = beta == 0.0f ? 0.0f : beta * out[j];
}

// The call's launch record for the cost model (launch_log.h), as the implicit GEMM cuDNN's
// kernels compute: forward M = N*OH*OW, N = O, K = C*KH*KW; the data gradient M = N*H*W,
// N = C, K = O*KH*KW; the filter gradient M = O, N = C*KH*KW, K = N*OH*OW. 2 FLOPs a
// multiply-add (the same count for the three passes); bytes: the two operands read and the
// output written (and read when beta is not 0). Workspace traffic is the algorithm's own and
// not counted.
void record(Pass p, const Geometry& g, bool tf32, float beta, towerjit::emulator::Stream& stream) {
  using namespace towerjit::emulator;
  if (!launch_log_enabled()) return;
  const double x = static_cast<double>(g.n * g.c * g.h * g.w), w = static_cast<double>(g.o * g.c * g.kh * g.kw),
               y = static_cast<double>(g.n * g.o * g.oh * g.ow);
  const double outs[3] = {y, x, w};
  const double bytes = static_cast<double>(g.element_bytes()) * (x + w + y + (beta != 0.0f ? outs[p] : 0.0));
  const std::int64_t ckk = g.c * g.kh * g.kw, okk = g.o * g.kh * g.kw;
  const std::array<std::int64_t, 4> gemm[3] = {{g.n * g.oh * g.ow, g.o, ckk, 1},
                                               {g.n * g.h * g.w, g.c, okk, 1},
                                               {g.o, ckk, g.n * g.oh * g.ow, 1}};
  static const char* names[3] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                 "cudnnConvolutionBackwardFilter"};
  const bool half = g.type != kFloat;
  const char* mode = half ? (g.type == kBfloat16 ? " (BF16)" : " (F16)") : tf32 ? " (TF32)" : "";
  record_launch({.name = std::string(names[p]) + mode, .kind = LaunchKind::library, .stream = &stream,
                 .device = device_owning(stream).index(), .bytes = bytes, .flops = 2.0 * y * static_cast<double>(ckk),
                 .gemm = gemm[p], .half_operands = half});
}

// The 16-bit configurations' helpers: the element counts of a, b and the output per pass, and
// a 16-bit tensor widened to f32 (exactly).
std::array<std::size_t, 3> counts(Pass p, const Geometry& g) {
  const auto x = static_cast<std::size_t>(g.n * g.c * g.h * g.w), w = static_cast<std::size_t>(g.o * g.c * g.kh * g.kw),
             y = static_cast<std::size_t>(g.n * g.o * g.oh * g.ow);
  return p == kForward ? std::array{x, w, y} : p == kData ? std::array{y, w, x} : std::array{x, y, w};
}
towerjit::DType dtype_of(int type) { return type == kBfloat16 ? towerjit::DType::bf16 : towerjit::DType::f16; }
std::vector<float> widened(const void* p, std::size_t count, int type) {
  std::vector<float> out(count);
  const auto* bits = static_cast<const std::uint16_t*>(p);
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(towerjit::half_value(bits[i], dtype_of(type)));
  return out;
}

int run(Handle* h, Pass p, const float* alpha, const float* beta, const Geometry& g, const Conv* cv, int algo,
        const void* ws, std::size_t ws_bytes, const void* a, const void* b, void* out) {
  if (!h || !alpha || !beta) return kNullPointer;
  if (const int s = check_call(p, g, cv, algo, ws, ws_bytes, a, b, out)) return s;
  const float al = *alpha, be = *beta;
  towerjit::emulator::Stream& stream = towerjit::emulator::stream_of(h->stream);
  const bool tf32 = cv->math != kFmaMath;
  stream.enqueue([=, &stream] {
    if (g.type == kFloat) {
      compute(p, g, tf32, al, be, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(out));
    } else {
      const auto [ac, bc, oc] = counts(p, g);
      const std::vector<float> wa = widened(a, ac, g.type), wb = widened(b, bc, g.type);
      std::vector<float> wo = be == 0.0f ? std::vector<float>(oc) : widened(out, oc, g.type);
      compute(p, g, tf32, al, be, wa.data(), wb.data(), wo.data());
      const towerjit::DType t = dtype_of(g.type);
      auto* o = static_cast<std::uint16_t*>(out);
      for (std::size_t i = 0; i < oc; ++i) o[i] = towerjit::half_bits(wo[i], t);
    }
    record(p, g, tf32, be, stream);
  });
  return kSuccess;
}

}  // namespace

extern "C" {

std::size_t cudnnGetVersion() { return 91900; }  // the cuDNN 9.19 headers this follows

const char* cudnnGetErrorString(int status) {
  switch (status) {
    case kSuccess: return "CUDNN_STATUS_SUCCESS";
    case kNotInitialized: return "CUDNN_STATUS_NOT_INITIALIZED";
    case kBadParam: return "CUDNN_STATUS_BAD_PARAM";
    case kNullPointer: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case kShapeMismatch: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case kNotSupported: return "CUDNN_STATUS_NOT_SUPPORTED";
    case kExecutionFailed: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}

int cudnnCreate(Handle** h) {
  if (!h) return kNullPointer;
  if (!host_sgemm()) return kNotInitialized;
  *h = new Handle();
  return kSuccess;
}
int cudnnDestroy(Handle* h) {
  delete h;
  return kSuccess;
}
int cudnnSetStream(Handle* h, CUstream s) {
  if (!h) return kNullPointer;
  h->stream = s;
  return kSuccess;
}

int cudnnCreateTensorDescriptor(Tensor** t) { return t ? (*t = new Tensor(), kSuccess) : kNullPointer; }
int cudnnDestroyTensorDescriptor(Tensor* t) { return delete t, kSuccess; }
int cudnnSetTensor4dDescriptor(Tensor* t, int format, int type, int n, int c, int h, int w) {
  if (!t) return kNullPointer;
  if (format != kNchw || (type != kFloat && type != kHalf && type != kBfloat16)) return kNotSupported;
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return kBadParam;
  *t = {true, n, c, h, w, type};
  return kSuccess;
}
int cudnnCreateFilterDescriptor(Filter** f) { return f ? (*f = new Filter(), kSuccess) : kNullPointer; }
int cudnnDestroyFilterDescriptor(Filter* f) { return delete f, kSuccess; }
int cudnnSetFilter4dDescriptor(Filter* f, int type, int format, int k, int c, int h, int w) {
  if (!f) return kNullPointer;
  if (format != kNchw || (type != kFloat && type != kHalf && type != kBfloat16)) return kNotSupported;
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return kBadParam;
  *f = {true, k, c, h, w, type};
  return kSuccess;
}
int cudnnCreateConvolutionDescriptor(Conv** c) { return c ? (*c = new Conv(), kSuccess) : kNullPointer; }
int cudnnDestroyConvolutionDescriptor(Conv* c) { return delete c, kSuccess; }
int cudnnSetConvolution2dDescriptor(Conv* c, int pad_h, int pad_w, int u, int v, int dil_h, int dil_w, int mode,
                                    int type) {
  if (!c) return kNullPointer;
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0) return kBadParam;
  if (type != kFloat) return kNotSupported;
  const int math = c->math;
  *c = {true, pad_h, pad_w, u, v, dil_h, dil_w, mode, math};
  return kSuccess;
}
int cudnnSetConvolutionMathType(Conv* c, int math) {
  if (!c) return kNullPointer;
  if (math < 0 || math > kLastMathType) return kBadParam;
  c->math = math;
  return kSuccess;
}

int cudnnGetConvolutionForwardAlgorithmMaxCount(Handle*, int* n) { return *n = max_count(kForward), kSuccess; }
int cudnnGetConvolutionBackwardDataAlgorithmMaxCount(Handle*, int* n) { return *n = max_count(kData), kSuccess; }
int cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(Handle*, int* n) { return *n = max_count(kFilter), kSuccess; }

int cudnnGetConvolutionForwardAlgorithm_v7(Handle*, const Tensor* x, const Filter* w, const Conv* c,
                                           const Tensor* y, int requested, int* returned, Perf* out) {
  Geometry g{};
  if (const int s = geometry(x, w, c, y, g)) return s;
  return report(kForward, g, c, requested, returned, out, ~std::size_t{0});
}
int cudnnGetConvolutionBackwardDataAlgorithm_v7(Handle*, const Filter* w, const Tensor* dy, const Conv* c,
                                                const Tensor* dx, int requested, int* returned, Perf* out) {
  Geometry g{};
  if (const int s = geometry(dx, w, c, dy, g)) return s;
  return report(kData, g, c, requested, returned, out, ~std::size_t{0});
}
int cudnnGetConvolutionBackwardFilterAlgorithm_v7(Handle*, const Tensor* x, const Tensor* dy, const Conv* c,
                                                  const Filter* dw, int requested, int* returned, Perf* out) {
  Geometry g{};
  if (const int s = geometry(x, dw, c, dy, g)) return s;
  return report(kFilter, g, c, requested, returned, out, ~std::size_t{0});
}

// The finds check their buffers and workspace as the calls do; they run nothing (the times
// are the table's), so they need not wait for the stream.
int cudnnFindConvolutionForwardAlgorithmEx(Handle* h, const Tensor* xd, const void* x, const Filter* wd, const void* w,
                                           const Conv* c, const Tensor* yd, void* y, int requested, int* returned,
                                           Perf* out, void* ws, std::size_t ws_bytes) {
  Geometry g{};
  if (!h) return kNullPointer;
  if (const int s = geometry(xd, wd, c, yd, g)) return s;
  if (!inside(ws, ws_bytes) || check_call(kForward, g, c, 0, nullptr, 0, x, w, y)) return kBadParam;
  return report(kForward, g, c, requested, returned, out, ws_bytes);
}
int cudnnFindConvolutionBackwardDataAlgorithmEx(Handle* h, const Filter* wd, const void* w, const Tensor* dyd,
                                                const void* dy, const Conv* c, const Tensor* dxd, void* dx,
                                                int requested, int* returned, Perf* out, void* ws,
                                                std::size_t ws_bytes) {
  Geometry g{};
  if (!h) return kNullPointer;
  if (const int s = geometry(dxd, wd, c, dyd, g)) return s;
  if (!inside(ws, ws_bytes) || check_call(kData, g, c, 0, nullptr, 0, dy, w, dx)) return kBadParam;
  return report(kData, g, c, requested, returned, out, ws_bytes);
}
int cudnnFindConvolutionBackwardFilterAlgorithmEx(Handle* h, const Tensor* xd, const void* x, const Tensor* dyd,
                                                  const void* dy, const Conv* c, const Filter* dwd, void* dw,
                                                  int requested, int* returned, Perf* out, void* ws,
                                                  std::size_t ws_bytes) {
  Geometry g{};
  if (!h) return kNullPointer;
  if (const int s = geometry(xd, dwd, c, dyd, g)) return s;
  if (!inside(ws, ws_bytes) || check_call(kFilter, g, c, 0, nullptr, 0, x, dy, dw)) return kBadParam;
  return report(kFilter, g, c, requested, returned, out, ws_bytes);
}

int cudnnConvolutionForward(Handle* h, const float* alpha, const Tensor* xd, const void* x, const Filter* wd,
                            const void* w, const Conv* c, int algo, void* ws, std::size_t ws_bytes, const float* beta,
                            const Tensor* yd, void* y) {
  Geometry g{};
  if (const int s = geometry(xd, wd, c, yd, g)) return s;
  return run(h, kForward, alpha, beta, g, c, algo, ws, ws_bytes, x, w, y);
}
int cudnnConvolutionBackwardData(Handle* h, const float* alpha, const Filter* wd, const void* w, const Tensor* dyd,
                                 const void* dy, const Conv* c, int algo, void* ws, std::size_t ws_bytes,
                                 const float* beta, const Tensor* dxd, void* dx) {
  Geometry g{};
  if (const int s = geometry(dxd, wd, c, dyd, g)) return s;
  return run(h, kData, alpha, beta, g, c, algo, ws, ws_bytes, dy, w, dx);
}
int cudnnConvolutionBackwardFilter(Handle* h, const float* alpha, const Tensor* xd, const void* x, const Tensor* dyd,
                                   const void* dy, const Conv* c, int algo, void* ws, std::size_t ws_bytes,
                                   const float* beta, const Filter* dwd, void* dw) {
  Geometry g{};
  if (const int s = geometry(xd, dwd, c, dyd, g)) return s;
  return run(h, kFilter, alpha, beta, g, c, algo, ws, ws_bytes, x, dy, dw);
}

}  // extern "C"
