#include "runtime/towers/batch_split.h"

#include "dsl/error.h"

namespace towerjit::detail {

std::vector<double> slice_shares(const std::vector<int64_t>& slices, int64_t examples) {
  std::vector<double> out;
  for (int64_t n : slices) out.push_back(static_cast<double>(n) / static_cast<double>(examples));
  return out;
}

std::vector<HostFeeds> cut_batch(const HostFeeds& batch, const std::vector<int64_t>& slices, Loc loc) {
  std::vector<HostFeeds> out(slices.size());
  for (const auto& [name, t] : batch) {
    user_check(t.shape.rank() > 0, loc) << "input \"" << name << "\" is a scalar; every input "
                                        << "fed to the towers needs the batch as its first dimension";
    int64_t offset = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      out[i][name] = rows_of(t, offset, slices[i]);
      offset += slices[i];
    }
  }
  return out;
}

std::pair<int64_t, int64_t> rows_of_rank(int64_t batch, const Towers& towers, const dist::WorldLayout& layout,
                                         Loc loc) {
  const std::vector<int64_t> slices = split_batch(batch, layout.towers(), towers.split_policy(), loc);
  int64_t first = 0, count = 0;
  for (int t = 0; t < layout.first_tower; ++t) first += slices[t];
  for (int t = 0; t < layout.own(); ++t) count += slices[layout.first_tower + t];
  return {first, count};
}

int64_t BatchSplit::first_row_of(int t) const {
  int64_t row = first_row;
  for (int i = 0; i < t; ++i) row += slice(i);
  return row;
}

BatchSplit plan_step_batch(const HostFeeds& batch, int64_t whole_batch, const Towers& towers,
                           const dist::WorldLayout& layout, Loc loc) {
  user_check(!batch.empty(), loc) << "step: no inputs fed; feed the model's inputs with the batch";
  const int64_t rows = batch.begin()->second.shape.rank() ? batch.begin()->second.shape[0] : 0;
  for (const auto& [name, t] : batch)
    user_check(t.shape.rank() > 0 && t.shape[0] == rows, loc)
        << "step: input \"" << name << "\" has " << count_of(t.shape.rank() ? t.shape[0] : 0, "example")
        << " but \"" << batch.begin()->first << "\" has " << rows << "; feed every input the same batch";
  BatchSplit s;
  s.examples = whole_batch > 0 ? whole_batch : rows;
  s.slices = split_batch(s.examples, layout.towers(), towers.split_policy(), loc);
  s.shares = slice_shares(s.slices, s.examples);
  s.weights = reduction_weights(s.slices, towers.reduction(), loc);
  s.first = layout.first_tower;
  s.own = towers.size();
  const auto [own_first, own_count] = rows_of_rank(s.examples, towers, layout, loc);
  s.first_row = own_first;
  s.fed_own_rows = whole_batch > 0;
  if (whole_batch > 0) {
    user_check(rows == own_count, loc)
        << dist::rank_prefix() << "step: fed " << count_of(rows, "example") << " as this process's part of a batch of "
        << s.examples << ", but its towers' slices hold " << own_count << " (rows " << own_first << " to "
        << own_first + own_count - 1 << "); feed TowerTrainer::own_rows() of each batch";
  }
  return s;
}

BatchSplit split_step_batch(const HostFeeds& batch, int64_t whole_batch, const Towers& towers,
                            const dist::WorldLayout& layout, Loc loc) {
  BatchSplit s = plan_step_batch(batch, whole_batch, towers, layout, loc);
  // Fed the whole batch, this process cuts its rows out of it (the others' rows come first).
  std::vector<int64_t> cut = s.own_slices();
  const bool skip_others = !s.fed_own_rows && s.first_row > 0;
  if (skip_others) cut.insert(cut.begin(), s.first_row);
  s.feeds = cut_batch(batch, cut, loc);
  if (skip_others) s.feeds.erase(s.feeds.begin());
  return s;
}

}  // namespace towerjit::detail
