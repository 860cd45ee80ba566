// The emulator's NCCL: communicators over the emulated devices (ncclCommInitAll) and
// all-reduces that really sum across them. Each rank's part runs on its own stream when the
// stream reaches it; the last rank to arrive adds the ranks' buffers in rank order (the same
// bits every run) into every rank's output, and only then do the ranks' streams go on, as
// NCCL's kernels hold their streams until the collective is done. Calls between
// ncclGroupStart and ncclGroupEnd are queued at GroupEnd, as NCCL launches a group.
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "emulator/driver/emulated_devices.h"

namespace {

constexpr int kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5;
constexpr int kFloat32 = 7, kSum = 0;

// One all-reduce across the ranks of a clique: where each rank's send and receive buffers are.
struct Collective {
  std::mutex mutex;
  std::condition_variable done;
  int arrived = 0, ranks;
  bool finished = false;
  std::size_t count;
  std::vector<const float*> send;
  std::vector<float*> recv;
  explicit Collective(int n, std::size_t c) : ranks(n), count(c), send(n), recv(n) {}

  void arrive(int rank, const float* s, float* r) {
    std::unique_lock lock(mutex);
    send[rank] = s, recv[rank] = r;
    if (++arrived == ranks) {
      std::vector<float> sum(count, 0.0f);
      for (int k = 0; k < ranks; ++k)
        for (std::size_t i = 0; i < count; ++i) sum[i] += send[k][i];
      for (int k = 0; k < ranks; ++k) std::memcpy(recv[k], sum.data(), count * sizeof(float));
      finished = true;
      done.notify_all();
    } else {
      done.wait(lock, [&] { return finished; });
    }
  }
};

struct Clique {
  std::mutex mutex;
  std::vector<std::shared_ptr<Collective>> collectives;  // by sequence number
  int ranks;
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank, device;
  std::size_t calls = 0;  // this rank's collectives so far: its next sequence number
};

thread_local int group_depth = 0;
thread_local std::vector<std::function<void()>> grouped;

}  // namespace

using namespace towerjit::emulator;

extern "C" {

int ncclGetVersion(int* v) {
  *v = 22800;
  return kSuccess;
}

const char* ncclGetErrorString(int r) {
  switch (r) {
    case kSuccess: return "no error";
    case kInvalidArgument: return "invalid argument (emulated NCCL)";
    case kInvalidUsage: return "invalid usage (emulated NCCL)";
    default: return "unhandled error (emulated NCCL)";
  }
}

int ncclCommInitAll(Comm** comms, int n, const int* devlist) {
  if (n < 1) return kInvalidArgument;
  auto clique = std::make_shared<Clique>();
  clique->ranks = n;
  for (int r = 0; r < n; ++r) {
    const int device = devlist ? devlist[r] : r;
    if (device < 0 || device >= static_cast<int>(devices().size())) return kInvalidArgument;
    comms[r] = new Comm{clique, r, device};
  }
  return kSuccess;
}

int ncclCommDestroy(Comm* c) {
  delete c;
  return kSuccess;
}

int ncclAllReduce(const void* send, void* recv, std::size_t count, int type, int op, Comm* comm, CUstream s) {
  if (type != kFloat32 || op != kSum) return kInvalidArgument;
  if (!device_range(reinterpret_cast<std::uintptr_t>(send), count * 4) ||
      !device_range(reinterpret_cast<std::uintptr_t>(recv), count * 4))
    return kInvalidArgument;
  std::shared_ptr<Collective> collective;
  {
    std::lock_guard lock(comm->clique->mutex);
    auto& all = comm->clique->collectives;
    if (comm->calls >= all.size()) all.push_back(std::make_shared<Collective>(comm->clique->ranks, count));
    collective = all[comm->calls++];
  }
  if (collective->count != count) return kInvalidUsage;  // the ranks disagree on the size
  const int rank = comm->rank;
  Stream* stream = &stream_of(s);
  auto queue = [=] {
    stream->enqueue([=] { collective->arrive(rank, static_cast<const float*>(send), static_cast<float*>(recv)); });
  };
  if (group_depth > 0) grouped.push_back(queue);
  else queue();
  return kSuccess;
}

int ncclGroupStart() {
  ++group_depth;
  return kSuccess;
}

int ncclGroupEnd() {
  if (group_depth == 0) return kInvalidUsage;
  if (--group_depth == 0) {
    for (auto& q : grouped) q();
    grouped.clear();
  }
  return kSuccess;
}

}  // extern "C"
