// Compile-time checks that the hand-written declarations of the driver API
// (runtime/cuda/driver_api.h), cuBLAS (runtime/cuda/cublas.h), cuBLASLt (runtime/cuda/cublaslt.h),
// cuDNN (runtime/cuda/cudnn.h, where cudnn.h is installed) and NCCL (runtime/cuda/nccl.h,
// where nccl.h is installed) match the toolkit's headers: every entry point's parameters, the versioned symbol each name maps to
// (cuMemAlloc -> cuMemAlloc_v2), and the enum values towerjit passes. Built wherever the
// toolkit's headers are found (tests_gpu/CMakeLists.txt), GPU or not: the build is the test.
#if defined(TOWERJIT_HAVE_CUDA_HEADERS)

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#define TOWERJIT_HAVE_NCCL_HEADER 1
#endif
#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define TOWERJIT_HAVE_CUDNN_HEADER 1
#endif

#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "runtime/cuda/cublas.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/nccl.h"

namespace {

using namespace towerjit::cuda;

// A parameter as passed: enums (CUdevice_attribute, CUresult, cublasOperation_t) as int, which
// is how towerjit declares them.
// cuBLASLt's descriptors are the toolkit's anonymous structs; towerjit has its own of the same
// size (checked below), so a parameter of theirs is passed as ours.
template <typename T>
struct PassedAs {
  using type = std::conditional_t<std::is_enum_v<T>, int, T>;
};
template <> struct PassedAs<::cublasLtMatrixLayout_t> { using type = LtMatrixLayout; };
template <> struct PassedAs<::cublasLtMatmulDesc_t> { using type = LtMatmulDesc; };
template <> struct PassedAs<::cublasLtMatmulPreference_t> { using type = LtMatmulPreference; };
template <> struct PassedAs<const ::cublasLtMatmulAlgo_t*> { using type = const LtMatmulAlgo*; };
template <> struct PassedAs<::cublasLtMatmulHeuristicResult_t*> { using type = LtHeuristicResult*; };
template <> struct PassedAs<::cublasLtMatmulDesc_t*> { using type = LtMatmulDesc*; };
template <> struct PassedAs<::cublasLtMatrixLayout_t*> { using type = LtMatrixLayout*; };
template <> struct PassedAs<::cublasLtMatmulPreference_t*> { using type = LtMatmulPreference*; };
#if defined(TOWERJIT_HAVE_CUDNN_HEADER)
// cuDNN's three perf structs are one CudnnAlgoPerf to towerjit (their layout is checked below).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
template <>
struct PassedAs<cudnnConvolutionFwdAlgoPerf_t*> { using type = CudnnAlgoPerf*; };
template <>
struct PassedAs<cudnnConvolutionBwdDataAlgoPerf_t*> { using type = CudnnAlgoPerf*; };
template <>
struct PassedAs<cudnnConvolutionBwdFilterAlgoPerf_t*> { using type = CudnnAlgoPerf*; };
#pragma GCC diagnostic pop
#endif
template <typename T>
using Passed = typename PassedAs<T>::type;

template <typename F>
struct Params;
template <typename R, typename... A>
struct Params<R (*)(A...)> {
  using type = std::tuple<Passed<A>...>;
};

template <typename Ours, typename Theirs>
constexpr bool same_params = std::is_same_v<typename Params<Ours>::type, typename Params<Theirs>::type>;

// The name after the toolkit's macros (cuMemAlloc -> cuMemAlloc_v2), as a string.
#define TOWERJIT_EXPANDED(x) TOWERJIT_STRING(x)
#define TOWERJIT_STRING(x) #x

#define TOWERJIT_CHECK(member, name, symbol, signature)                                            \
  static_assert(same_params<signature, decltype(&::symbol)>, #symbol ": parameters differ from the toolkit's"); \
  static_assert(std::string_view(TOWERJIT_EXPANDED(name)) == #symbol, #symbol ": not the symbol the toolkit's headers map " #name " to");
TOWERJIT_CUDA_DRIVER_FUNCTIONS(TOWERJIT_CHECK)
TOWERJIT_CUDA_GRAPH_FUNCTIONS(TOWERJIT_CHECK)
TOWERJIT_CUBLAS_FUNCTIONS(TOWERJIT_CHECK)
TOWERJIT_CUBLASLT_FUNCTIONS(TOWERJIT_CHECK)
#undef TOWERJIT_CHECK
#if defined(TOWERJIT_HAVE_NCCL_HEADER)
#define TOWERJIT_CHECK_NCCL(member, symbol, signature) \
  static_assert(same_params<signature, decltype(&::symbol)>, #symbol ": parameters differ from NCCL's");
TOWERJIT_NCCL_FUNCTIONS(TOWERJIT_CHECK_NCCL)
#undef TOWERJIT_CHECK_NCCL
static_assert(std::is_same_v<ncclComm_t, ::ncclComm_t>);
static_assert(sizeof(ncclResult_t) == sizeof(towerjit::cuda::NcclResult));
static_assert(kNcclFloat32 == ncclFloat32 && kNcclSum == ncclSum);
// The world entry points pass our NcclUniqueId where NCCL has its own type of the same bytes.
static_assert(sizeof(NcclUniqueId) == sizeof(::ncclUniqueId) && NCCL_UNIQUE_ID_BYTES == 128);
static_assert(std::is_same_v<decltype(NcclApi::GetUniqueId), NcclResult (*)(NcclUniqueId*)> &&
              same_params<NcclResult (*)(::ncclUniqueId*), decltype(&::ncclGetUniqueId)>);
static_assert(std::is_same_v<decltype(NcclApi::CommInitRank), NcclResult (*)(ncclComm_t*, int, NcclUniqueId, int)> &&
              same_params<NcclResult (*)(ncclComm_t*, int, ::ncclUniqueId, int), decltype(&::ncclCommInitRank)>);
#endif

#if defined(TOWERJIT_HAVE_CUDNN_HEADER)
// cuDNN 9 marks the legacy convolution API deprecated (it still ships, in libcudnn_cnn).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define TOWERJIT_CHECK_CUDNN(member, symbol, signature) \
  static_assert(same_params<signature, decltype(&::symbol)>, #symbol ": parameters differ from cuDNN's");
TOWERJIT_CUDNN_FUNCTIONS(TOWERJIT_CHECK_CUDNN)
#undef TOWERJIT_CHECK_CUDNN
static_assert(std::is_same_v<cudnnHandle_t, ::cudnnHandle_t> && std::is_same_v<CudnnT, ::cudnnTensorDescriptor_t> &&
              std::is_same_v<CudnnF, ::cudnnFilterDescriptor_t> && std::is_same_v<CudnnC, ::cudnnConvolutionDescriptor_t>);
static_assert(std::is_same_v<decltype(CudnnApi::GetVersion), decltype(&::cudnnGetVersion)>);
static_assert(sizeof(cudnnStatus_t) == sizeof(CudnnStatus));
// Our one perf struct stands for the three of cuDNN.
#define TOWERJIT_CHECK_PERF(T)                                                                            \
  static_assert(sizeof(T) == sizeof(CudnnAlgoPerf) && offsetof(T, algo) == offsetof(CudnnAlgoPerf, algo) && \
                offsetof(T, status) == offsetof(CudnnAlgoPerf, status) &&                                 \
                offsetof(T, time) == offsetof(CudnnAlgoPerf, time) &&                                     \
                offsetof(T, memory) == offsetof(CudnnAlgoPerf, memory) &&                                 \
                offsetof(T, determinism) == offsetof(CudnnAlgoPerf, determinism) &&                       \
                offsetof(T, mathType) == offsetof(CudnnAlgoPerf, math_type));
TOWERJIT_CHECK_PERF(cudnnConvolutionFwdAlgoPerf_t)
TOWERJIT_CHECK_PERF(cudnnConvolutionBwdDataAlgoPerf_t)
TOWERJIT_CHECK_PERF(cudnnConvolutionBwdFilterAlgoPerf_t)
#undef TOWERJIT_CHECK_PERF
static_assert(kCudnnTensorNchw == CUDNN_TENSOR_NCHW && kCudnnDataFloat == CUDNN_DATA_FLOAT);
static_assert(kCudnnDataHalf == CUDNN_DATA_HALF && kCudnnDataBfloat16 == CUDNN_DATA_BFLOAT16);
static_assert(kCudnnCrossCorrelation == CUDNN_CROSS_CORRELATION && kCudnnFmaMath == CUDNN_FMA_MATH);
static_assert(kCudnnTensorOpMath == CUDNN_TENSOR_OP_MATH);
static_assert(kCudnnDeterministic == CUDNN_DETERMINISTIC && kCudnnStatusNotSupported == CUDNN_STATUS_NOT_SUPPORTED);
static_assert(CUDNN_MAJOR == kCudnnMinVersion / 10000);
#pragma GCC diagnostic pop
#endif

static_assert(same_params<decltype(towerjit::cuda::DriverApi::EventElapsedTime), decltype(&::cuEventElapsedTime_v2)>);
static_assert(std::is_same_v<CUdeviceptr, ::CUdeviceptr_v2>);
static_assert(std::is_same_v<CUstream, cudaStream_t>);
static_assert(sizeof(CUresult) == sizeof(towerjit::cuda::CuResult));
static_assert(std::is_same_v<CUgraph, ::CUgraph> && std::is_same_v<CUgraphExec, ::CUgraphExec>);
static_assert(kStreamCaptureModeThreadLocal == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(kCudaErrorStreamCaptureUnsupported == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
static_assert(kCudaErrorStreamCaptureInvalidated == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
static_assert(kCudaErrorCapturedEvent == CUDA_ERROR_CAPTURED_EVENT);

static_assert(kCudaSuccess == CUDA_SUCCESS && kCudaErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(kCudaErrorNoBinaryForGpu == CUDA_ERROR_NO_BINARY_FOR_GPU);
static_assert(kCudaErrorUnsupportedPtxVersion == CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
static_assert(kCudaErrorPeerAccessAlreadyEnabled == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
static_assert(kAttrMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(kAttrComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(kAttrComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(kEventDefault == CU_EVENT_DEFAULT && kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(kCublasOpN == CUBLAS_OP_N && kCublasOpT == CUBLAS_OP_T);
static_assert(kCublasDefaultMath == CUBLAS_DEFAULT_MATH);

// cuBLASLt: return types, descriptor sizes, the heuristic result's layout and the enum values.
static_assert(std::is_same_v<decltype(CublasLtApi::GetVersion), decltype(&::cublasLtGetVersion)>);
static_assert(std::is_same_v<decltype(CublasLtApi::GetStatusName), const char* (*)(CublasStatus)> &&
              std::is_same_v<decltype(&::cublasLtGetStatusName), const char* (*)(cublasStatus_t)>);
static_assert(std::is_same_v<cublasLtHandle_t, ::cublasLtHandle_t>);
static_assert(sizeof(LtMatrixLayoutOpaque) == sizeof(::cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(LtMatmulDescOpaque) == sizeof(::cublasLtMatmulDescOpaque_t));
static_assert(sizeof(LtMatmulPreferenceOpaque) == sizeof(::cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(LtMatmulAlgo) == sizeof(::cublasLtMatmulAlgo_t));
static_assert(sizeof(LtHeuristicResult) == sizeof(::cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(LtHeuristicResult, workspace_bytes) == offsetof(::cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(LtHeuristicResult, state) == offsetof(::cublasLtMatmulHeuristicResult_t, state));
static_assert(offsetof(LtHeuristicResult, waves) == offsetof(::cublasLtMatmulHeuristicResult_t, wavesCount));
static_assert(sizeof(CublasStatus) == sizeof(cublasStatus_t));
static_assert(kCudaR32F == CUDA_R_32F && kCudaR16F == CUDA_R_16F && kCudaR16BF == CUDA_R_16BF);
static_assert(kCublasCompute32F == CUBLAS_COMPUTE_32F && kCublasCompute32FFastTf32 == CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(kLtDescTransA == CUBLASLT_MATMUL_DESC_TRANSA && kLtDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(kLtDescEpilogue == CUBLASLT_MATMUL_DESC_EPILOGUE && kLtDescBiasPointer == CUBLASLT_MATMUL_DESC_BIAS_POINTER);
static_assert(kLtEpilogueDefault == CUBLASLT_EPILOGUE_DEFAULT && kLtEpilogueBias == CUBLASLT_EPILOGUE_BIAS &&
              kLtEpilogueReluBias == CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(kLtDescBiasDataType == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
static_assert(kLtLayoutBatchCount == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
static_assert(kLtLayoutBatchStride == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(kLtPrefMaxWorkspace == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(kLtPrefReductionMask == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK);
static_assert(kLtReductionAny == (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE));
static_assert(kCublasStatusNotSupported == CUBLAS_STATUS_NOT_SUPPORTED);

}  // namespace

#endif  // TOWERJIT_HAVE_CUDA_HEADERS
