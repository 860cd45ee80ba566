#include "runtime/dist/world.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <chrono>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "runtime/dist/checked_transport.h"

namespace towerjit::dist {
namespace {

// A world of one: every collective is the identity, and returns at once.
class InProcessTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "in-process"; }
  Ticket start_all_reduce_sum(float*, size_t, std::shared_ptr<const void>) override { return 0; }
  Ticket start_all_reduce_sum(double*, size_t, std::shared_ptr<const void>) override { return 0; }
  Ticket start_all_reduce_sum(uint16_t*, size_t, DType, std::shared_ptr<const void>) override { return 0; }
  void wait(Ticket) override {}
  std::vector<std::vector<char>> all_gather(const std::vector<char>& mine) override { return {mine}; }
  void all_gather(const void* mine, size_t bytes, void* all) override {
    if (bytes) std::memcpy(all, mine, bytes);
  }
  void broadcast(std::vector<char>&, int) override {}
  void barrier() override {}
  void send(const std::vector<char>&, int to, int) override {
    throw std::runtime_error("send to rank " + std::to_string(to) + " in a world of one process");
  }
  int receive(std::vector<char>&, int from, int) override {
    throw std::runtime_error("receive from rank " + std::to_string(from) + " in a world of one process");
  }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  int64_t payload_bytes() const override { return 0; }
};

std::mutex world_mutex;
std::unique_ptr<Transport> the_world;
// Set when this rank raised an error that every rank raises too (a disagreement is found from
// the same gathered values on each): the abort can then wait for all to print theirs.
std::atomic<bool> every_rank_raised{false};

bool has_env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// "rank 1 of 4: " from the launcher's environment, before MPI can say.
std::string launched_rank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!rank) rank = std::getenv("PMIX_RANK");
  if (!rank) rank = std::getenv("PMI_RANK");
  if (!size) size = std::getenv("SLURM_NTASKS");
  if (!rank) return "";
  return std::string("rank ") + rank + (size ? std::string(" of ") + size : std::string()) + ": ";
}

std::unique_ptr<Transport> load_mpi(const Launch& launch, Loc loc) {
  const std::string path = knobs::mpi_library();
  // RTLD_GLOBAL: Open MPI's components, which it loads itself, resolve libmpi's symbols.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  user_check(handle != nullptr, loc)
      << "this process was started by " << launch.launcher << " but the MPI transport " << path
      << " cannot be loaded (" << dlerror() << "); build towerjit with OpenMPI installed (libopenmpi-dev), set "
      << "TOWERJIT_MPI_LIBRARY to the plugin, or TOWERJIT_MPI=off to run this process alone";
  auto make = reinterpret_cast<MakeTransport>(dlsym(handle, kMakeMpiTransport));
  user_check(make != nullptr, loc) << "the MPI transport " << path << " has no " << kMakeMpiTransport
                                   << "; it belongs to another towerjit build";
  std::string error;
  const TransportTimeouts timeouts{.start_s = knobs::mpi_start_timeout_s(),
                                   .stall_warning_s = knobs::mpi_stall_warning_s(),
                                   .stall_timeout_s = knobs::mpi_stall_timeout_s()};
  Transport* transport = make(timeouts, &error);
  user_check(transport != nullptr, loc) << launched_rank() << "MPI could not start under " << launch.launcher << ": "
                                        << error;
  return std::unique_ptr<Transport>(transport);
}

// srun's tasks given no PMI (srun --mpi=none, or a cluster's MpiDefault=none): SLURM_PROCID in
// a step of several tasks, but neither PMIX_RANK nor PMI_RANK. Alone, each task would train the
// whole run by itself, all writing the same files; Debian's Open MPI cannot start there either
// (it needs srun's PMIx), so each stops and says what to run. The batch script of sbatch -n N
// has SLURM_PROCID and SLURM_NTASKS but no SLURM_STEP_NUM_TASKS: it runs alone, as by hand.
void check_not_srun_without_pmi(Loc loc) {
  const char* task = std::getenv("SLURM_PROCID");
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (!knobs::mpi_enabled() || !task || !tasks || std::atoi(tasks) <= 1) return;
  user_check(false, loc) << "srun started this process as task " << task << " of " << tasks
                         << " without PMI (no PMIX_RANK nor PMI_RANK: srun --mpi=none, or the cluster's "
                         << "MpiDefault), so it cannot join the other tasks over MPI; run srun --mpi=pmix, "
                         << "or set TOWERJIT_MPI=off to run each task alone";
}

}  // namespace

