// A stand-in for NCCL (built as libnccl.so.2 next to the fake driver, so LD_LIBRARY_PATH finds
// it first): the fake driver's device memory is host memory, so an all-reduce is a sum over
// host buffers. It does what towerjit asks of NCCL (runtime/cuda/nccl.h): communicators made
// together (ncclCommInitAll) and in-place f32 sums issued by one thread for every rank inside a
// group, carried out when the group ends. It logs the calls for the tests (tjnccl_*).
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace {

struct Comm {
  int rank, ranks, clique;
};

struct Pending {
  Comm* comm;
  const float* send;
  float* recv;
  size_t count;
};

struct State {
  std::mutex mutex;
  int depth = 0, cliques = 0;
  std::vector<Pending> pending;
  int calls = 0, groups = 0;
  long long elements = 0;
};

State& state() {
  static State s;
  return s;
}

constexpr int kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5;
constexpr int kFloat32 = 7, kSum = 0;

// Every clique's k-th all-reduce of each rank, summed and written to every rank's buffer.
int run_pending(State& s) {
  std::map<int, std::map<int, std::vector<Pending>>> by_clique;  // clique -> rank -> calls
  for (const Pending& p : s.pending) by_clique[p.comm->clique][p.comm->rank].push_back(p);
  s.pending.clear();
  for (auto& [clique, ranks] : by_clique) {
    const size_t calls = ranks.begin()->second.size();
    const int expected = ranks.begin()->second.front().comm->ranks;
    if (static_cast<int>(ranks.size()) != expected) return kInvalidUsage;  // a rank missing
    for (auto& [rank, list] : ranks)
      if (list.size() != calls) return kInvalidUsage;
    for (size_t k = 0; k < calls; ++k) {
      const size_t count = ranks.begin()->second[k].count;
      std::vector<float> sum(count, 0.0f);
      for (auto& [rank, list] : ranks) {
        if (list[k].count != count) return kInvalidArgument;
        for (size_t i = 0; i < count; ++i) sum[i] += list[k].send[i];
      }
      for (auto& [rank, list] : ranks)
        for (size_t i = 0; i < count; ++i) list[k].recv[i] = sum[i];
    }
  }
  ++s.groups;
  return kSuccess;
}

}  // namespace

extern "C" {

int ncclGetVersion(int* v) { *v = 22809; return kSuccess; }
const char* ncclGetErrorString(int r) { return r == 0 ? "no error" : "an error of the fake NCCL"; }

int ncclCommInitAll(Comm** comms, int n, const int*) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const int clique = s.cliques++;
  for (int r = 0; r < n; ++r) comms[r] = new Comm{r, n, clique};
  return kSuccess;
}

int ncclCommDestroy(Comm* c) { delete c; return kSuccess; }

int ncclGroupStart() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  ++s.depth;
  return kSuccess;
}

int ncclGroupEnd() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.depth == 0) return kInvalidUsage;
  return --s.depth == 0 ? run_pending(s) : kSuccess;
}

int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, Comm* comm, void*) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (type != kFloat32 || op != kSum || !comm) return kInvalidArgument;
  ++s.calls;
  s.elements += static_cast<long long>(count);
  s.pending.push_back({comm, static_cast<const float*>(send), static_cast<float*>(recv), count});
  return s.depth > 0 ? kSuccess : run_pending(s);
}

void tjnccl_reset() {
  std::lock_guard lock(state().mutex);
  state().calls = state().groups = 0;
  state().elements = 0;
}
int tjnccl_calls() { return state().calls; }
int tjnccl_groups() { return state().groups; }
long long tjnccl_elements() { return state().elements; }

}  // extern "C"
