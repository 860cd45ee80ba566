// GpuResidentSync's stages between processes (gpu_resident_sync.h, steps 4 and the NCCL world):
// one NCCL communicator over every process's GPUs, or each bucket's sum all-reduced over the
// world's transport from the first GPU and back. The stages inside the process are in
// gpu_resident_sync.cpp. A transport's or NCCL's failure is a towerjit::Error of its own.
#include <cstdio>
#include <cstring>

#include "jit/knobs.h"
#include "runtime/towers/gpu_resident_sync.h"

namespace towerjit {

// TOWERJIT_NCCL_WORLD=on: one NCCL communicator over every process's GPUs, when every process
// can (its NCCL has ncclCommInitRank; the emulated NCCL has not): world rank 0 calls
// ncclGetUniqueId, MPI broadcasts it, every process joins with ncclCommInitRank for each of its
// GPUs. Otherwise (decided together, so no rank waits for a collective the others skip) the
// hierarchical scheme stays: NCCL or copies in the process, then MPI.
void GpuResidentSync::join_world_nccl(const std::vector<cuda::DeviceContext*>& contexts) {
  dist::Transport& world = *setup_.world;
  double able = cuda::nccl_available() && cuda::nccl_world_available() && knobs::nccl_enabled() ? 1 : 0;
  world.all_reduce_sum(&able, 1);
  if (able < world.size()) {
    if (world.rank() == 0)
      std::fprintf(stderr, "towerjit: TOWERJIT_NCCL_WORLD=on, but %d of %d processes have no NCCL with "
                           "ncclCommInitRank (or TOWERJIT_NCCL=off); reducing hierarchically (each process's "
                           "GPUs, then MPI)\n",
                   world.size() - static_cast<int>(able), world.size());
    return;
  }
  std::vector<int> gpus(world.size());
  const int own = static_cast<int>(contexts.size());
  world.all_gather(&own, sizeof own, gpus.data());
  int first = 0, total = 0;  // this process's first world GPU rank, and how many there are
  for (int r = 0; r < world.size(); ++r) {
    if (r < world.rank()) first += gpus[r];
    total += gpus[r];
  }
  std::vector<char> id(sizeof(cuda::NcclUniqueId));
  if (world.rank() == 0) {
    const cuda::NcclUniqueId made = cuda::NcclCommunicators::make_unique_id(loc_);
    std::memcpy(id.data(), &made, sizeof made);
  }
  world.broadcast(id, 0);
  cuda::NcclUniqueId joined;
  std::memcpy(&joined, id.data(), sizeof joined);
  nccl_ = std::make_unique<cuda::NcclCommunicators>(contexts, joined, first, total, loc_);
  nccl_world_ = true;
  if (world.rank() == 0)
    std::fprintf(stderr, "towerjit: TOWERJIT_NCCL_WORLD=on: one NCCL communicator over the %d GPUs of %d processes\n",
                 total, world.size());
}

// A world of several processes: bucket b's sum over this process's GPUs (equal on every GPU
// once it is done) comes to the host from the first GPU and its all-reduce between the
// processes starts (one communication thread sends the buckets in order, the same on every
// rank). Called as soon as the bucket's reduction has run, while the backward passes go on.
void GpuResidentSync::send_bucket(size_t b) {
  Gpu& first = *gpus_[0];
  if (!combine_) first.reduce[b]->stream().synchronize("a gradient bucket's reduction", loc_);
  host_.resize(first.reduced.size());
  across_.resize(buckets_.size());
  for (int j : buckets_[b]) {
    host_[j] = std::make_shared<HostTensor>(to_host(first.reduced[j], *first.copies));
    HostTensor& sum = *host_[j];
    across_[b] = sum.dtype == DType::f32
                     ? setup_.world->start_all_reduce_sum(sum.f32.data(), sum.size(), host_[j])
                     : setup_.world->start_all_reduce_sum(sum.b16.data(), sum.size(), sum.dtype, host_[j]);  // compressed
  }
}

// Each bucket's total goes back to every GPU as soon as its all-reduce is done.
void GpuResidentSync::receive_buckets() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    setup_.world->wait(across_[b]);
    for (auto& gpu : gpus_)
      for (int j : buckets_[b]) gpu->reduced[j] = to_device(*host_[j], *gpu->context, *gpu->copies);
  }
  for (auto& gpu : gpus_) gpu->copies->synchronize("copying the processes' gradient sums to " + gpu->context->str(), loc_);
}

}  // namespace towerjit
