// The emulator's NCCL: communicators over the emulated devices (ncclCommInitAll) and
// all-reduces that really sum across them. Each rank's part runs on its own stream when the
// stream reaches it; the last rank to arrive adds the ranks' buffers in rank order (the same
// bits every run) into every rank's output, and only then do the ranks' streams go on, as
// NCCL's kernels hold their streams until the collective is done. Calls between
// ncclGroupStart and ncclGroupEnd are queued at GroupEnd, as NCCL launches a group.
//
// f32, bf16 and f16 (gradient compression): each partial sum is one rounding to the format of
// the exact sum of two of its values, starting from rank 0's (NCCL's kernels add two 16-bit
// values in float, exact there or below the rounding, and round to the format).
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

#include "dsl/half_float.h"
#include "emulator/driver/emulated_devices.h"
#include "emulator/kernel/block_scheduler.h"
#include "jit/knobs.h"

namespace {

constexpr int kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5;
constexpr int kFloat16 = 6, kFloat32 = 7, kBfloat16 = 9, kSum = 0;

// The bytes of an element of an NCCL type this NCCL sums (0: not one).
std::size_t element_bytes(int type) { return type == kFloat32 ? 4 : type == kFloat16 || type == kBfloat16 ? 2 : 0; }

// out = Σ_k parts[k] in rank order, in the type: see the file's comment.
void sum_in_rank_order(int type, const std::vector<const void*>& parts, void* out, std::size_t count) {
  if (type == kFloat32) {
    std::vector<float> sum(static_cast<const float*>(parts[0]), static_cast<const float*>(parts[0]) + count);
    for (std::size_t k = 1; k < parts.size(); ++k)
      for (std::size_t i = 0; i < count; ++i) sum[i] += static_cast<const float*>(parts[k])[i];
    std::memcpy(out, sum.data(), count * sizeof(float));
    return;
  }
  const towerjit::DType format = type == kBfloat16 ? towerjit::DType::bf16 : towerjit::DType::f16;
  std::vector<uint16_t> sum(static_cast<const uint16_t*>(parts[0]), static_cast<const uint16_t*>(parts[0]) + count);
  for (std::size_t k = 1; k < parts.size(); ++k)
    for (std::size_t i = 0; i < count; ++i)
      sum[i] = towerjit::half_bits(
          towerjit::half_value(sum[i], format) + towerjit::half_value(static_cast<const uint16_t*>(parts[k])[i], format),
          format);
  std::memcpy(out, sum.data(), count * sizeof(uint16_t));
}

// One all-reduce across the ranks of a clique: where each rank's send and receive buffers are.
struct Collective {
  std::mutex mutex;
  std::condition_variable done;
  int arrived = 0, ranks;
  bool finished = false;
  int type;
  std::size_t count;
  std::vector<const void*> send;
  std::vector<void*> recv;
  explicit Collective(int n, int t, std::size_t c) : ranks(n), type(t), count(c), send(n), recv(n) {}

  void arrive(int rank, const void* s, void* r) {
    std::unique_lock lock(mutex);
    send[rank] = s, recv[rank] = r;
    if (++arrived == ranks) {
      std::vector<char> sum(count * element_bytes(type));
      sum_in_rank_order(type, send, sum.data(), count);
      for (int k = 0; k < ranks; ++k) std::memcpy(recv[k], sum.data(), sum.size());
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
// counters and every rank's slot of `count` elements.
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

void all_reduce_over_processes(const World& world, std::size_t sequence, int rank, int type, const void* send,
                               void* recv, std::size_t count) {
  const std::string name = world.name + "-" + std::to_string(sequence);
  const std::size_t slot = count * element_bytes(type);
  const std::size_t bytes = sizeof(SharedHeader) + static_cast<std::size_t>(world.ranks) * slot;
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail("cannot make shared memory " + name);
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (at == MAP_FAILED) fail("cannot map shared memory " + name);
  auto* header = static_cast<SharedHeader*>(at);
  char* slots = static_cast<char*>(at) + sizeof(SharedHeader);
  std::memcpy(slots + static_cast<std::size_t>(rank) * slot, send, slot);
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
  std::vector<const void*> parts;
  for (int k = 0; k < world.ranks; ++k) parts.push_back(slots + static_cast<std::size_t>(k) * slot);
  sum_in_rank_order(type, parts, recv, count);
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
  const std::size_t element = element_bytes(type);
  if (element == 0 || op != kSum) return kInvalidArgument;
  if (!device_range(reinterpret_cast<std::uintptr_t>(send), count * element) ||
      !device_range(reinterpret_cast<std::uintptr_t>(recv), count * element))
    return kInvalidArgument;
  const int rank = comm->rank;
  Stream* stream = &stream_of(s);
  if (comm->world) {
    const std::shared_ptr<World> world = comm->world;
    auto queue = [=] {
      stream->enqueue_made([=]() -> std::function<void()> {
        const std::size_t sequence = comm->calls++;
        return [=] {
          all_reduce_over_processes(*world, sequence, rank, type, send, recv, count);
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
        while (sequence >= all.size()) all.push_back(std::make_shared<Collective>(comm->clique->ranks, type, count));
        collective = all[sequence];
      }
      return [=] {
        if (collective->count != count || collective->type != type)
          throw Fault("emulated NCCL: the ranks of an all-reduce disagree on its size or type (" +
                      std::to_string(collective->count) + " elements of type " + std::to_string(collective->type) +
                      " and " + std::to_string(count) + " of type " + std::to_string(type) + ")");
        collective->arrive(rank, send, recv);
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
