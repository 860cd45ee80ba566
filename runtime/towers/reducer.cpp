#include "runtime/towers/reducer.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "dsl/error.h"
#include "runtime/dist/half_wire.h"
#include "runtime/towers/gradient_buckets.h"
#include "runtime/towers/sparse_reduction.h"

namespace towerjit::detail {

Reducer::Reducer(TowerState& state, bool deterministic_layout, int64_t bucket_bytes)
    : state_(state),
      gather_first_(deterministic_layout && state.world->size() > 1),
      across_(!deterministic_layout && state.world->size() > 1),
      compression_(across_ ? state.options.gradient_compression : DType::f32),
      bucket_bytes_(bucket_bytes) {}

Reducer::~Reducer() = default;

// Stage 1: every tower's outputs in world tower order: this process's are packed (loss,
// gradients, model updates; all f32), gathered from every rank, and unpacked in rank order.
std::vector<TowerOutputs> Reducer::gather(const std::vector<TowerOutputs>& outputs) {
  const std::vector<HostTensor>& shapes = outputs[0].all();
  int64_t per_tower = 0;
  for (const HostTensor& t : shapes) per_tower += t.size();
  const size_t bytes = dtype_bytes(DType::f32);
  std::vector<char> mine(outputs.size() * per_tower * bytes);
  char* at = mine.data();
  for (const TowerOutputs& tower : outputs)
    for (const HostTensor& t : tower.all()) {
      // (A sparse gradient, moved out by stage 0, is empty here, and its data() may be null.)
      if (t.size() > 0) std::memcpy(at, t.f32.data(), t.size() * bytes);
      at += t.size() * bytes;
    }
  const std::vector<std::vector<char>> all = state_.world->all_gather(mine);
  std::vector<TowerOutputs> out;
  for (const std::vector<char>& rank : all)
    for (const char* from = rank.data(); from < rank.data() + rank.size();) {
      std::vector<HostTensor> tower;
      for (const HostTensor& s : shapes) {
        HostTensor& t = tower.emplace_back(s.shape, s.dtype);
        if (t.size() > 0) std::memcpy(t.f32.data(), from, t.size() * bytes);
        from += t.size() * bytes;
      }
      out.emplace_back(std::move(tower), outputs[0].gradients(), outputs[0].sparse());
    }
  return out;
}

// Stage 2 for the gradients `which`: Σ_i weights[i] * gradient, in tower order, in double,
// written to into[k] for which[k]. The elements are cut into one contiguous range per tower
// thread, which reduces its range for all towers.
void Reducer::sum(const std::vector<TowerOutputs>& outputs, const std::vector<double>& weights,
                  const std::vector<int>& which, const std::vector<float*>& into) {
  const size_t n = outputs.size();
  std::vector<int64_t> starts = {0};  // each gradient's first element in the flat order
  for (int v : which) starts.push_back(starts.back() + outputs[0].gradient(v).size());
  const int64_t total = starts.back();
  ThreadPool& threads = state_.threads();
  threads.parallel_for(threads.size(), [&](int64_t first, int64_t last) {
    const int64_t begin = total * first / threads.size(), end = total * last / threads.size();
    size_t k = std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1;
    for (int64_t flat = begin; flat < end; ++k) {
      const int64_t stop = std::min(end, starts[k + 1]);
      const int v = which[k];
      float* out = into[k];
      for (int64_t e = flat - starts[k]; e < stop - starts[k]; ++e) {
        double s = 0;
        for (size_t t = 0; t < n; ++t) s += weights[t] * outputs[t].gradient(v).f32[e];
        out[e] = static_cast<float>(s);
      }
      flat = stop;
    }
  });
}

// The buckets: one of every gradient where nothing crosses processes; otherwise by size, in the
// order the backward pass finishes them (the last layers first). Every rank has the same
// buckets in the same order (they depend on the shapes alone).
// Sparse gradients are not summed: the concatenation stage has reduced them.
void Reducer::plan(const std::vector<TowerOutputs>& outputs) {
  const size_t gradients = outputs[0].gradients();
  std::vector<int> dense;
  for (size_t v = 0; v < gradients; ++v)
    if (!state_.compiled.is_sparse(v)) dense.push_back(static_cast<int>(v));
  if (!across_) {
    buckets_.push_back(dense);
    return;
  }
  std::vector<int> ready;
  std::vector<int64_t> bytes;
  for (int v : dense) {
    ready.push_back(static_cast<int>(gradients - v));
    bytes.push_back(outputs[0].gradient(v).size() * static_cast<int64_t>(dtype_bytes(DType::f32)));
  }
  buckets_ = plan_buckets(ready, bytes, bucket_bytes_, std::min<int64_t>(bucket_bytes_, 1 << 20));
  for (std::vector<int>& bucket : buckets_)
    for (int& k : bucket) k = dense[k];
}

// Every buffer the all-reduces write into, held by the calls too: a call given up on (a stall
// timeout) may still write after reduce() has thrown (runtime/dist/transport.h).
struct Reducer::Exchange {
  std::vector<HostTensor> reduced;
  std::vector<std::vector<float>> flat;  // a bucket of several gradients, end to end
  std::vector<std::vector<uint16_t>> wire;  // with compression: a bucket end to end, in 16 bits
  std::vector<float> updates;
  double loss = 0;
};

Reduced Reducer::reduce(std::vector<TowerOutputs> outputs, const std::vector<double>& weights,
                        const std::vector<double>& shares, Loc loc) {
  // Stage 0: the sparse gradients, concatenated (over the world) from this process's towers.
  const size_t own_first = outputs.size() == weights.size() ? 0 : static_cast<size_t>(state_.layout.first_tower);
  HostFeeds sparse;
  concatenate_sparse(outputs,
                     std::vector<double>(weights.begin() + own_first, weights.begin() + own_first + outputs.size()),
                     state_.compiled, *state_.world, sparse);
  if (gather_first_) outputs = gather(outputs);
  // The towers `outputs` holds: this process's, or (gathered, or alone) all of them.
  const size_t n = outputs.size();
  const size_t first = n == weights.size() ? 0 : static_cast<size_t>(state_.layout.first_tower);
  const std::vector<double> w(weights.begin() + first, weights.begin() + first + n);
  const std::vector<double> share(shares.begin() + first, shares.begin() + first + n);
  if (buckets_.empty()) plan(outputs);
  const size_t gradients = outputs[0].gradients();
  Reduced r;
  for (size_t u = 0; u < outputs[0].updates(); ++u) {
    HostTensor& value = r.model_updates.emplace_back(outputs[0].update(u).shape);
    for (int64_t k = 0; k < value.size(); ++k) {
      double s = 0;
      for (size_t t = 0; t < n; ++t) s += share[t] * outputs[t].update(u).f32[k];
      value.f32[k] = static_cast<float>(s);
    }
  }
  for (size_t t = 0; t < n; ++t) r.loss += share[t] * outputs[t].loss();
  const auto exchange = std::make_shared<Exchange>();
  std::vector<HostTensor>& reduced = exchange->reduced;
  for (size_t v = 0; v < gradients; ++v) reduced.emplace_back(outputs[0].gradient(v).shape);
  exchange->flat.resize(buckets_.size());
  exchange->wire.resize(buckets_.size());
  sum_and_exchange(outputs, w, exchange, r);
  const std::vector<std::string>& names = state_.compiled.gradient_inputs;
  for (size_t v = 0; v < gradients; ++v) r.gradients[names[v]] = std::move(reduced[v]);
  for (auto& [name, value] : sparse) r.gradients[name] = std::move(value);
  r.gradients[TowerProgram::gradient_scale] = scalar(1.0);  // the weights are in the sum
  return r;
}

// Stages 2 and 3, bucket by bucket: a bucket of one gradient (or every bucket, alone) is
// summed in place; a larger one that crosses processes through a flat buffer; with compression
// every bucket is summed in place and crosses as one buffer of 16-bit values.
void Reducer::sum_and_exchange(const std::vector<TowerOutputs>& outputs, const std::vector<double>& w,
                               const std::shared_ptr<Exchange>& exchange, Reduced& r) {
  std::vector<HostTensor>& reduced = exchange->reduced;
  dist::Transport& world = *state_.world;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const std::vector<int>& bucket = buckets_[b];
    std::vector<float*> into;
    std::vector<float>& flat = exchange->flat[b];
    const bool compress = compression_ != DType::f32;
    if (!across_ || bucket.size() == 1 || compress) {
      for (int v : bucket) into.push_back(reduced[v].f32.data());
    } else {
      int64_t total = 0;
      for (int v : bucket) total += reduced[v].size();
      flat.resize(total);
      for (int64_t at = 0; int v : bucket) into.push_back(flat.data() + at), at += reduced[v].size();
    }
    sum(outputs, w, bucket, into);
    if (!across_) continue;
    if (compress) {
      std::vector<uint16_t>& wire = exchange->wire[b];
      for (size_t i = 0; i < bucket.size(); ++i)
        for (int64_t k = 0; k < reduced[bucket[i]].size(); ++k) wire.push_back(dist::to_wire(into[i][k], compression_));
      world.start_all_reduce_sum(wire.data(), wire.size(), compression_, exchange);
    } else if (flat.empty()) world.start_all_reduce_sum(into[0], reduced[bucket[0]].size(), exchange);
    else world.start_all_reduce_sum(flat.data(), flat.size(), exchange);
  }
  if (across_) {
    std::vector<float>& updates = exchange->updates;
    for (const HostTensor& u : r.model_updates) updates.insert(updates.end(), u.f32.begin(), u.f32.end());
    exchange->loss = r.loss;
    if (!updates.empty()) world.start_all_reduce_sum(updates.data(), updates.size(), exchange);
    // Collectives finish in order: once the loss's is done, every one started is.
    world.wait(world.start_all_reduce_sum(&exchange->loss, 1, exchange));
    r.loss = exchange->loss;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const uint16_t* packed = exchange->wire[b].data();
      for (int v : buckets_[b])
        if (!exchange->wire[b].empty())
          for (float& x : reduced[v].f32) x = dist::from_wire(*packed++, compression_);
      const float* from = exchange->flat[b].data();
      for (int v : buckets_[b])
        if (!exchange->flat[b].empty())
          std::memcpy(reduced[v].f32.data(), from, reduced[v].size() * sizeof(float)), from += reduced[v].size();
    }
    const float* from = updates.data();
    for (HostTensor& u : r.model_updates) {
      std::memcpy(u.f32.data(), from, u.size() * sizeof(float));
      from += u.size();
    }
  }
}

}  // namespace towerjit::detail
