// cuDNN 9, loaded with dlopen on first use (libcudnn.so.9 on the loader's path, then under
// $CUDA_HOME/lib64, /usr/local/cuda/lib64, /usr/local/cuda/lib and Python's
// nvidia/cudnn/lib, where PyTorch's wheels put it), for the convolutions of the kernel IR:
// Conv2D, its data gradient and its filter gradient.
//
// The legacy convolution API (tensor, filter and convolution descriptors;
// cudnnConvolutionForward / BackwardData / BackwardFilter) is used, not the graph API: it
// still ships in cuDNN 9 (libcudnn_cnn, behind libcudnn.so.9's entry points), reports each
// algorithm's workspace and determinism directly, and needs a dozen entry points where the
// graph API needs its backend descriptors, engine configurations and variant packs.
//
// Each (pass, shape) is planned once per device and process (like
// torch.backends.cudnn.benchmark): the deterministic algorithms are listed
// (cudnnGetConvolution*Algorithm_v7), those whose workspace does not fit the memory available
// are dropped (said once, on stderr), the rest are timed (cudnnFindConvolution*AlgorithmEx on
// temporary buffers, before any work of the run is queued) and the fastest deterministic one
// is kept. Runs therefore stay bitwise reproducible. Math is CUDNN_FMA_MATH for f32 (full f32,
// no TF32) unless TOWERJIT_ALLOW_TF32=on, and CUDNN_TENSOR_OP_MATH for 16-bit operands.
//
// Declared by hand (no cudnn.h), as the driver API; where the toolkit's headers are present
// tests_gpu/test_driver_signatures.cpp checks the declarations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/dtype.h"
#include "jit/cuda/device/library_params.h"
#include "runtime/cuda/device.h"

typedef struct cudnnContext* cudnnHandle_t;
typedef struct cudnnTensorStruct* cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct* cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct* cudnnConvolutionDescriptor_t;

