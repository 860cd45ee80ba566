// The MPI transport: a plugin (libtowerjit_mpi.so) that runtime/dist/world.cpp loads only when
// the process was launched by mpirun or srun, so a binary run alone never loads libmpi nor pays
// for MPI_Init. It links MPI (Debian's OpenMPI 4.1) the ordinary way, so it uses mpi.h's types
// and constants rather than guessing an ABI.
//
// One communication thread makes every MPI call (MPI_THREAD_FUNNELED: it calls MPI_Init_thread
// and MPI_Finalize too), from a queue, in the order the calls were started: the trainer's
// threads hand it buffers and wait for tickets, so a bucket's all-reduce runs while the next
// bucket is reduced in-process. The collectives use a duplicate of MPI_COMM_WORLD, so no
// message of the user's own MPI code can match ours.
//
// A wait that lasts (a rank stopped, deadlocked, or far behind) is reported as Horovod's stall
// check does: a warning on stderr every TransportTimeouts::stall_warning_s, naming the call the
// communication thread is in, and, past stall_timeout_s, an error that ends the world.
// The C API only: mpi.h would otherwise declare the C++ bindings, which libmpi lacks.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/half_wire.h"
#include "runtime/dist/transport.h"

namespace towerjit::dist {
namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

class MpiTransport final : public Transport {
 public:
  // When MPI's start-up takes longer than `timeout_s`, returns with timed_out() set, the
  // communication thread still stuck in it; the object must then be leaked, never destroyed.
  explicit MpiTransport(const TransportTimeouts& timeouts) : timeouts_(timeouts), thread_([this] { run(); }) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::duration<double>(timeouts.start_s), [&] { return started_; })) {
      timed_out_ = true;
      return;
    }
    if (!start_error_.empty()) {
      lock.unlock();
      thread_.join();
      throw std::runtime_error(start_error_);
    }
  }

  ~MpiTransport() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      // A call given up on that still waits may never return, and joining its thread would
      // hang the exit: a world given up on ends (a program that caught the stall error).
      if (gave_up_ && !running_.empty()) abort(1);
    }
    changed_.notify_all();
    thread_.join();  // the thread finalises MPI once the queue is empty
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "MPI (" + library_ + ")"; }

  Ticket start_all_reduce_sum(float* data, size_t count, std::shared_ptr<const void> owner) override {
    payload_ += static_cast<int64_t>(count * sizeof(float));
    return enqueue(sized("MPI_Allreduce", count * sizeof(float)), [=, this, owner = std::move(owner)] {
      check(MPI_Allreduce(MPI_IN_PLACE, data, as_int(count), MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce");
    });
  }
  Ticket start_all_reduce_sum(double* data, size_t count, std::shared_ptr<const void> owner) override {
    payload_ += static_cast<int64_t>(count * sizeof(double));
    return enqueue(sized("MPI_Allreduce", count * sizeof(double)), [=, this, owner = std::move(owner)] {
      check(MPI_Allreduce(MPI_IN_PLACE, data, as_int(count), MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
    });
  }

  Ticket start_all_reduce_sum(uint16_t* data, size_t count, DType format, std::shared_ptr<const void> owner) override {
    payload_ += static_cast<int64_t>(count * sizeof(uint16_t));
    return enqueue(sized("MPI_Allreduce", count * sizeof(uint16_t)), [=, this, owner = std::move(owner)] {
      check(MPI_Allreduce(MPI_IN_PLACE, data, as_int(count), MPI_UINT16_T, format == DType::bf16 ? sum_bf16_ : sum_f16_,
                          comm_),
            "MPI_Allreduce");
    });
  }

  void wait(Ticket ticket) override {
    std::unique_lock lock(mutex_);
    const auto start = std::chrono::steady_clock::now();
    const auto ready = [&] { return done_ >= ticket || !error_.empty(); };
    for (int warnings = 1; !ready(); ++warnings) {
      const double next_warning = warnings * timeouts_.stall_warning_s;
      const double limit = timeouts_.stall_timeout_s > 0 ? std::min(next_warning, timeouts_.stall_timeout_s) : next_warning;
      if (changed_.wait_until(lock, start + std::chrono::duration<double>(limit), ready)) break;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string what = (running_.empty() ? "a call" : running_) + " has waited " +
                               std::to_string(static_cast<int>(waited)) + " s for the other ranks";
      // The error reaches the user through world.h, which names the rank; the warning does not.
      // It is every later call's error too: the call given up on may still finish, and a call
      // after it would pair with another collective on the other ranks.
      if (timeouts_.stall_timeout_s > 0 && waited >= timeouts_.stall_timeout_s) {
        error_ = what + ": one is stopped, deadlocked or far slower (TOWERJIT_MPI_STALL_TIMEOUT=" +
                 std::to_string(static_cast<int>(timeouts_.stall_timeout_s)) + " s)";
        gave_up_ = true;
        break;
      }
      std::fprintf(stderr,
                   "towerjit: rank %d of %d: %s; one may be stalled (TOWERJIT_MPI_STALL_TIMEOUT stops the run after a "
                   "limit)\n",
                   rank_, size_, what.c_str());
    }
    if (!error_.empty()) throw std::runtime_error(error_);
  }

  // The blocking calls run on a State of their own, shared with their job, so a call given up
  // on (a stall timeout) never writes into the caller's memory (transport.h).
  std::vector<std::vector<char>> all_gather(const std::vector<char>& mine) override {
    payload_ += static_cast<int64_t>(mine.size());
    struct State {
      std::vector<char> mine;
      std::vector<std::vector<char>> out;
    };
    return blocking(sized("MPI_Allgatherv", mine.size()), State{mine, {}}, [this](State& s) {
             std::vector<int> counts(size_), offsets(size_);
             const int own = as_int(s.mine.size());
             check(MPI_Allgather(&own, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
             int total = 0;
             for (int r = 0; r < size_; ++r) offsets[r] = total, total += counts[r];
             std::vector<char> all(total);
             check(MPI_Allgatherv(s.mine.data(), own, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE,
                                  comm_),
                   "MPI_Allgatherv");
             s.out.resize(size_);
             for (int r = 0; r < size_; ++r) s.out[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + counts[r]);
           })
        .out;
  }

  void all_gather(const void* mine, size_t bytes, void* all) override {
    payload_ += static_cast<int64_t>(bytes);
    struct State {
      std::vector<char> mine, all;
    };
    const char* from = static_cast<const char*>(mine);
    State s = blocking(sized("MPI_Allgather", bytes), State{{from, from + bytes}, std::vector<char>(bytes * size_)},
                       [this](State& s) {
                         check(MPI_Allgather(s.mine.data(), as_int(s.mine.size()), MPI_BYTE, s.all.data(),
                                             as_int(s.mine.size()), MPI_BYTE, comm_),
                               "MPI_Allgather");
                       });
    if (!s.all.empty()) std::memcpy(all, s.all.data(), s.all.size());
  }

  void broadcast(std::vector<char>& data, int root) override {
    if (rank_ == root) payload_ += static_cast<int64_t>(data.size());
    data = blocking("MPI_Bcast from rank " + std::to_string(root), data, [this, root](std::vector<char>& d) {
      long long bytes = static_cast<long long>(d.size());
      check(MPI_Bcast(&bytes, 1, MPI_LONG_LONG, root, comm_), "MPI_Bcast");
      d.resize(static_cast<size_t>(bytes));
      check(MPI_Bcast(d.data(), as_int(d.size()), MPI_BYTE, root, comm_), "MPI_Bcast");
    });
  }

  void barrier() override {
    blocking("MPI_Barrier", 0, [this](int&) { check(MPI_Barrier(comm_), "MPI_Barrier"); });
  }

  void send(const std::vector<char>& bytes, int to, int tag) override {
    payload_ += static_cast<int64_t>(bytes.size());
    blocking(sized("MPI_Send to rank " + std::to_string(to), bytes.size()), bytes, [this, to, tag](std::vector<char>& b) {
      check(MPI_Send(b.data(), as_int(b.size()), MPI_BYTE, to, tag, comm_), "MPI_Send");
    });
  }

  int receive(std::vector<char>& bytes, int from, int tag) override {
    struct State {
      std::vector<char> bytes;
      int sender = 0;
    };
    State s = blocking(from == kAnySource ? std::string("MPI_Recv from any rank") : "MPI_Recv from rank " + std::to_string(from),
                       State{}, [this, from, tag](State& s) {
                         MPI_Status status;
                         check(MPI_Probe(from == kAnySource ? MPI_ANY_SOURCE : from, tag, comm_, &status), "MPI_Probe");
                         int count = 0;
                         MPI_Get_count(&status, MPI_BYTE, &count);
                         s.bytes.resize(count);
                         s.sender = status.MPI_SOURCE;
                         check(MPI_Recv(s.bytes.data(), count, MPI_BYTE, s.sender, tag, comm_, MPI_STATUS_IGNORE),
                               "MPI_Recv");
                       });
    bytes = std::move(s.bytes);
    return s.sender;
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    // From the calling thread: the communication thread may be blocked in a collective that
    // waits for this very rank. Open MPI's MPI_Abort tells mpirun, which ends every rank.
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  int64_t payload_bytes() const override { return payload_; }
  bool timed_out() const { return timed_out_; }

 private:
  static int as_int(size_t n) {
    if (n > static_cast<size_t>(INT32_MAX))
      throw std::runtime_error("a collective of " + std::to_string(n) + " elements is more than MPI's int count allows");
    return static_cast<int>(n);
  }

  void check(int code, const char* call) const {
    if (code != MPI_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + mpi_error(code));
  }

  static std::string sized(const std::string& call, size_t bytes) {
    return call + " of " + std::to_string(bytes) + " bytes";
  }

  // `what` names the call in stall reports.
  Ticket enqueue(std::string what, std::function<void()> job) {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(what), std::move(job)});
    changed_.notify_all();
    return ++started_jobs_;
  }

  // Runs `call` on the communication thread on a copy of `state`, waits, and returns the state.
  template <class State, class Call>
  State blocking(std::string what, State state, Call call) {
    auto shared = std::make_shared<State>(std::move(state));
    wait(enqueue(std::move(what), [shared, call = std::move(call)]() mutable { call(*shared); }));
    return std::move(*shared);  // the job has run: the communication thread no longer touches it
  }

  // The communication thread: MPI's whole life, and every call in between.
  void run() {
    {
      int provided = 0;
      const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::lock_guard lock(mutex_);
      if (code != MPI_SUCCESS) start_error_ = "MPI_Init_thread failed: " + mpi_error(code);
      if (start_error_.empty()) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
        MPI_Op_create(&sum_on_wire<DType::bf16>, /*commute=*/1, &sum_bf16_);
        MPI_Op_create(&sum_on_wire<DType::f16>, /*commute=*/1, &sum_f16_);
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int length = 0;
        MPI_Get_library_version(version, &length);
        library_ = std::string(version, length);
        if (const size_t comma = library_.find(','); comma != std::string::npos) library_.resize(comma);
        while (!library_.empty() && (library_.back() == '\n' || library_.back() == '\0')) library_.pop_back();
      }
    }
    // Every rank has arrived and can be reached: a first barrier, within the start-up's time.
    if (start_error_.empty())
      if (const int code = MPI_Barrier(comm_); code != MPI_SUCCESS) start_error_ = "the first MPI_Barrier failed: " + mpi_error(code);
    {
      std::lock_guard lock(mutex_);
      started_ = true;
      changed_.notify_all();
      if (!start_error_.empty()) return;
    }
    while (true) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !queue_.empty() || stop_; });
        if (queue_.empty()) break;
        job = std::move(queue_.front());
        queue_.pop_front();
        running_ = job.what + " (call " + std::to_string(done_ + 1) + ")";
      }
      // After a failure the ranks are out of step: a later collective could pair with another
      // one elsewhere, so the queue is drained without calling MPI (every wait throws error_).
      bool failed;
      {
        std::lock_guard lock(mutex_);
        failed = !error_.empty();
      }
      std::string failure;
      try {
        if (!failed) job.run();
      } catch (const std::exception& e) {
        failure = e.what();
      }
      std::lock_guard lock(mutex_);
      running_.clear();
      ++done_;
      if (!failure.empty() && error_.empty()) error_ = failure;
      changed_.notify_all();
    }
    MPI_Op_free(&sum_bf16_);
    MPI_Op_free(&sum_f16_);
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  // MPI's user reduction for 16-bit values: inout[i] = in[i] + inout[i], rounded to the format.
  template <DType format>
  static void sum_on_wire(void* in, void* inout, int* count, MPI_Datatype*) {
    const auto* a = static_cast<const uint16_t*>(in);
    auto* b = static_cast<uint16_t*>(inout);
    for (int i = 0; i < *count; ++i) b[i] = add_on_wire(a[i], b[i], format);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op sum_bf16_ = MPI_OP_NULL, sum_f16_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
  std::string library_;
  std::atomic<int64_t> payload_ = 0;

  const TransportTimeouts timeouts_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Job {
    std::string what;
    std::function<void()> run;
  };
  std::deque<Job> queue_;
  std::string running_;      // the call the communication thread is in, for stall reports
  Ticket started_jobs_ = 0;  // tickets handed out
  Ticket done_ = 0;          // jobs finished (in ticket order)
  std::string error_;        // the first failure; every later wait rethrows it
  std::string start_error_;
  bool started_ = false;
  bool timed_out_ = false;
  bool gave_up_ = false;  // a wait timed out on a call (which may still be running)
  bool stop_ = false;
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace
}  // namespace towerjit::dist

extern "C" towerjit::dist::Transport* towerjit_make_mpi_transport_v3(const towerjit::dist::TransportTimeouts& timeouts,
                                                                     std::string* error) {
  try {
    auto* transport = new towerjit::dist::MpiTransport(timeouts);
    if (!transport->timed_out()) return transport;
    // Leaked on purpose: its thread is inside MPI's start-up and cannot be joined.
    *error = "MPI's start-up (MPI_Init_thread and a first barrier over every rank) did not finish within " +
             std::to_string(static_cast<int>(timeouts.start_s)) +
             " s: a rank has not started or cannot reach this one (TOWERJIT_MPI_START_TIMEOUT sets the limit)";
    return nullptr;
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}
