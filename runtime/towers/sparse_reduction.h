// The Reducer's concatenation stage: how synchronous towers reduce a sparse gradient (a
// gather's rows and values, dsl/sparse_gradients.h) without its dense [V, D...] value. The
// towers' rows and values are concatenated along the batch axis in tower order, each tower's
// values weighted as the reduction weighs a dense gradient (the rows as they are); across
// processes every rank's part is all-gathered with its own count and concatenated in rank
// order. The apply then combines duplicate rows in that fixed order (combine_rows), so the
// result is bitwise the same run to run, and over any split of the towers into processes
// (the order is the world's tower order whichever rank ran a tower).
#pragma once

#include <utility>
#include <vector>

#include "runtime/cuda/device_tensor.h"

#include "runtime/towers/tower_state.h"

namespace towerjit::detail {

// Concatenates the sparse gradients (compiled.sparse) of `outputs`, this process's towers in
// order, whose weights are `weights`; with several processes, gathers the world's through
// `world`. Writes the apply's feeds into `into` (the values under the gradient's input name,
// the rows under its rows input) and empties each tower's sparse entries, so the dense stages
// that follow pass over them. Errors: a transport failure (dist::Transport's).
void concatenate_sparse(std::vector<TowerOutputs>& outputs, const std::vector<double>& weights,
                        const CompiledTowers& compiled, dist::Transport& world, HostFeeds& into);

// The same for GPU towers whose fetches stay on their GPUs (gpu_resident_sync.h,
// strategies/sync_placed.cpp): `outputs[t]` are this process's tower t's fetches, sparse
// gradient k's values fetch `fetches[k].first` and its rows `fetches[k].second`, each copied
// down on `streams[t]`. Returns, per k, the concatenated values, then the concatenated rows.
// `world` may be null (one process).
std::vector<HostTensor> concatenate_sparse(const std::vector<std::vector<DeviceTensor>>& outputs,
                                           const std::vector<std::pair<size_t, size_t>>& fetches,
                                           const std::vector<const cuda::Stream*>& streams,
                                           const std::vector<double>& weights, dist::Transport* world);

}  // namespace towerjit::detail
