// The sync trainer's reductions (TowerTrainer's members): the in-process all-reduce of the
// towers' gradients, and the reduction over the world's processes that follows it — bucket by
// bucket through the transport, or, under TOWERJIT_DETERMINISTIC=layout, a gather of every
// tower's outputs summed in world tower order (docs/distributed.md).
#include <algorithm>
#include <cstring>
#include <memory>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "runtime/towers/gradient_buckets.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {
// The in-process all-reduce: sum_i w_i g_i for every gradient, accumulated in double in tower
// order (so a sync step is bitwise reproducible).
HostFeeds TowerTrainer::all_reduce(const std::vector<std::vector<HostTensor>>& outputs,
                                   const std::vector<double>& weights) {
  std::vector<HostTensor> reduced;
  std::vector<int> which;
  std::vector<float*> into;
  for (size_t v = 0; v < gradient_inputs_.size(); ++v) reduced.emplace_back(outputs[0][v + 1].shape);
  for (size_t v = 0; v < gradient_inputs_.size(); ++v) {
    which.push_back(static_cast<int>(v));
    into.push_back(reduced[v].f32.data());
  }
  reduce_gradients(outputs, weights, which, into);
  HostFeeds feeds;
  for (size_t v = 0; v < gradient_inputs_.size(); ++v) feeds[gradient_inputs_[v]] = std::move(reduced[v]);
  feeds[TowerProgram::gradient_scale] = scalar(1.0);  // the weights are in the sum
  return feeds;
}

// The gradients' elements are cut into one contiguous range per tower thread, which reduces its
// range for all towers.
void TowerTrainer::reduce_gradients(const std::vector<std::vector<HostTensor>>& outputs,
                                    const std::vector<double>& weights, const std::vector<int>& which,
                                    const std::vector<float*>& into) {
  const size_t n = outputs.size();
  std::vector<int64_t> starts = {0};  // each gradient's first element in the flat order
  for (int v : which) starts.push_back(starts.back() + outputs[0][v + 1].size());
  const int64_t total = starts.back();
  threads_.parallel_for(threads_.size(), [&](int64_t first, int64_t last) {
    const int64_t begin = total * first / threads_.size(), end = total * last / threads_.size();
    size_t k = std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1;
    for (int64_t flat = begin; flat < end; ++k) {
      const int64_t stop = std::min(end, starts[k + 1]);
      const int v = which[k];
      float* out = into[k];
      for (int64_t e = flat - starts[k]; e < stop - starts[k]; ++e) {
        double sum = 0;
        for (size_t t = 0; t < n; ++t) sum += weights[t] * outputs[t][v + 1].f32[e];
        out[e] = static_cast<float>(sum);
      }
      flat = stop;
    }
  });
}


std::pair<int64_t, int64_t> TowerTrainer::own_rows(int64_t batch, Loc loc) const {
  const std::vector<int64_t> slices = split_batch(batch, layout_.towers(), towers_.split_policy(), loc);
  int64_t first = 0, count = 0;
  for (int t = 0; t < layout_.first_tower; ++t) first += slices[t];
  for (int t = 0; t < layout_.own(); ++t) count += slices[layout_.first_tower + t];
  return {first, count};
}


// Every tower's outputs in world tower order: this process's are packed (loss, gradients, model
// updates; all f32), gathered from every rank, and unpacked in rank order.
std::vector<std::vector<HostTensor>> TowerTrainer::gather_towers(const std::vector<std::vector<HostTensor>>& outputs) {
  const std::vector<HostTensor>& shapes = outputs[0];
  int64_t per_tower = 0;
  for (const HostTensor& t : shapes) per_tower += t.size();
  std::vector<char> mine(outputs.size() * per_tower * sizeof(float));
  char* at = mine.data();
  for (const auto& tower : outputs)
    for (const HostTensor& t : tower) {
      std::memcpy(at, t.f32.data(), t.size() * sizeof(float));
      at += t.size() * sizeof(float);
    }
  const std::vector<std::vector<char>> all = world_->all_gather(mine);
  std::vector<std::vector<HostTensor>> out;
  for (const std::vector<char>& rank : all)
    for (const char* from = rank.data(); from < rank.data() + rank.size();) {
      std::vector<HostTensor>& tower = out.emplace_back();
      for (const HostTensor& s : shapes) {
        HostTensor& t = tower.emplace_back(s.shape, s.dtype);
        std::memcpy(t.f32.data(), from, t.size() * sizeof(float));
        from += t.size() * sizeof(float);
      }
    }
  return out;
}

