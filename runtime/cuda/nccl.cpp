#include "runtime/cuda/nccl.h"

#include "dsl/error.h"
#include "runtime/cuda/toolkit_library.h"

namespace towerjit::cuda {
namespace {

struct Loaded {
  NcclApi api;
  bool ok = false;
  std::string tried;
};

Loaded load() {
  Loaded l;
  const ToolkitLibrary lib = open_toolkit_library({"libnccl.so.2"}, {"/usr/local/cuda/lib64/", "/usr/local/cuda/lib/"});
  l.tried = lib.tried;
  if (!lib.handle) return l;
  l.api.library = lib.name;
  std::string missing;
#define TOWERJIT_NCCL_BIND(member, symbol, signature) bind_symbol(lib.handle, l.api.member, #symbol, missing);
  TOWERJIT_NCCL_FUNCTIONS(TOWERJIT_NCCL_BIND)
#undef TOWERJIT_NCCL_BIND
  std::string optional;  // absent in the emulator's NCCL: nccl_world_available() says so
#define TOWERJIT_NCCL_BIND_OPTIONAL(member, symbol, signature) bind_symbol(lib.handle, l.api.member, #symbol, optional);
  TOWERJIT_NCCL_WORLD_FUNCTIONS(TOWERJIT_NCCL_BIND_OPTIONAL)
#undef TOWERJIT_NCCL_BIND_OPTIONAL
  if (!missing.empty()) {
    l.tried += " (" + l.api.library + " lacks " + missing + ")";
    return l;
  }
  if (l.api.GetVersion(&l.api.version) != 0) {
    l.tried += " (" + l.api.library + ": ncclGetVersion failed)";
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& nccl() {
  static const Loaded l = load();
  return l;
}

void check_nccl(NcclResult r, const char* call, const std::string& context, std::source_location loc) {
  if (r == 0) return;
  const char* text = nccl().api.GetErrorString ? nccl().api.GetErrorString(r) : nullptr;
  user_check(false, loc) << "NCCL call " << call << " failed: " << (text ? text : "ncclResult_t " + std::to_string(r))
                         << context;
}

int nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return kNcclFloat32;
    case DType::bf16: return kNcclBfloat16;
    case DType::f16: return kNcclFloat16;
    default: internal_check(false) << "an all-reduce of " << dtype_name(dtype); return kNcclFloat32;
  }
}

}  // namespace

bool nccl_available() { return nccl().ok; }

bool nccl_world_available() { return nccl().ok && nccl().api.GetUniqueId && nccl().api.CommInitRank; }

std::string nccl_unavailable_reason() { return nccl().ok ? "" : "NCCL not found (tried " + nccl().tried + ")"; }

const NcclApi& require_nccl(std::source_location loc) {
  user_check(nccl().ok, loc) << nccl_unavailable_reason()
                             << "; reducing between GPUs needs NCCL's libnccl.so.2: install it, set CUDA_HOME "
                                "to the toolkit that holds it, or add its directory to LD_LIBRARY_PATH";
  return nccl().api;
}

NcclCommunicators::NcclCommunicators(const std::vector<DeviceContext*>& devices, std::source_location loc)
    : comms_(devices.size(), nullptr), devices_(devices) {
  const NcclApi& api = require_nccl(loc);
  std::vector<int> ordinals;
  for (DeviceContext* d : devices) ordinals.push_back(d->ordinal());
  check_nccl(api.CommInitAll(comms_.data(), static_cast<int>(ordinals.size()), ordinals.data()), "ncclCommInitAll",
             " for " + std::to_string(ordinals.size()) + " GPUs", loc);
}

NcclUniqueId NcclCommunicators::make_unique_id(std::source_location loc) {
  const NcclApi& api = require_nccl(loc);
  internal_check(api.GetUniqueId) << "make_unique_id without ncclGetUniqueId";
  NcclUniqueId id{};
  check_nccl(api.GetUniqueId(&id), "ncclGetUniqueId", "", loc);
  return id;
}

NcclCommunicators::NcclCommunicators(const std::vector<DeviceContext*>& devices, const NcclUniqueId& id,
                                     int first_rank, int world_ranks, std::source_location loc)
    : comms_(devices.size(), nullptr), devices_(devices) {
  const NcclApi& api = require_nccl(loc);
  internal_check(api.CommInitRank) << "a world communicator without ncclCommInitRank";
  // A process driving several GPUs joins for all of them inside one group, as NCCL requires.
  check_nccl(api.GroupStart(), "ncclGroupStart", "", loc);
  NcclResult failed = 0;
  for (size_t i = 0; i < devices.size() && !failed; ++i) {
    devices[i]->make_current();
    failed = api.CommInitRank(&comms_[i], world_ranks, id, first_rank + static_cast<int>(i));
  }
  const NcclResult ended = api.GroupEnd();
  const std::string what = " for ranks " + std::to_string(first_rank) + ".." +
                           std::to_string(first_rank + static_cast<int>(devices.size()) - 1) + " of " +
                           std::to_string(world_ranks);
  if (failed) check_nccl(failed, "ncclCommInitRank", what, loc);
  check_nccl(ended, "ncclGroupEnd", what, loc);
}

NcclCommunicators::~NcclCommunicators() {
  for (ncclComm_t c : comms_)
    if (c) nccl().api.CommDestroy(c);
}

void NcclCommunicators::all_reduce_sum(const std::vector<std::vector<NcclBuffer>>& buffers,
                                       const std::vector<const Stream*>& streams, const std::string& what,
                                       std::source_location loc) const {
  const NcclApi& api = require_nccl(loc);
  internal_check(buffers.size() == comms_.size() && streams.size() == comms_.size())
      << "all_reduce_sum: one list of buffers and one stream per rank";
  check_nccl(api.GroupStart(), "ncclGroupStart", "", loc);
  NcclResult failed = 0;
  const char* failed_call = nullptr;
  for (size_t r = 0; r < comms_.size() && !failed; ++r) {
    internal_check(buffers[r].size() == buffers[0].size()) << "all_reduce_sum: ranks list different buffers";
    devices_[r]->make_current();
    for (const NcclBuffer& b : buffers[r]) {
      auto* p = reinterpret_cast<void*>(b.ptr);
      if ((failed = api.AllReduce(p, p, b.elements, nccl_type(b.dtype), kNcclSum, comms_[r], streams[r]->handle()))) {
        failed_call = "ncclAllReduce";
        break;
      }
    }
  }
  // The group is closed whatever happened inside it, so NCCL is left usable.
  const NcclResult ended = api.GroupEnd();
  if (failed) check_nccl(failed, failed_call, " for " + what, loc);
  check_nccl(ended, "ncclGroupEnd", " for " + what, loc);
}

}  // namespace towerjit::cuda
