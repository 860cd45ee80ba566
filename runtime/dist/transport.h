// What moves bytes between the processes of a world: the one interface the trainer's
// collectives go through, whatever carries them. A world of one process (no launcher) has the
// in-process transport, whose collectives return at once; a world launched by mpirun or srun
// has MPI's (runtime/dist/mpi_transport.cpp, a plugin loaded only then). The trainer calls the
// same functions in both, so it never asks where its peers live; another transport (Gloo,
// UCC) is one file implementing this class.
//
// Every collective is called by every rank, in the same order, with the same counts (as MPI
// requires). An implementation throws std::runtime_error (the MPI plugin is a library of its
// own); world() wraps the transport it makes (runtime/dist/checked_transport.h), so every
// failure reaches its caller as a towerjit::Error naming the rank, the call, the user's line
// in progress and what to do: callers never catch and rewrap one.
//
// A call may outlive the wait that gave up on it: a stall timeout, or another call's failure,
// throws while the communication thread is still inside the library, which may go on writing
// into the call's buffer when a late rank's bytes arrive. So a transport never writes into
// memory its caller may have freed by then: a started collective holds `owner`, which keeps
// its buffer alive until the call is done, and the blocking calls work on buffers of their own.
// After a failure, a transport starts no further call: the ranks are out of step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dsl/dtype.h"

namespace towerjit::dist {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "in-process", "MPI (Open MPI v4.1.4, ...)".
  virtual std::string name() const = 0;

  // A collective started and not yet waited for. Collectives complete in the order they were
  // started (one communication thread issues them), so waiting for the last waits for all.
  using Ticket = int64_t;
  // In place: data[k] = the sum over the ranks of their data[k] (count elements on every rank).
  // The buffer must stay untouched until wait(ticket) returns, and `owner` (whatever holds the
  // buffer) alive until the call is done: the transport keeps a reference that long.
  virtual Ticket start_all_reduce_sum(float* data, size_t count, std::shared_ptr<const void> owner) = 0;
  virtual Ticket start_all_reduce_sum(double* data, size_t count, std::shared_ptr<const void> owner) = 0;
  // The same on 16-bit values (`format` bf16 or f16, runtime/dist/half_wire.h): every partial
  // sum is taken exactly and rounded to the format, in the order the library's algorithm takes
  // (fixed for a pinned algorithm, as for floats), with the same bits on every rank. Half the
  // bytes of a float all-reduce: Horovod's Compression.fp16.
  virtual Ticket start_all_reduce_sum(uint16_t* data, size_t count, DType format, std::shared_ptr<const void> owner) = 0;
  virtual void wait(Ticket ticket) = 0;

  // Every rank's `mine` (bytes may differ from rank to rank), concatenated in rank order.
  virtual std::vector<std::vector<char>> all_gather(const std::vector<char>& mine) = 0;
  // Fixed size: rank r's `bytes` bytes of `mine` land at all + r * bytes.
  virtual void all_gather(const void* mine, size_t bytes, void* all) = 0;
  // Root's `data` (which may be resized on the other ranks) to every rank.
  virtual void broadcast(std::vector<char>& data, int root) = 0;
  virtual void barrier() = 0;

  // Point to point (the async parameter server): `bytes` to rank `to`, returning once sent;
  // and the next message with `tag` from rank `from` (kAnySource: any rank), returning its sender.
  static constexpr int kAnySource = -1;
  virtual void send(const std::vector<char>& bytes, int to, int tag) = 0;
  virtual int receive(std::vector<char>& bytes, int from, int tag) = 0;

  // Ends every process of the world with `code`, now: for a rank that raised, after it has
  // printed why, so no other rank waits for it in a collective.
  [[noreturn]] virtual void abort(int code) = 0;

  // The bytes of this rank's buffers handed to collectives so far (what it contributes; the
  // bytes on the wire depend on the algorithm the library picks), for measurements.
  virtual int64_t payload_bytes() const = 0;

  // Blocking forms, through a buffer of their own (see above): `data` may be on the stack.
  void all_reduce_sum(float* data, size_t count) { all_reduce_sum_copy(data, count); }
  void all_reduce_sum(double* data, size_t count) { all_reduce_sum_copy(data, count); }

 private:
  template <class T>
  void all_reduce_sum_copy(T* data, size_t count) {
    auto copy = std::make_shared<std::vector<T>>(data, data + count);
    wait(start_all_reduce_sum(copy->data(), count, copy));
    if (count) std::memcpy(data, copy->data(), count * sizeof(T));
  }
};

// How long a transport waits for the other ranks (the TOWERJIT_MPI_* knobs, jit/knobs.h).
struct TransportTimeouts {
  double start_s = 30;         // MPI's start-up and a first barrier
  double stall_warning_s = 60; // one call's wait before a warning on stderr, and between warnings
  double stall_timeout_s = 0;  // one call's wait before it fails (0: never)
};

// The MPI plugin's one entry point (extern "C", so dlsym finds it): a transport over
// MPI_COMM_WORLD, MPI initialised on a communication thread of its own, then a first barrier,
// so every rank is known to be reachable. Null and `error` set when MPI cannot start, or when
// that start-up takes more than `timeouts.start_s` seconds (a rank that never arrives).
using MakeTransport = Transport* (*)(const TransportTimeouts& timeouts, std::string* error);
inline constexpr const char* kMakeMpiTransport = "towerjit_make_mpi_transport_v3";

}  // namespace towerjit::dist
