// The CUDA driver API, loaded with dlopen("libcuda.so.1") on first use and never linked, so
// every towerjit binary starts on a machine with no NVIDIA driver: there cuda_device_count()
// is 0, and only asking for a device is an error ("no CUDA device: ...", with the reason).
//
// The types and entry points are declared here by hand (no cuda.h), as jit/cuda declares
// NVRTC, so towerjit builds where the CUDA toolkit is absent. Where the toolkit's cuda.h is
// present, tests_gpu/test_driver_signatures.cpp checks at compile time that each entry
// point's parameters match cuda.h and that the symbol looked up is the one cuda.h maps the
// name to (cuMemAlloc -> cuMemAlloc_v2, ...).
#pragma once

#include <cstddef>
#include <source_location>
#include <string>
#include <type_traits>

// The driver's handle types, spelled exactly as cuda.h spells them, so both can be included
// in one file.
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;

namespace towerjit::cuda {

using CuResult = int;  // CUresult; 0 is CUDA_SUCCESS

// Values of cuda.h's enums that towerjit passes (checked against cuda.h where present).
inline constexpr CuResult kCudaSuccess = 0;
inline constexpr CuResult kCudaErrorNotReady = 600;
inline constexpr CuResult kCudaErrorNoBinaryForGpu = 209;
inline constexpr CuResult kCudaErrorUnsupportedPtxVersion = 222;
inline constexpr CuResult kCudaErrorPeerAccessAlreadyEnabled = 704;
inline constexpr int kAttrMultiprocessorCount = 16;    // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr int kAttrComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
inline constexpr int kAttrComputeCapabilityMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
inline constexpr unsigned kStreamNonBlocking = 1;      // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDefault = 0;           // CU_EVENT_DEFAULT
inline constexpr unsigned kEventDisableTiming = 2;     // CU_EVENT_DISABLE_TIMING
inline constexpr int kStreamCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
inline constexpr CuResult kCudaErrorStreamCaptureUnsupported = 900;
inline constexpr CuResult kCudaErrorStreamCaptureInvalidated = 901;
inline constexpr CuResult kCudaErrorCapturedEvent = 907;

// Every entry point towerjit uses: X(member, name in cuda.h, symbol looked up, signature).
// The symbol is the versioned one cuda.h maps the name to (without per-thread default stream).
#define TOWERJIT_CUDA_DRIVER_FUNCTIONS(X)                                                              \
  X(Init, cuInit, cuInit, CuResult (*)(unsigned))                                                      \
  X(DriverGetVersion, cuDriverGetVersion, cuDriverGetVersion, CuResult (*)(int*))                      \
  X(GetErrorName, cuGetErrorName, cuGetErrorName, CuResult (*)(CuResult, const char**))                \
  X(GetErrorString, cuGetErrorString, cuGetErrorString, CuResult (*)(CuResult, const char**))          \
  X(DeviceGet, cuDeviceGet, cuDeviceGet, CuResult (*)(CUdevice*, int))                                 \
  X(DeviceGetCount, cuDeviceGetCount, cuDeviceGetCount, CuResult (*)(int*))                            \
  X(DeviceGetName, cuDeviceGetName, cuDeviceGetName, CuResult (*)(char*, int, CUdevice))               \
  X(DeviceGetAttribute, cuDeviceGetAttribute, cuDeviceGetAttribute, CuResult (*)(int*, int, CUdevice)) \
  X(DeviceTotalMem, cuDeviceTotalMem, cuDeviceTotalMem_v2, CuResult (*)(size_t*, CUdevice))            \
  X(DeviceCanAccessPeer, cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, CuResult (*)(int*, CUdevice, CUdevice)) \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, CuResult (*)(CUcontext*, CUdevice)) \
  X(CtxSetCurrent, cuCtxSetCurrent, cuCtxSetCurrent, CuResult (*)(CUcontext))                          \
  X(CtxSynchronize, cuCtxSynchronize, cuCtxSynchronize, CuResult (*)())                                \
  X(CtxEnablePeerAccess, cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, CuResult (*)(CUcontext, unsigned)) \
  X(MemGetInfo, cuMemGetInfo, cuMemGetInfo_v2, CuResult (*)(size_t*, size_t*))                         \
  X(MemAlloc, cuMemAlloc, cuMemAlloc_v2, CuResult (*)(CUdeviceptr*, size_t))                           \
  X(MemFree, cuMemFree, cuMemFree_v2, CuResult (*)(CUdeviceptr))                                       \
  X(MemAllocHost, cuMemAllocHost, cuMemAllocHost_v2, CuResult (*)(void**, size_t))                     \
  X(MemFreeHost, cuMemFreeHost, cuMemFreeHost, CuResult (*)(void*))                                    \
  X(MemcpyHtoDAsync, cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, CuResult (*)(CUdeviceptr, const void*, size_t, CUstream)) \
  X(MemcpyDtoHAsync, cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, CuResult (*)(void*, CUdeviceptr, size_t, CUstream)) \
  X(MemcpyDtoDAsync, cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, CuResult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
  X(MemcpyPeerAsync, cuMemcpyPeerAsync, cuMemcpyPeerAsync,                                             \
    CuResult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))                    \
  X(MemsetD32Async, cuMemsetD32Async, cuMemsetD32Async, CuResult (*)(CUdeviceptr, unsigned, size_t, CUstream)) \
  X(MemsetD8Async, cuMemsetD8Async, cuMemsetD8Async, CuResult (*)(CUdeviceptr, unsigned char, size_t, CUstream)) \
  X(StreamCreate, cuStreamCreate, cuStreamCreate, CuResult (*)(CUstream*, unsigned))                   \
  X(StreamDestroy, cuStreamDestroy, cuStreamDestroy_v2, CuResult (*)(CUstream))                        \
  X(StreamSynchronize, cuStreamSynchronize, cuStreamSynchronize, CuResult (*)(CUstream))               \
  X(StreamWaitEvent, cuStreamWaitEvent, cuStreamWaitEvent, CuResult (*)(CUstream, CUevent, unsigned))  \
  X(EventCreate, cuEventCreate, cuEventCreate, CuResult (*)(CUevent*, unsigned))                       \
  X(EventDestroy, cuEventDestroy, cuEventDestroy_v2, CuResult (*)(CUevent))                            \
  X(EventRecord, cuEventRecord, cuEventRecord, CuResult (*)(CUevent, CUstream))                        \
  X(EventQuery, cuEventQuery, cuEventQuery, CuResult (*)(CUevent))                                     \
  X(EventSynchronize, cuEventSynchronize, cuEventSynchronize, CuResult (*)(CUevent))                   \
  X(ModuleLoadData, cuModuleLoadData, cuModuleLoadData, CuResult (*)(CUmodule*, const void*))          \
  X(ModuleUnload, cuModuleUnload, cuModuleUnload, CuResult (*)(CUmodule))                              \
  X(ModuleGetFunction, cuModuleGetFunction, cuModuleGetFunction, CuResult (*)(CUfunction*, CUmodule, const char*)) \
  X(LaunchKernel, cuLaunchKernel, cuLaunchKernel,                                                      \
    CuResult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                 CUstream, void**, void**))