namespace towerjit::cuda {

using CudnnStatus = int;  // cudnnStatus_t; 0 is CUDNN_STATUS_SUCCESS

// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three have this one layout.
struct CudnnAlgoPerf {
  int algo;
  CudnnStatus status;
  float time;  // ms
  size_t memory;
  int determinism;  // 1: CUDNN_DETERMINISTIC
  int math_type;
  int reserved[3];
};

using CudnnT = cudnnTensorDescriptor_t;
using CudnnF = cudnnFilterDescriptor_t;
using CudnnC = cudnnConvolutionDescriptor_t;

#define TOWERJIT_CUDNN_FUNCTIONS(X)                                                                      \
  X(GetVersion, cudnnGetVersion, size_t (*)())                                                           \
  X(GetErrorString, cudnnGetErrorString, const char* (*)(CudnnStatus))                                   \
  X(Create, cudnnCreate, CudnnStatus (*)(cudnnHandle_t*))                                                \
  X(Destroy, cudnnDestroy, CudnnStatus (*)(cudnnHandle_t))                                               \
  X(SetStream, cudnnSetStream, CudnnStatus (*)(cudnnHandle_t, CUstream))                                 \
  X(CreateTensorDescriptor, cudnnCreateTensorDescriptor, CudnnStatus (*)(CudnnT*))                       \
  X(SetTensor4dDescriptor, cudnnSetTensor4dDescriptor, CudnnStatus (*)(CudnnT, int, int, int, int, int, int)) \
  X(DestroyTensorDescriptor, cudnnDestroyTensorDescriptor, CudnnStatus (*)(CudnnT))                      \
  X(CreateFilterDescriptor, cudnnCreateFilterDescriptor, CudnnStatus (*)(CudnnF*))                       \
  X(SetFilter4dDescriptor, cudnnSetFilter4dDescriptor, CudnnStatus (*)(CudnnF, int, int, int, int, int, int)) \
  X(DestroyFilterDescriptor, cudnnDestroyFilterDescriptor, CudnnStatus (*)(CudnnF))                      \
  X(CreateConvolutionDescriptor, cudnnCreateConvolutionDescriptor, CudnnStatus (*)(CudnnC*))             \
  X(SetConvolution2dDescriptor, cudnnSetConvolution2dDescriptor,                                         \
    CudnnStatus (*)(CudnnC, int, int, int, int, int, int, int, int))                                     \
  X(SetConvolutionMathType, cudnnSetConvolutionMathType, CudnnStatus (*)(CudnnC, int))                   \
  X(DestroyConvolutionDescriptor, cudnnDestroyConvolutionDescriptor, CudnnStatus (*)(CudnnC))            \
  X(GetForwardAlgorithmMaxCount, cudnnGetConvolutionForwardAlgorithmMaxCount,                            \
    CudnnStatus (*)(cudnnHandle_t, int*))                                                                \
  X(GetForwardAlgorithm, cudnnGetConvolutionForwardAlgorithm_v7,                                         \
    CudnnStatus (*)(cudnnHandle_t, CudnnT, CudnnF, CudnnC, CudnnT, int, int*, CudnnAlgoPerf*))           \
  X(FindForwardAlgorithm, cudnnFindConvolutionForwardAlgorithmEx,                                        \
    CudnnStatus (*)(cudnnHandle_t, CudnnT, const void*, CudnnF, const void*, CudnnC, CudnnT, void*, int, \
                    int*, CudnnAlgoPerf*, void*, size_t))                                                \
  X(Forward, cudnnConvolutionForward,                                                                    \
    CudnnStatus (*)(cudnnHandle_t, const void*, CudnnT, const void*, CudnnF, const void*, CudnnC, int,   \
                    void*, size_t, const void*, CudnnT, void*))                                          \
  X(GetBackwardDataAlgorithmMaxCount, cudnnGetConvolutionBackwardDataAlgorithmMaxCount,                  \
    CudnnStatus (*)(cudnnHandle_t, int*))                                                                \
  X(GetBackwardDataAlgorithm, cudnnGetConvolutionBackwardDataAlgorithm_v7,                               \
    CudnnStatus (*)(cudnnHandle_t, CudnnF, CudnnT, CudnnC, CudnnT, int, int*, CudnnAlgoPerf*))           \
  X(FindBackwardDataAlgorithm, cudnnFindConvolutionBackwardDataAlgorithmEx,                              \
    CudnnStatus (*)(cudnnHandle_t, CudnnF, const void*, CudnnT, const void*, CudnnC, CudnnT, void*, int, \
                    int*, CudnnAlgoPerf*, void*, size_t))                                                \
  X(BackwardData, cudnnConvolutionBackwardData,                                                          \
    CudnnStatus (*)(cudnnHandle_t, const void*, CudnnF, const void*, CudnnT, const void*, CudnnC, int,   \
                    void*, size_t, const void*, CudnnT, void*))                                          \
  X(GetBackwardFilterAlgorithmMaxCount, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,              \
    CudnnStatus (*)(cudnnHandle_t, int*))                                                                \
  X(GetBackwardFilterAlgorithm, cudnnGetConvolutionBackwardFilterAlgorithm_v7,                           \
    CudnnStatus (*)(cudnnHandle_t, CudnnT, CudnnT, CudnnC, CudnnF, int, int*, CudnnAlgoPerf*))           \
  X(FindBackwardFilterAlgorithm, cudnnFindConvolutionBackwardFilterAlgorithmEx,                          \
    CudnnStatus (*)(cudnnHandle_t, CudnnT, const void*, CudnnT, const void*, CudnnC, CudnnF, void*, int, \
                    int*, CudnnAlgoPerf*, void*, size_t))                                                \
  X(BackwardFilter, cudnnConvolutionBackwardFilter,                                                      \
    CudnnStatus (*)(cudnnHandle_t, const void*, CudnnT, const void*, CudnnT, const void*, CudnnC, int,   \
                    void*, size_t, const void*, CudnnF, void*))

inline constexpr int kCudnnTensorNchw = 0;         // CUDNN_TENSOR_NCHW
inline constexpr int kCudnnDataFloat = 0;          // CUDNN_DATA_FLOAT
inline constexpr int kCudnnDataHalf = 2;           // CUDNN_DATA_HALF
inline constexpr int kCudnnDataBfloat16 = 9;       // CUDNN_DATA_BFLOAT16
inline constexpr int kCudnnCrossCorrelation = 1;   // CUDNN_CROSS_CORRELATION (no filter flip)
inline constexpr int kCudnnFmaMath = 3;            // CUDNN_FMA_MATH: f32 FMA only, no TF32
inline constexpr int kCudnnTensorOpMath = 1;       // CUDNN_TENSOR_OP_MATH: f32 may run as TF32
inline constexpr int kCudnnDeterministic = 1;      // CUDNN_DETERMINISTIC
inline constexpr int kCudnnStatusNotSupported = 3000;  // CUDNN_STATUS_NOT_SUPPORTED
inline constexpr size_t kCudnnMinVersion = 90000, kCudnnMaxVersion = 99999;  // 9.x

struct CudnnApi {
#define TOWERJIT_CUDNN_MEMBER(member, symbol, signature) std::type_identity_t<signature> member = nullptr;
  TOWERJIT_CUDNN_FUNCTIONS(TOWERJIT_CUDNN_MEMBER)
#undef TOWERJIT_CUDNN_MEMBER
  std::string library;  // the file loaded
  size_t version = 0;   // cudnnGetVersion(): 91900 is 9.19.0
};

// The convolution passes cuDNN runs, named as the kernel IR's ops.
enum class ConvPass { forward, data_gradient, filter_gradient };
const char* conv_pass_name(ConvPass pass);

// True when convolutions go to cuDNN: TOWERJIT_CUDNN is not off and a cuDNN 9 could be loaded
// (loads it on the first call). Never throws.
bool cudnn_available();

// The bound library, whatever the knob says; null when none could be loaded or it is not 9.x.
const CudnnApi* loaded_cudnn();

// Why cuDNN is not used ("" when it is): the files tried and what failed, the version found,
// or the knob. cudnn_fallback_warning(reason) is the whole warning printed once a process.
std::string cudnn_unavailable_reason();
std::string cudnn_fallback_warning(const std::string& reason);

// Prints cudnn_fallback_warning(reason) on stderr, the first time a process calls it; the
// warning given is kept for cudnn_warning_given() (tests).
void warn_cudnn_fallback_once(const std::string& reason);
std::string cudnn_warning_given();

// The version check alone: "" for 9.x, else why (for tests of other versions).
std::string cudnn_version_problem(size_t version);

// The last workspace note (an algorithm dropped because its workspace did not fit), "" when
// none was given; the note is printed once a process.
std::string cudnn_workspace_note();

// What the plan of one (pass, shape) chose.
struct ConvAlgorithm {
  int algo = -1;
  size_t workspace = 0;  // bytes
  float time_ms = 0;     // cuDNN's timing in the find (the emulator's: nominal)
};

// How many finds this process ran (each (pass, shape, device, workspace cap) once).
int64_t cudnn_find_count();

// A cuDNN handle on one device, issuing on one stream, as Cublas. Not copyable; use from one
// thread at a time.
class Cudnn {
 public:
  Cudnn(DeviceContext& device, const Stream& stream, std::source_location loc = std::source_location::current());
  ~Cudnn();
  Cudnn(const Cudnn&) = delete;
  Cudnn& operator=(const Cudnn&) = delete;

