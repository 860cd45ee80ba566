// The emulator's cuBLASLt: the calls towerjit makes (runtime/cuda/cublaslt.h), with cuBLASLt's
// contract checked and the product computed on the host by OpenBLAS on the given stream, in
// order with the stream's other work.
//
// What is checked, as cuBLASLt would refuse it: descriptor attributes of the wrong size or
// value, data and compute types other than the modelled ones (below), layouts whose shapes or batch counts do not
// agree with the operation, operands outside device memory or less aligned than the preference
// promised when the algorithm was chosen (256 bytes unless told less), an algorithm the
// heuristic did not give for this problem, and a workspace smaller than the algorithm asked for
// (or outside device memory). The emulated algorithm asks for kAlgoWorkspace bytes when the preference allows
// that much, so a caller that passes less than it reserved is caught.
//
// bf16 and f16 operands (CUDA_R_16BF, CUDA_R_16F for A and B; C and D CUDA_R_32F; compute
// CUBLAS_COMPUTE_32F, as cuBLASLt's table of supported type combinations lists): each element
// widened to f32 exactly (dsl/half_float.h), then the f32 product. A product of two bf16 or
// two f16 numbers is exact in f32 (8 + 8 or 11 + 11 significant bits), so only the f32 sums
// round, as on the tensor cores, whose summation order is not modelled (the bound allows it).
// TF32 compute with 16-bit inputs is refused (cuBLASLt lists FAST_TF32 for f32 inputs only).
//
// Epilogues: CUBLASLT_EPILOGUE_DEFAULT, BIAS and RELU_BIAS, with an f32 bias (the bias data
// type unset, -1, or CUDA_R_32F) of one value per row of D, shared by every matrix of a batch
// (the default bias batch stride, 0, the only one modelled): after the product, each element
// of D becomes D + bias[row], then with RELU_BIAS max(that, 0) with a NaN kept (as towerjit's
// relu; whether cuBLASLt's ReLU keeps a NaN is not documented: docs/cuda.md). A bias epilogue
// without a bias pointer, or one outside device memory or not 4-byte aligned, is refused at
// the call. Other epilogues (GELU, the auxiliary outputs, the gradients) are NOT_SUPPORTED.
//
// TF32 (CUBLAS_COMPUTE_32F_FAST_TF32): each element of A and B is rounded to TF32 (10 stored
// mantissa bits) before the product, round to nearest with ties away from zero, as PTX's
// cvt.rna.tf32.f32 does (PTX ISA, "cvt": .rna is the one rounding sm_80 offers for .tf32) and
// as cuBLAS and CUTLASS round their inputs (CUTLASS's default float -> tfloat32_t conversion is
// round_half_ulp_truncate, add half an ulp then truncate, the same rounding; PyTorch's TF32
// note says the inputs are rounded, not truncated, pytorch/pytorch#49625). The mma instruction
// itself would ignore the 13 low bits of an unrounded input (truncation, twice the error); that
// is what Triton did before it rounded (triton-lang/triton#4574, #9295). The products of two
// TF32 values are exact in f32 and are summed in f32 here; the tensor cores' own summation
// order and rounding are not modelled (the error bound allows for them).
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsl/half_float.h"
#include "emulator/driver/emulated_devices.h"
#include "emulator/driver/host_blas.h"
#include "emulator/driver/launch_log.h"
#include "emulator/driver/tf32.h"
#include "emulator/kernel/block_scheduler.h"

using namespace towerjit::emulator;