TowerTrainer::Reduced TowerTrainer::reduce_over_world(std::vector<std::vector<HostTensor>> outputs,
                                                      const std::vector<int64_t>& slices,
                                                      const std::vector<double>& weights, int64_t examples) {
  const bool shared = world_->size() > 1;
  if (shared && deterministic_layout_) outputs = gather_towers(outputs);
  // The towers `outputs` holds: this process's, or (gathered) the world's.
  const int first = static_cast<int>(outputs.size()) == layout_.towers() ? 0 : layout_.first_tower;
  const size_t n = outputs.size();
  std::vector<double> w(weights.begin() + first, weights.begin() + first + n), by_slice(n);
  for (size_t t = 0; t < n; ++t) by_slice[t] = static_cast<double>(slices[first + t]) / examples;
  Reduced r;
  const size_t gradients = gradient_inputs_.size(), updates_at = 1 + gradients;
  for (size_t u = 0; u < model_updates_.size(); ++u) {
    HostTensor& value = r.model_updates.emplace_back(outputs[0][updates_at + u].shape);
    for (int64_t k = 0; k < value.size(); ++k) {
      double sum = 0;
      for (size_t t = 0; t < n; ++t) sum += by_slice[t] * outputs[t][updates_at + u].f32[k];
      value.f32[k] = static_cast<float>(sum);
    }
  }
  for (size_t t = 0; t < n; ++t) r.loss += by_slice[t] * outputs[t][0].f32[0];
  if (!shared || deterministic_layout_) {
    r.gradients = all_reduce(outputs, w);
    return r;
  }
  // Across processes: this process's sum of each bucket, then an all-reduce of it, started as
  // soon as it is summed, so the next bucket is summed here while the last one travels. Every
  // rank has the same buckets in the same order (they depend on the shapes alone).
  if (buckets_.empty()) {
    std::vector<int> ready(gradients);
    std::vector<int64_t> bytes(gradients);
    for (size_t v = 0; v < gradients; ++v) {
      ready[v] = static_cast<int>(gradients - v);  // the backward pass finishes the last layers first
      bytes[v] = outputs[0][v + 1].size() * static_cast<int64_t>(sizeof(float));
    }
    const int64_t cap = static_cast<int64_t>(knobs::bucket_mb() * (1 << 20));
    buckets_ = plan_buckets(ready, bytes, cap, std::min<int64_t>(cap, 1 << 20));
  }
  // Every buffer the all-reduces write into, held by the calls too: a call given up on (a
  // stall timeout) may still write after this function has thrown (runtime/dist/transport.h).
  struct Exchange {
    std::vector<HostTensor> reduced;
    std::vector<std::vector<float>> flat;  // a bucket of several gradients, end to end
    std::vector<float> updates;
    double loss = 0;
  };
  const auto exchange = std::make_shared<Exchange>();
  std::vector<HostTensor>& reduced = exchange->reduced;
  std::vector<std::vector<float>>& flat = exchange->flat;
  reduced.resize(gradients);
  for (size_t v = 0; v < gradients; ++v) reduced[v] = HostTensor(outputs[0][v + 1].shape);
  flat.resize(buckets_.size());
  try {
    // A bucket of one gradient is summed and sent in place; a larger one through a flat buffer.
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const std::vector<int>& bucket = buckets_[b];
      std::vector<float*> into;
      if (bucket.size() == 1) {
        into.push_back(reduced[bucket[0]].f32.data());
      } else {
        int64_t total = 0;
        for (int v : bucket) total += reduced[v].size();
        flat[b].resize(total);
        for (int64_t at = 0; int v : bucket) into.push_back(flat[b].data() + at), at += reduced[v].size();
      }
      reduce_gradients(outputs, w, bucket, into);
      if (bucket.size() == 1) world_->start_all_reduce_sum(into[0], reduced[bucket[0]].size(), exchange);
      else world_->start_all_reduce_sum(flat[b].data(), flat[b].size(), exchange);
    }
    std::vector<float>& updates = exchange->updates;
    for (const HostTensor& u : r.model_updates) updates.insert(updates.end(), u.f32.begin(), u.f32.end());
    exchange->loss = r.loss;
    if (!updates.empty()) world_->start_all_reduce_sum(updates.data(), updates.size(), exchange);
    // Collectives finish in order: once the loss's is done, every one started is.
    world_->wait(world_->start_all_reduce_sum(&exchange->loss, 1, exchange));
    r.loss = exchange->loss;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const float* from = flat[b].data();
      for (int v : buckets_[b])
        if (!flat[b].empty()) std::memcpy(reduced[v].f32.data(), from, reduced[v].size() * sizeof(float)), from += reduced[v].size();
    }
    const float* from = updates.data();
    for (HostTensor& u : r.model_updates) {
      std::memcpy(u.f32.data(), from, u.size() * sizeof(float));
      from += u.size();
    }
  } catch (const std::runtime_error& e) {
    user_check(false, Loc::current()) << dist::rank_prefix() << "the all-reduce across processes failed at apply "
                                      << applies_ << ": " << e.what();
  }
  for (size_t v = 0; v < gradients; ++v) r.gradients[gradient_inputs_[v]] = std::move(reduced[v]);
  r.gradients[TowerProgram::gradient_scale] = scalar(1.0);
  return r;
}

}  // namespace towerjit
