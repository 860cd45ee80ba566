// The emulator's NCCL: communicators over the emulated devices (ncclCommInitAll) and
// all-reduces that really sum across them. Each rank's part runs on its own stream when the
// stream reaches it; the last rank to arrive adds the ranks' buffers in rank order (the same
// bits every run) into every rank's output, and only then do the ranks' streams go on, as
// NCCL's kernels hold their streams until the collective is done. Calls between
// ncclGroupStart and ncclGroupEnd are queued at GroupEnd, as NCCL launches a group.
//
// Across processes (ncclGetUniqueId, then ncclCommInitRank on every process, the id sent
// between them by the caller, as over MPI): the ranks meet in POSIX shared memory named by the
// id. Each collective is a segment of its own, named by the id and its sequence number: each
// rank maps it (the first creates it, zeroed), copies its send buffer into its slot, counts
// itself in, and once every rank has, sums the slots in rank order into its receive buffer
// (the same bits on every rank and as within one process); the last to leave unlinks it. A
// rank's stream is held until the sum is in, as NCCL's kernel holds it. Init does not wait for
// the other ranks (real NCCL does); a rank that never comes leaves the others waiting, as in
// NCCL, until a limit (TOWERJIT_EMULATED_NCCL_TIMEOUT seconds, 120 by default) aborts them.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "emulator/driver/emulated_devices.h"
#include "emulator/kernel/block_scheduler.h"
#include "jit/knobs.h"

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

// NCCL's ncclUniqueId: 128 bytes, passed by value. The emulator's starts with kIdMagic, then
// the name its shared-memory segments take.
struct UniqueId {
  char internal[128];
};
constexpr char kIdMagic[] = "towerjit-emulated-nccl:";

// A communicator's ranks in several processes: the segments' name stem and the world's size.
struct World {
  std::string name;  // "/tj-nccl-<random>"
  int ranks;
};

struct Comm {
  std::shared_ptr<Clique> clique;  // ranks in this process (ncclCommInitAll)
  int rank, device;
  // This rank's collectives so far: the next one's sequence number. Taken when a collective is
  // queued (at ncclGroupEnd for grouped calls), in the host's order, as NCCL orders a
  // communicator's collectives; one captured into a CUDA graph takes a new one at every launch.
  std::atomic<std::size_t> calls{0};
  std::shared_ptr<World> world;  // or ranks over processes (ncclCommInitRank)
};

// One all-reduce over processes, as each rank sees it: a shared segment holding the two
// counters and every rank's slot of `count` floats.
struct SharedHeader {
  int arrived, left;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "towerjit emulated NCCL: %s\n", what.c_str());
  std::abort();
}

double timeout_s() {
  try {
    return towerjit::knobs::emulated_nccl_timeout_s();
  } catch (const std::exception& e) {  // (a C entry point: no exception may leave it)
    fail(e.what());
  }
}

void all_reduce_over_processes(const World& world, std::size_t sequence, int rank, const float* send, float* recv,
                               std::size_t count) {
  const std::string name = world.name + "-" + std::to_string(sequence);
  const std::size_t bytes = sizeof(SharedHeader) + static_cast<std::size_t>(world.ranks) * count * sizeof(float);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail("cannot make shared memory " + name);
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (at == MAP_FAILED) fail("cannot map shared memory " + name);
  auto* header = static_cast<SharedHeader*>(at);
  float* slots = reinterpret_cast<float*>(static_cast<char*>(at) + sizeof(SharedHeader));
  std::memcpy(slots + static_cast<std::size_t>(rank) * count, send, count * sizeof(float));
  std::atomic_ref<int>(header->arrived).fetch_add(1, std::memory_order_acq_rel);
  const auto start = std::chrono::steady_clock::now();
  const double limit = timeout_s();
  while (std::atomic_ref<int>(header->arrived).load(std::memory_order_acquire) < world.ranks) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit)
      fail("rank " + std::to_string(rank) + " of " + std::to_string(world.ranks) + " waited " +
           std::to_string(static_cast<int>(limit)) + " s for the other ranks in all-reduce " +
           std::to_string(sequence + 1));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int k = 0; k < world.ranks; ++k) sum += slots[static_cast<std::size_t>(k) * count + i];
    recv[i] = sum;
  }
  const bool last = std::atomic_ref<int>(header->left).fetch_add(1, std::memory_order_acq_rel) + 1 == world.ranks;
  ::munmap(at, bytes);
  if (last) ::shm_unlink(name.c_str());
}

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

int ncclGetUniqueId(UniqueId* id) {
  if (!id) return kInvalidArgument;
  std::random_device random;
  char name[64];
  std::snprintf(name, sizeof name, "/tj-nccl-%d-%08x%08x", static_cast<int>(::getpid()), random(), random());
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "%s%s", kIdMagic, name);
  return kSuccess;
}

int ncclCommInitRank(Comm** comm, int nranks, UniqueId id, int rank) {
  id.internal[sizeof id.internal - 1] = '\0';
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks ||
      std::strncmp(id.internal, kIdMagic, sizeof kIdMagic - 1) != 0)
    return kInvalidArgument;
  auto world = std::make_shared<World>(World{id.internal + sizeof kIdMagic - 1, nranks});
  *comm = new Comm{nullptr, rank, current_device().index(), 0, std::move(world)};
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
  const int rank = comm->rank;
  Stream* stream = &stream_of(s);
  if (comm->world) {
    const std::shared_ptr<World> world = comm->world;
    auto queue = [=] {
      stream->enqueue_made([=]() -> std::function<void()> {
        const std::size_t sequence = comm->calls++;
        return [=] {
          all_reduce_over_processes(*world, sequence, rank, static_cast<const float*>(send), static_cast<float*>(recv),
                                    count);
        };
      });
    };
    if (group_depth > 0) grouped.push_back(queue);
    else queue();
    return kSuccess;
  }
  auto queue = [=] {
    stream->enqueue_made([=]() -> std::function<void()> {
      std::shared_ptr<Collective> collective;
      {
        std::lock_guard lock(comm->clique->mutex);
        auto& all = comm->clique->collectives;
        const std::size_t sequence = comm->calls++;
        while (sequence >= all.size()) all.push_back(std::make_shared<Collective>(comm->clique->ranks, count));
        collective = all[sequence];
      }
      return [=] {
        if (collective->count != count)
          throw Fault("emulated NCCL: the ranks of an all-reduce disagree on its size (" +
                      std::to_string(collective->count) + " and " + std::to_string(count) + " floats)");
        collective->arrive(rank, static_cast<const float*>(send), static_cast<float*>(recv));
      };
    });
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