// CUDA Graphs (stream capture, then launches of the instantiated graph): bound where the
// driver has them; without them (a stand-in driver) every run is queued call by call.
#define TOWERJIT_CUDA_GRAPH_FUNCTIONS(X)                                                               \
  X(StreamBeginCapture, cuStreamBeginCapture, cuStreamBeginCapture_v2, CuResult (*)(CUstream, int))   \
  X(StreamEndCapture, cuStreamEndCapture, cuStreamEndCapture, CuResult (*)(CUstream, CUgraph*))        \
  X(GraphInstantiate, cuGraphInstantiate, cuGraphInstantiateWithFlags,                                 \
    CuResult (*)(CUgraphExec*, CUgraph, unsigned long long))                                           \
  X(GraphLaunch, cuGraphLaunch, cuGraphLaunch, CuResult (*)(CUgraphExec, CUstream))                    \
  X(GraphExecDestroy, cuGraphExecDestroy, cuGraphExecDestroy, CuResult (*)(CUgraphExec))              \
  X(GraphDestroy, cuGraphDestroy, cuGraphDestroy, CuResult (*)(CUgraph))

// The driver's entry points, bound. EventElapsedTime is cuEventElapsedTime_v2 (what CUDA 13's
// cuda.h maps the name to) where the driver has it, else the older cuEventElapsedTime, whose
// parameters are the same.
struct DriverApi {
#define TOWERJIT_CUDA_MEMBER(member, name, symbol, signature) std::type_identity_t<signature> member = nullptr;
  TOWERJIT_CUDA_DRIVER_FUNCTIONS(TOWERJIT_CUDA_MEMBER)
  TOWERJIT_CUDA_GRAPH_FUNCTIONS(TOWERJIT_CUDA_MEMBER)  // all null when the driver lacks one
#undef TOWERJIT_CUDA_MEMBER
  bool has_graphs() const { return GraphDestroy != nullptr; }
  CuResult (*EventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  std::string library;  // the file dlopen loaded
  int driver_version = 0;  // 13000 for CUDA 13.0
};

// True when the driver loaded, cuInit succeeded and at least one device is present. Never
// throws; loads the driver on the first call (thread-safe).
bool cuda_available();

// The number of CUDA devices; 0 without a driver or when cuInit fails. Never throws.
int cuda_device_count();

// Why there is no usable device ("libcuda.so.1 not found: ...", "cuInit failed:
// CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"), or "" when there is one.
std::string cuda_unavailable_reason();

// The bound driver. Throws towerjit::Error "towerjit: no CUDA device: <reason>; ..." (naming
// `loc`, the user's line that asked for a device) when there is none.
const DriverApi& require_driver(std::source_location loc = std::source_location::current());

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the result's name and description from the
// driver, or from towerjit's own table when the driver cannot say (its stub, say).
std::string cuda_result_text(CuResult result);

// Throws towerjit::Error unless `result` is CUDA_SUCCESS: "towerjit: CUDA driver call <call>
// failed: <name> (<description>)<context> (<file:line>)". `loc` is the user's line where the
// call serves a user's request (a program's construction or run), else towerjit's own.
void check_cuda(CuResult result, const char* call, const std::string& context = "",
                std::source_location loc = std::source_location::current());

}  // namespace towerjit::cuda
