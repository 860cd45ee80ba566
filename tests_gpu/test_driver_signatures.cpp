// Compile-time checks that the hand-written declarations of the driver API
// (runtime/cuda/driver_api.h), cuBLAS (runtime/cuda/cublas.h) and NCCL (runtime/cuda/nccl.h,
// where nccl.h is installed) match the toolkit's headers: every entry point's parameters, the versioned symbol each name maps to
// (cuMemAlloc -> cuMemAlloc_v2), and the enum values towerjit passes. Built wherever the
// toolkit's headers are found (tests_gpu/CMakeLists.txt), GPU or not: the build is the test.
#if defined(TOWERJIT_HAVE_CUDA_HEADERS)

#include <cublas_v2.h>
#include <cuda.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#define TOWERJIT_HAVE_NCCL_HEADER 1
#endif

#include <string_view>
#include <tuple>
#include <type_traits>

#include "runtime/cuda/cublas.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/nccl.h"

namespace {

using namespace towerjit::cuda;

// A parameter as passed: enums (CUdevice_attribute, CUresult, cublasOperation_t) as int, which
// is how towerjit declares them.
template <typename T>
using Passed = std::conditional_t<std::is_enum_v<T>, int, T>;

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

}  // namespace

#endif  // TOWERJIT_HAVE_CUDA_HEADERS