namespace {

constexpr int kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7, kNotSupported = 15;
constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;     // CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF
constexpr int kCompute32F = 68, kCompute32FFastTf32 = 77;
constexpr uint32_t kEpilogueDefault = 1, kEpilogueBias = 4, kEpilogueReluBias = 6;
constexpr uint64_t kAlgoMagic = 0x746a4c74616c676full;  // "tjLtalgo"
constexpr size_t kAlgoWorkspace = size_t{1} << 20;

struct LtHandle {};
struct Desc {
  int compute = kCompute32F;
  int32_t trans_a = 0, trans_b = 0;
  uint32_t epilogue = kEpilogueDefault;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
};

bool modelled_epilogue(const Desc& d) {
  return d.epilogue == kEpilogueDefault || d.epilogue == kEpilogueBias || d.epilogue == kEpilogueReluBias;
}
struct Layout {
  int type = kR32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct Preference {
  uint64_t max_workspace = 0;
  uint32_t reductions = 7, search = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: what the caller promises, in bytes
};
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_bytes;
  int state;
  float waves;
  int reserved[4];
};

template <typename T>
bool read(const void* buf, size_t size, T& out) {
  if (!buf || size != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

// The problem an algorithm was chosen for: op(A) is m x k, op(B) k x n, D m x n (column-major).
struct Problem {
  uint64_t m, n, k;
  int32_t batch;
  bool ok;
  int operands;  // A's and B's type
};

// Bytes an element of a layout's type.
uint64_t element_bytes(int type) { return type == kR32F ? 4 : 2; }

// The type combinations modelled: A and B alike (f32, bf16 or f16), C and D f32; 16-bit
// operands with CUBLAS_COMPUTE_32F only.
bool supported_types(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dd) {
  if (a.type != b.type || c.type != kR32F || dd.type != kR32F) return false;
  return a.type == kR32F || d.compute == kCompute32F;
}

Problem problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dd) {
  const uint64_t am = d.trans_a ? a.cols : a.rows, ak = d.trans_a ? a.rows : a.cols;
  const uint64_t bk = d.trans_b ? b.cols : b.rows, bn = d.trans_b ? b.rows : b.cols;
  const bool same_cd = c.rows == dd.rows && c.cols == dd.cols && c.ld == dd.ld && c.batch == dd.batch &&
                       c.stride == dd.stride;
  const bool ok = same_cd && am == dd.rows && bn == dd.cols && ak == bk && a.batch == dd.batch &&
                  b.batch == dd.batch && dd.batch >= 1;
  return {dd.rows, dd.cols, ak, dd.batch, ok, a.type};
}

uint64_t fingerprint(const Desc& d, const Problem& p) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {p.m, p.n, p.k, static_cast<uint64_t>(p.batch), static_cast<uint64_t>(d.compute), uint64_t(p.operands),
                     static_cast<uint64_t>(d.trans_a), static_cast<uint64_t>(d.trans_b), uint64_t{d.epilogue}})
    h = (h ^ v) * 1099511628211ull;
  return h;
}

bool inside(const void* p, const Layout& l, int32_t i) {
  if (l.rows == 0 || l.cols == 0) return true;
  const uint64_t size = element_bytes(l.type);
  const auto first = reinterpret_cast<std::uintptr_t>(p) + i * l.stride * size;
  return device_range(first, size * ((l.cols - 1) * l.ld + l.rows));
}

// The elements of one bf16 or f16 matrix of `l`, widened to f32 (exactly), in a copy of the
// same layout.
std::vector<float> widened_copy(const uint16_t* p, const Layout& l) {
  const towerjit::DType t = l.type == kR16BF ? towerjit::DType::bf16 : towerjit::DType::f16;
  std::vector<float> out(l.cols == 0 ? 0 : (l.cols - 1) * l.ld + l.rows);
  for (uint64_t j = 0; j < l.cols; ++j)
    for (uint64_t r = 0; r < l.rows; ++r) out[j * l.ld + r] = static_cast<float>(towerjit::half_value(p[j * l.ld + r], t));
  return out;
}