  // The algorithm for `pass` at shape `g` with operands and result of `dtype`: found on the
  // first call for the shape (which synchronises this handle's stream: call it before queuing
  // the run's work), cached after. `what` names the op in errors and notes.
  //
  // f32 is CUDNN_FLOAT_CONFIG. bf16 and f16 are the PSEUDO_BFLOAT16 and PSEUDO_HALF
  // configurations: x, w and y all 16-bit, the convolution computed in f32 (its descriptor's
  // type CUDNN_DATA_FLOAT) under CUDNN_TENSOR_OP_MATH, on the tensor cores; the products of
  // 16-bit operands are exact, so TF32 does not apply to them.
  ConvAlgorithm plan(ConvPass pass, const TjConvShape& g, const std::string& what, DType dtype = DType::f32);

  // Plans the pass at shape `g` with `stored.algo`, chosen by an earlier process's plan(),
  // without timing anything: the algorithm is listed for the shape and held to what plan()
  // takes (deterministic, a sum of products unless TF32 is allowed, a workspace that fits the
  // memory there is now). Nullopt where it is not, and plan() is for the caller to call.
  std::optional<ConvAlgorithm> adopt(ConvPass pass, const TjConvShape& g, const std::string& what, DType dtype,
                                     const ConvAlgorithm& stored);

  // Queues the pass with the planned algorithm: forward y = conv(x, w) (a = x, b = w),
  // data gradient dx (a = dy, b = w), filter gradient dw (a = x, b = dy). `workspace` holds
  // at least plan(pass, g, what, dtype).workspace bytes.
  void run(ConvPass pass, const TjConvShape& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, CUdeviceptr workspace,
           size_t workspace_bytes, const std::string& what, DType dtype = DType::f32);

  DeviceContext& device() const { return *device_; }
  const Stream& stream() const { return *stream_; }
  bool tf32() const { return tf32_; }

 private:
  std::vector<CudnnAlgoPerf> taken_within(ConvPass pass, const std::vector<CudnnAlgoPerf>& listed, size_t budget,
                                          const TjConvShape& g, const std::string& what) const;

  DeviceContext* device_;
  const Stream* stream_;
  cudnnHandle_t handle_ = nullptr;
  bool tf32_ = false;  // TOWERJIT_ALLOW_TF32 when the handle was made, as cuBLASLt's handle has it
};

}  // namespace towerjit::cuda
