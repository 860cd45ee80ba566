// NCCL, loaded with dlopen on first use (libnccl.so.2 on the library path, then under
// $CUDA_HOME/lib64, /usr/local/cuda/lib64 and /usr/local/cuda/lib), for the all-reduce between
// GPUs of sync towers whose variables stay on the GPUs (runtime/towers/gpu_resident_sync.h).
// One communicator per GPU, all made at once in this process (ncclCommInitAll); one thread
// issues every GPU's part of a collective inside a group (ncclGroupStart / ncclGroupEnd), as
// NCCL requires when a thread drives several GPUs.
//
// Declared by hand (no nccl.h), as the driver API (driver_api.h); where the toolkit's headers
// are present tests_gpu/test_driver_signatures.cpp checks the declarations.
#pragma once

#include <cstddef>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsl/dtype.h"
#include "runtime/cuda/device.h"

typedef struct ncclComm* ncclComm_t;

namespace towerjit::cuda {

using NcclResult = int;  // ncclResult_t; 0 is ncclSuccess

#define TOWERJIT_NCCL_FUNCTIONS(X)                                                              \
  X(GetVersion, ncclGetVersion, NcclResult (*)(int*))                                           \
  X(GetErrorString, ncclGetErrorString, const char* (*)(NcclResult))                            \
  X(CommInitAll, ncclCommInitAll, NcclResult (*)(ncclComm_t*, int, const int*))                \
  X(CommDestroy, ncclCommDestroy, NcclResult (*)(ncclComm_t))                                   \
  X(AllReduce, ncclAllReduce,                                                                   \
    NcclResult (*)(const void*, void*, size_t, int, int, ncclComm_t, CUstream))                 \
  X(GroupStart, ncclGroupStart, NcclResult (*)())                                               \
  X(GroupEnd, ncclGroupEnd, NcclResult (*)())

// NCCL's ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128), passed by value to ncclCommInitRank.
struct NcclUniqueId {
  char internal[128];
};

// The entry points for one communicator over several processes, bound when present (the
// emulated NCCL has none: its communicators live in one process).
#define TOWERJIT_NCCL_WORLD_FUNCTIONS(X)                                                        \
  X(GetUniqueId, ncclGetUniqueId, NcclResult (*)(NcclUniqueId*))                                \
  X(CommInitRank, ncclCommInitRank, NcclResult (*)(ncclComm_t*, int, NcclUniqueId, int))

inline constexpr int kNcclFloat16 = 6;   // ncclFloat16 (__half)
inline constexpr int kNcclFloat32 = 7;   // ncclFloat32
inline constexpr int kNcclBfloat16 = 9;  // ncclBfloat16 (__nv_bfloat16)
inline constexpr int kNcclSum = 0;       // ncclSum

// A device buffer of an all-reduce: f32, or bf16 / f16 (gradient compression), which NCCL sums
// in the format, each partial sum rounded to it.
struct NcclBuffer {
  CUdeviceptr ptr;
  size_t elements;
  DType dtype = DType::f32;
};

struct NcclApi {
#define TOWERJIT_NCCL_MEMBER(member, symbol, signature) std::type_identity_t<signature> member = nullptr;
  TOWERJIT_NCCL_FUNCTIONS(TOWERJIT_NCCL_MEMBER)
  TOWERJIT_NCCL_WORLD_FUNCTIONS(TOWERJIT_NCCL_MEMBER)
#undef TOWERJIT_NCCL_MEMBER
  std::string library;  // the file loaded
  int version = 0;      // NCCL_VERSION_CODE: 22809 for 2.28.9
};

// True when NCCL could be loaded (loads it on the first call). Never throws.
bool nccl_available();
// True when NCCL is loaded and has ncclGetUniqueId and ncclCommInitRank (a communicator over
// several processes). Never throws.
bool nccl_world_available();
// Why it could not ("" when it could): the files tried.
std::string nccl_unavailable_reason();
// The bound library; throws towerjit::Error "NCCL not found (tried ...)" when absent.
const NcclApi& require_nccl(std::source_location loc = std::source_location::current());

// One communicator per GPU of `devices` (rank i on devices[i]), made together. Not copyable.
class NcclCommunicators {
 public:
  explicit NcclCommunicators(const std::vector<DeviceContext*>& devices,
                             std::source_location loc = std::source_location::current());
  // One communicator over every process's GPUs: this process's `devices` are world ranks
  // first_rank.. of `world_ranks`. `id` is rank 0's ncclGetUniqueId, the same on every process
  // (make_unique_id() on world rank 0, then broadcast). Collective over the processes.
  NcclCommunicators(const std::vector<DeviceContext*>& devices, const NcclUniqueId& id, int first_rank,
                    int world_ranks, std::source_location loc = std::source_location::current());
  static NcclUniqueId make_unique_id(std::source_location loc = std::source_location::current());
  ~NcclCommunicators();
  NcclCommunicators(const NcclCommunicators&) = delete;
  NcclCommunicators& operator=(const NcclCommunicators&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }

  // In-place sums across the ranks: buffers[r][k] on rank r's GPU is replaced by Σ_r
  // buffers[r][k], for every k; every rank lists the same element counts and dtypes. The calls
  // are grouped, queued on streams[r], and not waited for.
  void all_reduce_sum(const std::vector<std::vector<NcclBuffer>>& buffers,
                      const std::vector<const Stream*>& streams, const std::string& what,
                      std::source_location loc = std::source_location::current()) const;

 private:
  std::vector<ncclComm_t> comms_;
  std::vector<DeviceContext*> devices_;
};

}  // namespace towerjit::cuda