// The elements of one matrix of `l`, rounded to TF32, in a copy of the same layout.
std::vector<float> tf32_copy(const float* p, const Layout& l) {
  std::vector<float> out(l.cols == 0 ? 0 : (l.cols - 1) * l.ld + l.rows);
  for (uint64_t j = 0; j < l.cols; ++j)
    for (uint64_t r = 0; r < l.rows; ++r) out[j * l.ld + r] = round_to_tf32(p[j * l.ld + r]);
  return out;
}

}  // namespace

extern "C" {

int cublasLtCreate(LtHandle** h) {
  if (!h) return kInvalidValue;
  if (!host_sgemm()) return kNotInitialized;
  *h = new LtHandle();
  return kSuccess;
}
int cublasLtDestroy(LtHandle* h) {
  delete h;
  return kSuccess;
}
size_t cublasLtGetVersion() { return 130000; }
const char* cublasLtGetStatusName(int status) {
  switch (status) {
    case kSuccess: return "CUBLAS_STATUS_SUCCESS";
    case kNotInitialized: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case kInvalidValue: return "CUBLAS_STATUS_INVALID_VALUE";
    case kNotSupported: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

int cublasLtMatmulDescCreate(Desc** d, int compute, int scale) {
  if (!d) return kInvalidValue;
  if ((compute != kCompute32F && compute != kCompute32FFastTf32) || scale != kR32F) return kNotSupported;
  *d = new Desc{.compute = compute};
  return kSuccess;
}
int cublasLtMatmulDescDestroy(Desc* d) {
  delete d;
  return kSuccess;
}
int cublasLtMatmulDescSetAttribute(Desc* d, int attr, const void* buf, size_t size) {
  if (!d) return kInvalidValue;
  switch (attr) {
    case 3: return read(buf, size, d->trans_a) && (d->trans_a == 0 || d->trans_a == 1) ? kSuccess : kInvalidValue;
    case 4: return read(buf, size, d->trans_b) && (d->trans_b == 0 || d->trans_b == 1) ? kSuccess : kInvalidValue;
    case 7: return read(buf, size, d->epilogue) ? kSuccess : kInvalidValue;
    case 8: return read(buf, size, d->bias) ? kSuccess : kInvalidValue;
    case 26:
      if (!read(buf, size, d->bias_type)) return kInvalidValue;
      return d->bias_type == -1 || d->bias_type == kR32F ? kSuccess : kNotSupported;  // f32 D: an f32 bias
    default: return kNotSupported;  // not modelled
  }
}

int cublasLtMatrixLayoutCreate(Layout** l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (!l) return kInvalidValue;
  if (type != kR32F && type != kR16F && type != kR16BF) return kNotSupported;
  if (ld < 0 || (rows > 0 && static_cast<uint64_t>(ld) < rows)) return kInvalidValue;  // columns would overlap
  *l = new Layout{.type = type, .rows = rows, .cols = cols, .ld = ld};
  return kSuccess;
}
int cublasLtMatrixLayoutDestroy(Layout* l) {
  delete l;
  return kSuccess;
}
int cublasLtMatrixLayoutSetAttribute(Layout* l, int attr, const void* buf, size_t size) {
  if (!l) return kInvalidValue;
  switch (attr) {
    case 5: return read(buf, size, l->batch) && l->batch >= 1 ? kSuccess : kInvalidValue;
    case 6: return read(buf, size, l->stride) && l->stride >= 0 ? kSuccess : kInvalidValue;
    default: return kNotSupported;  // other orders, planar complex: not modelled
  }
}

int cublasLtMatmulPreferenceCreate(Preference** p) {
  if (!p) return kInvalidValue;
  *p = new Preference();
  return kSuccess;
}
int cublasLtMatmulPreferenceDestroy(Preference* p) {
  delete p;
  return kSuccess;
}
int cublasLtMatmulPreferenceSetAttribute(Preference* p, int attr, const void* buf, size_t size) {
  if (!p) return kInvalidValue;
  switch (attr) {
    case 0: return read(buf, size, p->search) ? kSuccess : kInvalidValue;
    case 1: return read(buf, size, p->max_workspace) ? kSuccess : kInvalidValue;
    case 3: return read(buf, size, p->reductions) && p->reductions <= 7 ? kSuccess : kInvalidValue;
    case 5: case 6: case 7: case 8: {
      uint32_t& a = p->align[attr - 5];
      return read(buf, size, a) && a >= 1 && (a & (a - 1)) == 0 ? kSuccess : kInvalidValue;
    }
    default: return kNotSupported;
  }
}

// One algorithm: no split-K (so it passes any reduction-scheme filter), asking for
// kAlgoWorkspace bytes of workspace when the preference allows that much, else none.
int cublasLtMatmulAlgoGetHeuristic(LtHandle* h, Desc* d, Layout* a, Layout* b, Layout* c, Layout* dd,
                                   Preference* pref, int requested, HeuristicResult* results, int* returned) {
  if (!h || !d || !a || !b || !c || !dd || !pref || !results || !returned || requested <= 0) return kInvalidValue;
  const Problem p = problem(*d, *a, *b, *c, *dd);
  if (!p.ok) return kInvalidValue;
  if (!modelled_epilogue(*d)) return kNotSupported;
  if (!supported_types(*d, *a, *b, *c, *dd)) return kNotSupported;
  HeuristicResult r{};
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = pref->max_workspace >= kAlgoWorkspace ? kAlgoWorkspace : 0;
  r.algo.data[2] = fingerprint(*d, p);
  // The alignment the algorithm relies on: as cuBLASLt's kernels, the most the caller promised
  // (loads of up to 16 bytes need operands aligned to them; 4 is a float's own).
  for (int i = 0; i < 4; ++i) r.algo.data[3 + i] = pref->align[i] < 16 ? pref->align[i] : 16;
  r.workspace_bytes = r.algo.data[1];
  r.state = kSuccess;
  r.waves = 1.0f;
  results[0] = r;
  *returned = 1;
  return kSuccess;
}

int cublasLtMatmul(LtHandle* h, Desc* d, const void* alpha, const void* a, Layout* al, const void* b, Layout* bl,
                   const void* beta, const void* c, Layout* cl, void* dptr, Layout* dl, const Algo* algo,
                   void* workspace, size_t workspace_bytes, CUstream stream) {
  if (!h || !d || !alpha || !beta || !al || !bl || !cl || !dl) return kInvalidValue;
  const Problem p = problem(*d, *al, *bl, *cl, *dl);
  if (!p.ok) return kInvalidValue;
  if (!modelled_epilogue(*d)) return kNotSupported;
  if (!supported_types(*d, *al, *bl, *cl, *dl)) return kNotSupported;
  const bool with_bias = d->epilogue != kEpilogueDefault, relu = d->epilogue == kEpilogueReluBias;
  const auto* bias = static_cast<const float*>(d->bias);
  if (with_bias && (!bias || reinterpret_cast<std::uintptr_t>(bias) % 4 != 0 ||
                    (p.m > 0 && !device_range(reinterpret_cast<std::uintptr_t>(bias), 4 * p.m))))
    return kInvalidValue;
  size_t needed = 0;
  uint64_t align[4] = {4, 4, 4, 4};
  if (algo) {  // null: cuBLASLt chooses one itself, with no workspace
    if (algo->data[0] != kAlgoMagic || algo->data[2] != fingerprint(*d, p)) return kInvalidValue;
    needed = algo->data[1];
    for (int i = 0; i < 4; ++i) align[i] = algo->data[3 + i];
  }
  if (workspace_bytes < needed) return kInvalidValue;
  if (needed > 0 && !device_range(reinterpret_cast<std::uintptr_t>(workspace), needed)) return kInvalidValue;
  const float al_v = *static_cast<const float*>(alpha), be_v = *static_cast<const float*>(beta);
  if (be_v != 0 && c != dptr) return kNotSupported;  // not modelled: towerjit writes C in place
  auto* fd = static_cast<float*>(dptr);
  auto aligned = [](const void* base, const Layout& l, int32_t i, uint64_t to) {
    return (reinterpret_cast<std::uintptr_t>(base) + i * l.stride * element_bytes(l.type)) % to == 0;
  };
  const void* fa = a;
  const void* fb = b;
  for (int32_t i = 0; i < p.batch; ++i) {
    if (!inside(fa, *al, i) || !inside(fb, *bl, i) || !inside(fd, *dl, i)) return kInvalidValue;
    // An operand less aligned than the algorithm was chosen for: cuBLASLt refuses it.
    if (!aligned(fa, *al, i, align[0]) || !aligned(fb, *bl, i, align[1]) || !aligned(fd, *dl, i, align[3]))
      return kInvalidValue;
  }
  const Layout la = *al, lb = *bl, ld = *dl;
  const bool tf32 = d->compute == kCompute32FFastTf32;
  const bool half = al->type != kR32F;
  const char* name = tf32 ? "cublasLtMatmul (TF32)" : al->type == kR16BF ? "cublasLtMatmul (BF16)"
                     : half                      ? "cublasLtMatmul (F16)"
                                                 : "cublasLtMatmul";
  const double operand_bytes = static_cast<double>(element_bytes(al->type));
  const int ta = d->trans_a ? kCblasTrans : kCblasNoTrans, tb = d->trans_b ? kCblasTrans : kCblasNoTrans;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  Stream& queue = stream_of(stream);
  queue.enqueue([=, &queue] {
    if (m == 0 || n == 0) return;
    for (int32_t i = 0; i < p.batch; ++i) {
      const float* ai = static_cast<const float*>(fa) + i * la.stride;
      const float* bi = static_cast<const float*>(fb) + i * lb.stride;
      std::vector<float> ra, rb;
      if (tf32) ra = tf32_copy(ai, la), rb = tf32_copy(bi, lb), ai = ra.data(), bi = rb.data();
      if (half) {
        ra = widened_copy(static_cast<const uint16_t*>(fa) + i * la.stride, la);
        rb = widened_copy(static_cast<const uint16_t*>(fb) + i * lb.stride, lb);
        ai = ra.data(), bi = rb.data();
      }
      host_sgemm()(kCblasColMajor, ta, tb, m, n, k, al_v, ai, static_cast<int>(la.ld), bi, static_cast<int>(lb.ld),
                   be_v, fd + i * ld.stride, static_cast<int>(ld.ld));
      if (!with_bias) continue;
      float* di = fd + i * ld.stride;
      for (int j = 0; j < n; ++j)
        for (int r = 0; r < m; ++r) {
          const float v = di[j * ld.ld + r] + bias[r];
          di[j * ld.ld + r] = relu && v <= 0.0f ? 0.0f : v;
        }
    }
    // For the cost model (launch_log.h): 2mnk FLOPs a product; A and B read (2 or 4 bytes an
    // element), D written (and read as C when beta is not 0), 4 bytes an element; a bias
    // epilogue reads the bias (once a batch, as the product reads its operands). Its m·n adds
    // are not counted: the record's FLOPs stay the product's 2mnk, beside which they vanish.
    if (launch_log_enabled()) {
      const double mm = m, nn = n, kk = k, count = p.batch, bias_bytes = with_bias ? 4 * mm : 0;
      record_launch({.name = name, .kind = LaunchKind::library,
                     .stream = &queue, .device = device_owning(queue).index(),
                     .bytes = count * (operand_bytes * (mm * kk + kk * nn) + 4 * (be_v != 0.0f ? 2 : 1) * mm * nn +
                                       bias_bytes),
                     .flops = 2 * count * mm * nn * kk, .gemm = {m, n, k, p.batch},
                     .half_operands = half});
    }
  });
  return kSuccess;
}

}  // extern "C"
