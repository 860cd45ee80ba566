#include "runtime/cuda/cublaslt.h"

#include <algorithm>
#include <limits>

#include "dsl/error.h"
#include "runtime/cuda/toolkit_library.h"

namespace towerjit::cuda {
namespace {

struct Loaded {
  CublasLtApi api;
  CublasLtLoad load;
};

Loaded* make_loaded() {
  auto* l = new Loaded();  // lives for the process, as the library stays loaded
  const ToolkitLibrary lib = open_toolkit_library({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                                                  {"/usr/local/cuda/lib64/"});
  l->load.tried = lib.tried;
  if (!lib.handle) return l;
  l->api.library = lib.name;
  std::string missing;
#define TOWERJIT_CUBLASLT_BIND(member, name, symbol, signature) bind_symbol(lib.handle, l->api.member, #symbol, missing);
  TOWERJIT_CUBLASLT_FUNCTIONS(TOWERJIT_CUBLASLT_BIND)
#undef TOWERJIT_CUBLASLT_BIND
  if (!missing.empty()) {
    l->load.tried += " (" + lib.name + " lacks " + missing + ")";
    return l;
  }
  l->load.api = &l->api;
  return l;
}

void check_lt(const CublasLtApi& api, CublasStatus s, const char* call, const std::string& context,
              std::source_location loc = std::source_location::current()) {
  if (s == 0) return;
  const char* name = api.GetStatusName ? api.GetStatusName(s) : nullptr;
  user_check(false, loc) << "cuBLASLt call " << call << " failed: "
                         << (name ? name : "cublasStatus_t " + std::to_string(s)) << context;
}

template <typename T>
void set(const CublasLtApi& api, CublasStatus (*setter)(T, int, const void*, size_t), T target, int attr,
         const auto& value, const char* call, const std::string& what) {
  check_lt(api, setter(target, attr, &value, sizeof(value)), call, " for " + what);
}

// The largest power of two up to 256 that divides the address of every matrix of the batch
// (`size`: bytes an element).
uint32_t alignment(CUdeviceptr p, int64_t stride, int64_t batch, int64_t size) {
  uint64_t bits = p | (batch > 1 ? static_cast<uint64_t>(stride * size) : 0) | 256;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

}  // namespace

const CublasLtLoad& cublaslt_load() {
  static const Loaded* l = make_loaded();
  return l->load;
}

CublasLt::CublasLt(const CublasLtApi& api, DeviceContext& device, const Stream& stream, bool tf32,
                   std::source_location loc)
    : api_(&api), device_(&device), stream_(&stream), tf32_(tf32) {
  device.make_current();
  check_lt(api, api.Create(&handle_), "cublasLtCreate", " on " + device.str(), loc);
  workspace_ = device.allocate(kWorkspaceBytes, loc);
}

void CublasLt::destroy(Plan& p) {
  if (p.a) api_->MatrixLayoutDestroy(p.a);
  if (p.b) api_->MatrixLayoutDestroy(p.b);
  if (p.c) api_->MatrixLayoutDestroy(p.c);
  if (p.desc) api_->MatmulDescDestroy(p.desc);
  if (p.preference) api_->MatmulPreferenceDestroy(p.preference);
  p = Plan{};
}

CublasLt::~CublasLt() {
  try {
    device_->make_current();
    for (auto& [key, p] : plans_) destroy(p);
    if (handle_) api_->Destroy(handle_);
  } catch (...) {
  }
}

// cuBLASLt's epilogue for ours.
static uint32_t lt_epilogue(kir::Epilogue e) {
  switch (e) {
    case kir::Epilogue::bias: return kLtEpilogueBias;
    case kir::Epilogue::bias_relu: return kLtEpilogueReluBias;
    default: return kLtEpilogueDefault;
  }
}

CublasLt::Plan& CublasLt::plan(const LtPlanKey& key, CUdeviceptr bias, const std::string& what) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  try {
    const CublasLtApi& api = *api_;
    // TF32 rounds f32 inputs; 16-bit inputs are exact in it and take plain CUBLAS_COMPUTE_32F.
    const bool fast_tf32 = tf32_ && key.operands == DType::f32;
    check_lt(api, api.MatmulDescCreate(&p.desc, fast_tf32 ? kCublasCompute32FFastTf32 : kCublasCompute32F, kCudaR32F),
             "cublasLtMatmulDescCreate", " for " + what);
    // The column-major view: cuBLASLt's A is our b, its B our a, its C our c transposed.
    const int32_t op_first = key.trans_b ? kCublasOpT : kCublasOpN, op_second = key.trans_a ? kCublasOpT : kCublasOpN;
    set(api, api.MatmulDescSetAttribute, p.desc, kLtDescTransA, op_first, "cublasLtMatmulDescSetAttribute", what);
    set(api, api.MatmulDescSetAttribute, p.desc, kLtDescTransB, op_second, "cublasLtMatmulDescSetAttribute", what);
    if (key.epilogue != kir::Epilogue::none) {
      // D's rows are our columns (the swapped view), so cuBLASLt's per-row bias is ours per column.
      const uint32_t epilogue = lt_epilogue(key.epilogue);
      const int32_t bias_type = kCudaR32F;  // D's type, cuBLASLt's default for it; said outright
      const void* bias_ptr = reinterpret_cast<const void*>(bias);  // the heuristic reads its alignment
      set(api, api.MatmulDescSetAttribute, p.desc, kLtDescEpilogue, epilogue, "cublasLtMatmulDescSetAttribute", what);
      set(api, api.MatmulDescSetAttribute, p.desc, kLtDescBiasDataType, bias_type, "cublasLtMatmulDescSetAttribute",
          what);
      set(api, api.MatmulDescSetAttribute, p.desc, kLtDescBiasPointer, bias_ptr, "cublasLtMatmulDescSetAttribute",
          what);
    }
    const int operand_type = key.operands == DType::bf16 ? kCudaR16BF : key.operands == DType::f16 ? kCudaR16F : kCudaR32F;
    auto layout = [&](LtMatrixLayout& l, int type, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
      check_lt(api, api.MatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
               "cublasLtMatrixLayoutCreate", " for " + what);
      const int32_t count = static_cast<int32_t>(key.batch);
      set(api, api.MatrixLayoutSetAttribute, l, kLtLayoutBatchCount, count, "cublasLtMatrixLayoutSetAttribute", what);
      set(api, api.MatrixLayoutSetAttribute, l, kLtLayoutBatchStride, stride, "cublasLtMatrixLayoutSetAttribute",
          what);
    };
    // Stored column-major: b is n x k (k x n transposed), a is k x m (m x k transposed), c is n x m.
    layout(p.a, operand_type, key.trans_b ? key.k : key.n, key.trans_b ? key.n : key.k, key.ldb, key.stride_b);
    layout(p.b, operand_type, key.trans_a ? key.m : key.k, key.trans_a ? key.k : key.m, key.lda, key.stride_a);
    layout(p.c, kCudaR32F, key.n, key.m, key.ldc, key.stride_c);
    check_lt(api, api.MatmulPreferenceCreate(&p.preference), "cublasLtMatmulPreferenceCreate", " for " + what);
    const char* pref_call = "cublasLtMatmulPreferenceSetAttribute";
    const uint64_t max_workspace = kWorkspaceBytes;
    set(api, api.MatmulPreferenceSetAttribute, p.preference, kLtPrefMaxWorkspace, max_workspace, pref_call, what);
    // Split-K allowed: a weight gradient's product (m x n small, k the batch) otherwise runs on a
    // few SMs. On the H200 the MLP's three at batch 4096 took 1.9 ms of a 2.3 ms step without it
    // (ncu; one 128x256 tile per 7 x 2 output blocks of 132 SMs). Each scheme adds its parts in a
    // fixed order and the algorithm is fixed per shape, so runs still repeat bit for bit.
    const uint32_t reductions = kLtReductionAny;
    set(api, api.MatmulPreferenceSetAttribute, p.preference, kLtPrefReductionMask, reductions, pref_call, what);
    // cuBLASLt's A, B, C and D: our b, a, c and c.
    const uint32_t aligns[4] = {key.align_b, key.align_a, key.align_c, key.align_c};
    for (int i = 0; i < 4; ++i)
      set(api, api.MatmulPreferenceSetAttribute, p.preference, kLtPrefMinAlignmentA + i, aligns[i], pref_call, what);
    LtHeuristicResult result{};
    int found = 0;
    ++heuristic_calls_;
    const CublasStatus s = api.MatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, p.preference, 1, &result,
                                                      &found);
    if (s == kCublasStatusNotSupported || (s == 0 && (found < 1 || result.state != 0))) return p;  // no algorithm
    check_lt(api, s, "cublasLtMatmulAlgoGetHeuristic", " for " + what);
    internal_check(result.workspace_bytes <= kWorkspaceBytes)
        << "cuBLASLt proposed an algorithm needing " << result.workspace_bytes << " bytes of workspace, over the "
        << kWorkspaceBytes << " it was allowed, for " << what;
    p.algo = result.algo, p.workspace_bytes = result.workspace_bytes, p.found = true;
  } catch (...) {
    destroy(p);
    plans_.erase(key);
    throw;
  }
  return p;
}

bool CublasLt::matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, CUdeviceptr a, int64_t lda,
                      int64_t stride_a, CUdeviceptr b, int64_t ldb, int64_t stride_b, CUdeviceptr c, int64_t ldc,
                      int64_t stride_c, int64_t batch, const std::string& what, DType operands,
                      const LtEpilogue& epilogue) {
  if (m == 0 || n == 0 || batch == 0) return true;
  const int64_t size = dtype_bytes(operands);
  // The batch count is 32-bit: a longer batch goes as several calls.
  constexpr int64_t kMaxBatch = std::numeric_limits<int32_t>::max();
  if (batch > kMaxBatch) {
    for (int64_t first = 0; first < batch; first += kMaxBatch) {
      const int64_t count = std::min(kMaxBatch, batch - first);
      if (!matmul(trans_a, trans_b, m, n, k, a + first * stride_a * size, lda, stride_a, b + first * stride_b * size,
                  ldb, stride_b, c + first * stride_c * 4, ldc, stride_c, count, what, operands, epilogue))
        return false;  // the caller's cuBLAS then writes the whole batch again (beta 0): correct
    }
    return true;
  }
  device_->make_current();
  const LtPlanKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                      alignment(a, stride_a, batch, size), alignment(b, stride_b, batch, size),
                      alignment(c, stride_c, batch, 4), operands, epilogue.kind,
                      epilogue.kind == kir::Epilogue::none ? 0u : alignment(epilogue.bias, 0, 1, 4)};
  Plan& p = plan(key, epilogue.bias, what);
  if (!p.found) return false;
  if (epilogue.kind != kir::Epilogue::none) {  // the plan is cached per shape; the bias is this call's
    const void* bias_ptr = reinterpret_cast<const void*>(epilogue.bias);
    set(*api_, api_->MatmulDescSetAttribute, p.desc, kLtDescBiasPointer, bias_ptr, "cublasLtMatmulDescSetAttribute",
        what);
  }
  const float alpha = 1.0f, beta = 0.0f;
  const auto* pa = reinterpret_cast<const void*>(a);
  const auto* pb = reinterpret_cast<const void*>(b);
  auto* pc = reinterpret_cast<void*>(c);
  check_lt(*api_,
           api_->Matmul(handle_, p.desc, &alpha, pb, p.a, pa, p.b, &beta, pc, p.c, pc, p.c, &p.algo,
                        reinterpret_cast<void*>(workspace_.ptr()), kWorkspaceBytes, stream_->handle()),
           "cublasLtMatmul", " for " + what);
  return true;
}

}  // namespace towerjit::cuda