Launch detect_launch() {
  if (!knobs::mpi_enabled()) return {};
  if (has_env("OMPI_COMM_WORLD_SIZE")) return {true, "mpirun"};
  if (has_env("SLURM_PROCID") && (has_env("PMIX_RANK") || has_env("PMI_RANK"))) return {true, "srun"};
  if (has_env("PMIX_RANK") || has_env("PMI_RANK")) return {true, "a PMI launcher"};
  return {};
}

Transport& world(Loc loc) {
  std::lock_guard lock(world_mutex);
  if (!the_world) {
    const Launch launch = detect_launch();
    if (!launch.launched) check_not_srun_without_pmi(loc);
    // Every failure of a call is a towerjit::Error from here on (checked_transport.h).
    the_world = checked_transport(launch.launched ? load_mpi(launch, loc) : std::make_unique<InProcessTransport>());
  }
  return *the_world;
}

bool world_is_shared() {
  std::lock_guard lock(world_mutex);
  return the_world && the_world->size() > 1;
}

std::string rank_prefix() {
  if (!world_is_shared()) return "";
  return "rank " + std::to_string(the_world->rank()) + " of " + std::to_string(the_world->size()) + ": ";
}

int WorldLayout::towers() const { return std::accumulate(towers_of_rank.begin(), towers_of_rank.end(), 0); }

WorldLayout world_layout(int own_towers, Loc loc) {
  Transport& w = world(loc);
  WorldLayout layout;
  layout.rank = w.rank();
  layout.towers_of_rank.resize(w.size());
  const UserCall at(loc);
  w.all_gather(&own_towers, sizeof(int), layout.towers_of_rank.data());
  for (int r = 0; r < layout.rank; ++r) layout.first_tower += layout.towers_of_rank[r];
  return layout;
}

std::string text_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

void check_agreement(const std::map<std::string, std::string>& items, Loc loc) {
  Transport& w = world(loc);
  if (w.size() == 1) return;
  // key \0 value \0 ..., every rank's, so each rank can name every difference.
  std::vector<char> mine;
  for (const auto& [key, value] : items) {
    mine.insert(mine.end(), key.begin(), key.end());
    mine.push_back('\0');
    mine.insert(mine.end(), value.begin(), value.end());
    mine.push_back('\0');
  }
  const UserCall at(loc);
  const std::vector<std::vector<char>> all = w.all_gather(mine);
  std::vector<std::map<std::string, std::string>> of_rank(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<char>& bytes = all[r];
    // Each string ends at its \0, or at the end of what the rank sent (a rank of another
    // build may send anything): never read past it.
    auto next = [&](size_t& at) {
      const auto end = std::find(bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.end(), '\0');
      std::string text(bytes.begin() + static_cast<std::ptrdiff_t>(at), end);
      at = static_cast<size_t>(end - bytes.begin()) + (end == bytes.end() ? 0 : 1);
      return text;
    };
    for (size_t at = 0; at < bytes.size();) {
      std::string key = next(at);
      of_rank[r][key] = next(at);
    }
  }
  auto shown = [](const std::string& v) { return v.size() > 80 ? "hash " + text_hash(v) : "\"" + v + "\""; };
  std::string differences;
  for (const auto& [key, value] : of_rank[0]) {
    std::string ranks;
    for (size_t r = 1; r < of_rank.size(); ++r) {
      auto it = of_rank[r].find(key);
      const std::string theirs = it == of_rank[r].end() ? "(missing)" : shown(it->second);
      if (it == of_rank[r].end() || it->second != value)
        ranks += ", " + theirs + " on rank " + std::to_string(r);
    }
    if (!ranks.empty()) differences += "; " + key + ": " + shown(value) + " on rank 0" + ranks;
  }
  if (!differences.empty()) every_rank_raised = true;
  user_check(differences.empty(), loc)
      << rank_prefix() << "the ranks of this run disagree" << differences
      << "; every process of an mpirun must build the same model with the same options (check the command line "
         "each rank gets)";
}

void abort_world_on_error(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (!world_is_shared()) return;
  if (every_rank_raised) {
    // Every rank printed its line before it came here: a barrier, so that no rank's abort ends
    // another before that one has printed (a sleep lost that race under a sanitizer). Should
    // the barrier itself fail (a rank gone), abort all the same.
    try {
      the_world->barrier();
    } catch (...) {
    }
  } else {
    // Ranks that may have found the same error (a file every rank is given) get a moment to
    // print theirs: a second, as an error's call stack may take a few hundred milliseconds to
    // symbolise.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  the_world->abort(code);
}

}  // namespace towerjit::dist
