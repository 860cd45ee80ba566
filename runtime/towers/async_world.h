// Async towers across processes: a parameter server on a rank of its own (rank 0), the towers
// on the other ranks (MXNet's dist_async, BytePS's async mode). No MPI one-sided windows: a
// worker sends each tower's gradients, already scaled by the strategy (1/N over the world's
// towers; a sparse one as its rows and values, of the size the tower's reads give it), with
// the apply count of the values they were computed from; the server's one apply
// thread (the caller of AsyncServer::next) applies each push exactly once, in the order they
// arrive, and sends the worker back the variables its towers read (the model's, not the
// optimiser's slots) as they are then, for their next slice: whole, except a table whose
// sparse apply changes only the rows pushed (SGD, Adagrad, SparseAdam), of which a reply
// carries the rows changed since that worker's last reply (every row in the first of a fit()),
// so it scales with the rows read, not the vocabulary. Staleness is the applies by others between a push's read and its apply,
// counted on the server over every worker's towers. With AsyncApply::max_staleness = k the
// server holds back (receives, does not apply) a push of a tower more than k applies ahead of
// the slowest tower, so the worker waits for its reply.
//
// fit() drives both sides (runtime/towers/strategies/async_parameter_server.cpp): every rank reads the same sequence of
// batches, a worker its towers' rows, the server none; the server reports each batch to the
// hooks once every tower's slice of it is applied, and holds back pushes of later batches
// while a batch whose hooks use the trainer (an evaluation, a checkpoint) is unfinished, so
// those hooks see exactly the applies of the batches before it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_program.h"
#include "runtime/towers/tower_state.h"

namespace towerjit::detail {

// The parameter server's side, on rank 0 (whose own towers, if any were declared, stay idle).
class AsyncServer {
 public:
  struct Push {
    int from = 0;         // the worker's rank
    int64_t step = 0;     // the batch: fit()'s step number
    int tower = 0;        // the world tower index
    int64_t read_at = 0;  // the apply count of the values the gradients came from
    double loss = 0;      // the tower's slice's loss
    std::vector<char> bytes;  // the message
  };
  struct Applied {
    int64_t step = 0;
    int tower = 0;
    double loss = 0;
    double learning_rate = 0;
    int64_t staleness = 0;
  };
  // `values` and `apply`: the one copy of the variables and its apply program.
  AsyncServer(TowerState& state, HostVariables& values, CpuProgram& apply);
  // The next push from any worker (blocks).
  // Errors (at `loc`, the user's fit()): a transport failure.
  Push receive(Loc loc);
  // Whether `push` may be applied now under AsyncApply::max_staleness = k: its tower has
  // applied at most k times more than the slowest tower (the slowest always may).
  bool may_apply(const Push& push) const;
  // Applies `push` (once), then sends its worker the variables.
  Applied apply(Push push, Loc loc);

 private:
  // The rows of one table changed since a worker's last reply.
  struct ChangedRows {
    bool all = true;            // every row (nothing sent yet in this fit())
    std::vector<char> marked;   // per row: listed in `rows`
    std::vector<int32_t> rows;  // in the order they changed
  };
  void mark_changed(const HostFeeds& gradients);
  void put_reply(std::vector<char>& reply, int worker);

  TowerState& state_;
  HostVariables& values_;
  CpuProgram& apply_;
  std::optional<int64_t> bound_;
  std::vector<int64_t> applied_of_tower_;  // for the bound and the largest lead
  const std::vector<std::string> sent_;    // the variables a reply carries: what the towers read
  const std::vector<int> rows_of_sent_;    // per variable of sent_: its sparse gradient's index if
                                           // a reply carries its changed rows, else -1
  std::vector<std::vector<ChangedRows>> changed_;  // [worker rank][variable of sent_]
  int64_t lead_ = 0;                       // the largest lead seen (under the apply lock)
};

// A worker's side: its towers' slices of one batch, computed from the values it holds, pushed
// one tower at a time; the server's reply replaces the values.
class AsyncWorker {
 public:
  // `values`: this process's copy of the variables, which the server's replies refresh.
  AsyncWorker(TowerState& state, HostVariables& values);
  // `feeds`: this process's rows of batch `step` (of `examples` in all). Returns this
  // process's part of the batch's loss (Σ n_i/B loss_i over its towers).
  double work(int64_t step, const HostFeeds& feeds, int64_t examples, Loc loc);

 private:
  void take_reply(const std::vector<char>& reply);

  TowerState& state_;
  HostVariables& values_;
  const std::vector<std::string> received_;  // the variables a reply carries, in its order
  const std::vector<int> rows_of_received_;  // as the server's rows_of_sent_
};

}  // namespace towerjit::detail
