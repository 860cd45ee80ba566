// How one batch is cut over the world's towers, computed in one place: every tower's slice
// n_i (the world's split, dsl/towers.h), its share n_i / B (what a loss, a batch norm moving
// mean and a slice's examples are weighed by), the reduction's weight of its gradient, and
// this process's towers' slices of the batch's rows.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dsl/towers.h"
#include "runtime/dist/world.h"
#include "runtime/host_tensor.h"

namespace towerjit::detail {

// n_i / B for every slice, B = `examples` (the one formula; several steps sum slices of
// micro-batches into one B).
std::vector<double> slice_shares(const std::vector<int64_t>& slices, int64_t examples);

// `batch` cut into consecutive slices of `slices` examples (every input alike). Errors: a
// scalar input.
std::vector<HostFeeds> cut_batch(const HostFeeds& batch, const std::vector<int64_t>& slices, Loc loc);

// The rows [first, first + count) of a batch of `batch` examples that this process's towers
// train on: the world's split, this rank's towers' slices.
std::pair<int64_t, int64_t> rows_of_rank(int64_t batch, const Towers& towers, const dist::WorldLayout& layout,
                                         Loc loc);

struct BatchSplit {
  int64_t examples = 0;          // B: the whole batch, over every process
  std::vector<int64_t> slices;   // each world tower's n_i
  std::vector<double> shares;    // each world tower's n_i / B
  std::vector<double> weights;   // each world tower's gradient weight (reduction_weights)
  int first = 0;                 // this process's first world tower
  int own = 0;                   // this process's towers
  int64_t first_row = 0;         // this process's first row of the batch
  bool fed_own_rows = false;     // the batch fed holds only this process's rows (whole_batch > 0)
  std::vector<HostFeeds> feeds;  // this process's towers' slices (split_step_batch; not plan_step_batch)

  // Of this process's tower t (0-based among its own).
  int64_t slice(int t) const { return slices[first + t]; }
  double share(int t) const { return shares[first + t]; }
  double weight(int t) const { return weights[first + t]; }
  int64_t first_row_of(int t) const;
  // Where this process's tower t's rows start in the batch as fed.
  int64_t fed_row_of(int t) const { return first_row_of(t) - (fed_own_rows ? first_row : 0); }
  std::vector<int64_t> own_slices() const { return pick(slices); }
  std::vector<double> own_shares() const { return pick(shares); }
  std::vector<double> own_weights() const { return pick(weights); }

 private:
  template <class T>
  std::vector<T> pick(const std::vector<T>& all) const {
    return {all.begin() + first, all.begin() + first + own};
  }
};

// A step's split of `batch`. whole_batch > 0: `batch` holds only this process's rows of a
// batch of that many examples; 0: `batch` is the whole batch. Errors (at `loc`): no inputs,
// inputs that disagree on the batch size, a part that is not this process's rows, more world
// towers than examples.
BatchSplit split_step_batch(const HostFeeds& batch, int64_t whole_batch, const Towers& towers,
                            const dist::WorldLayout& layout, Loc loc);
// The same split with the same checks, the slices left uncut (`feeds` empty): for a caller that
// copies each tower's rows (fed_row_of) straight to where they go.
BatchSplit plan_step_batch(const HostFeeds& batch, int64_t whole_batch, const Towers& towers,
                           const dist::WorldLayout& layout, Loc loc);

}  // namespace towerjit::detail
