#include "runtime/towers/gpu_resident_sync.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>

#include "dsl/error.h"
#include "dsl/ops.h"
#include "dsl/tower_program.h"
#include "jit/knobs.h"
#include "runtime/cuda/library.h"
#include "runtime/towers/gradient_buckets.h"
#include "runtime/towers/sparse_reduction.h"
#include "runtime/towers/weighted_sum.h"

namespace towerjit {
namespace {

std::atomic<int64_t> queued_behind{0};

// A fetch's place in the page-locked block of the apply's scalars: 8-byte aligned.
size_t padded(int64_t bytes) { return (static_cast<size_t>(bytes) + 7) / 8 * 8; }

template <typename T>
std::vector<T> pick(const std::vector<T>& all, const std::vector<int>& which) {
  std::vector<T> out;
  for (int i : which) out.push_back(all[i]);
  return out;
}

}  // namespace

GpuResidentSync::GpuResidentSync(const Setup& setup, const HostVariables& initial, Loc loc)
    : setup_(setup), loc_(loc) {
  std::map<int, int> by_ordinal;  // GPU ordinal -> index in gpus_
  for (CudaProgram* tower : setup_.towers) {
    const int ordinal = tower->device().ordinal();
    if (!by_ordinal.count(ordinal)) {
      by_ordinal[ordinal] = static_cast<int>(gpus_.size());
      gpus_.push_back(std::make_unique<Gpu>());
      gpus_.back()->context = &tower->device();
    }
    gpu_of_tower_.push_back(by_ordinal[ordinal]);
    gpus_[by_ordinal[ordinal]]->towers.push_back(static_cast<int>(gpu_of_tower_.size()) - 1);
    loss_staging_.push_back(std::make_unique<cuda::PinnedBuffer>(tower->device().context()));
    loss_staging_.back()->reserve(64, loc);
  }
  // The reduced tensors: each dense gradient, its variable's shape, then each updated
  // variable's; bucketed in the order the towers' programs finish them. A sparse gradient is
  // concatenated instead (feed_sparse).
  const size_t gradients = setup_.gradient_inputs.size(), updates = setup_.model_update_variables.size();
  std::vector<Shape> shapes;
  std::vector<bool> is_update;
  for (size_t j = 0; j < gradients; ++j) {
    if (std::any_of(setup_.sparse.begin(), setup_.sparse.end(), [&](const Setup::Sparse& s) { return s.gradient == j; }))
      continue;
    const std::string& name = setup_.gradient_inputs[j];
    shapes.push_back(initial.at(name.substr(TowerProgram::gradient_prefix.size())).shape);
    is_update.push_back(false);
    fetch_of_.push_back(static_cast<int>(1 + j));
    gradient_of_.push_back(j);
  }
  for (size_t u = 0; u < updates; ++u) {
    shapes.push_back(initial.at(setup_.model_update_variables[u]).shape);
    is_update.push_back(true);
    fetch_of_.push_back(static_cast<int>(1 + gradients + u));
  }
  std::vector<int> ready;
  std::vector<int64_t> bytes;
  for (size_t k = 0; k < shapes.size(); ++k) {
    ready.push_back(setup_.towers[0]->fetch_ready_after(fetch_of_[k]));
    bytes.push_back(shapes[k].elements(0) * dtype_bytes(DType::f32));
  }
  const auto cap = static_cast<int64_t>(setup_.bucket_mb * (1 << 20));
  buckets_ = plan_buckets(ready, bytes, cap, std::min<int64_t>(cap, 1 << 20));
  // Each tower records bucket b's event after the copy of the bucket's last tensor to finish.
  for (size_t t = 0; t < setup_.towers.size(); ++t) {
    ready_.emplace_back();
    record_after_.emplace_back(1 + gradients + updates, nullptr);
    for (const std::vector<int>& bucket : buckets_) {
      ready_[t].push_back(std::make_unique<cuda::Event>(setup_.towers[t]->device(), /*timing=*/false));
      record_after_[t][fetch_of_[bucket.back()]] = ready_[t].back().get();
    }
  }
  // The towers' and the reductions' fetches are read in place (no copy each, and the same
  // addresses every step, so the programs fed with them replay their CUDA graphs): the
  // reductions, the loss's read and the apply are done with them before the next step queues
  // the towers again, and the model's updates are copied into their variables (apply()).
  for (CudaProgram* tower : setup_.towers) tower->set_fetches_in_place(true);
  std::vector<cuda::DeviceContext*> contexts;
  for (auto& gpu : gpus_) contexts.push_back(gpu->context);
  if (across_processes() && knobs::nccl_world()) join_world_nccl(contexts);
  if (!nccl_ && gpus_.size() > 1 && knobs::nccl_enabled() && cuda::nccl_available())
    nccl_ = std::make_unique<cuda::NcclCommunicators>(contexts, loc);
  if (nccl_ || across_processes()) wire_ = setup_.compression;
  for (auto& gpu : gpus_) {
    const Device device = towerjit::gpu(gpu->context->ordinal());
    gpu->copies = std::make_unique<cuda::Stream>(*gpu->context);
    const int sets = static_cast<int>(gpu->towers.size());
    for (const std::vector<int>& bucket : buckets_) {
      gpu->reduce.push_back(weighted_sum(sets, pick(shapes, bucket), pick(is_update, bucket), device, "reduce", loc,
                                         DType::f32, wire_));
      gpu->reduce.back()->set_fetches_in_place(true);
      gpu->reduce_feeds.emplace_back();
      if (wire_ == DType::f32) continue;
      std::vector<Shape> gradients_of_bucket;
      for (int k : bucket)
        if (!is_update[k]) gradients_of_bucket.push_back(shapes[k]);
      gpu->widen.push_back(widened(gradients_of_bucket, wire_, device, "widen", loc));
      gpu->widen.back()->set_fetches_in_place(true);
      gpu->widen_feeds.emplace_back();
      gpu->widened_events.push_back(std::make_unique<cuda::Event>(*gpu->context, /*timing=*/false));
    }
    gpu->apply = std::make_unique<CudaProgram>(*setup_.apply_graph, setup_.apply_fetches, setup_.apply_updates,
                                               device, "apply", loc);
    gpu->apply->set_fetches_in_place(true);  // read back within the step (applied())
    gpu->apply_staging = std::make_unique<cuda::PinnedBuffer>(gpu->context->context());
    gpu->applied = std::make_unique<cuda::Event>(*gpu->context, /*timing=*/false);
    gpu->bucket_done.assign(buckets_.size(), nullptr);
    for (size_t b = 0; b < buckets_.size(); ++b)
      gpu->reduced_events.push_back(std::make_unique<cuda::Event>(*gpu->context, /*timing=*/false));
    gpu->variables = to_device(initial, *gpu->context, *gpu->copies);
    gpu->apply_feeds[setup_.gradient_scale] = to_device(scalar(1.0), *gpu->context, *gpu->copies);
    gpu->reduced.resize(shapes.size());
  }
  if (!nccl_ && gpus_.size() > 1 && !shapes.empty()) {
    Gpu& first = *gpus_[0];
    combine_ = weighted_sum(static_cast<int>(gpus_.size()), shapes, is_update, towerjit::gpu(first.context->ordinal()),
                            "combine_gpus", loc, wire_, wire_);
    for (size_t g = 0; g < gpus_.size(); ++g) {  // every GPU's sum counts once
      combine_feeds_[gradient_weight(static_cast<int>(g))] = to_device(scalar(1.0), *first.context, *first.copies);
      combine_feeds_[update_weight(static_cast<int>(g))] = to_device(scalar(1.0), *first.context, *first.copies);
    }
  }
}

GpuResidentSync::~GpuResidentSync() = default;

std::vector<const CudaProgram*> GpuResidentSync::programs() const {
  std::vector<const CudaProgram*> out;
  for (const auto& r : gpus_.front()->reduce) out.push_back(r.get());
  if (combine_) out.push_back(combine_.get());
  for (const auto& w : gpus_.front()->widen) out.push_back(w.get());
  out.push_back(gpus_.front()->apply.get());
  return out;
}

void GpuResidentSync::download(HostVariables& values) {
  if (in_flight_) finish_all();
  values = to_host(gpus_[0]->variables, *gpus_[0]->copies);
}

void GpuResidentSync::upload(const HostVariables& values) {
  if (in_flight_) finish_all();
  for (auto& gpu : gpus_) gpu->variables = to_device(values, *gpu->context, *gpu->copies);
}

// The reduce programs' weights on `gpu`, uploaded when they change (only with the slice sizes).
void GpuResidentSync::set_weights(Gpu& gpu, const std::vector<double>& weights, const std::vector<double>& update_weights) {
  std::vector<double> wanted;
  for (int t : gpu.towers) wanted.insert(wanted.end(), {weights[t], update_weights[t]});
  if (wanted == gpu.uploaded) return;
  for (DeviceFeeds& feeds : gpu.reduce_feeds)
    for (size_t i = 0; i < gpu.towers.size(); ++i) {
      const int set = static_cast<int>(i);
      feeds[gradient_weight(set)] = to_device(scalar(wanted[2 * i]), *gpu.context, *gpu.copies);
      feeds[update_weight(set)] = to_device(scalar(wanted[2 * i + 1]), *gpu.context, *gpu.copies);
    }
  gpu.uploaded = wanted;
}

// Bucket b on `gpu`: its towers' tensors summed with their weights once the towers' events say
// the bucket is ready, queued on the bucket's reduce stream; then, with NCCL, the bucket's
// all-reduce between the GPUs on the same streams. Nothing is waited for.
void GpuResidentSync::queue_bucket(size_t b, std::vector<std::vector<DeviceTensor>>& outputs) {
  const std::vector<int>& bucket = buckets_[b];
  // One tower alone, weighted 1, and a bucket of gradients only: its sum is the tower's own
  // gradients, which the apply reads where they are (no pass scaling them by 1 first). The
  // model's updates still pass through the sum: they become variables, which must not live in
  // the tower's temporaries.
  if (gpus_.size() == 1 && gpus_[0]->towers.size() == 1 && !across_processes() &&
      gpus_[0]->uploaded == std::vector<double>{1.0, 1.0} &&
      std::all_of(bucket.begin(), bucket.end(), [&](int k) { return static_cast<size_t>(k) < gradient_of_.size(); })) {
    for (int k : bucket) gpus_[0]->reduced[k] = std::move(outputs[gpus_[0]->towers[0]][fetch_of_[k]]);
    gpus_[0]->bucket_done[b] = ready_[gpus_[0]->towers[0]][b].get();
    return;
  }
  for (auto& gpu : gpus_) {
    std::vector<const cuda::Event*> wait;
    for (size_t i = 0; i < gpu->towers.size(); ++i) {
      const int t = gpu->towers[i];
      wait.push_back(ready_[t][b].get());
      for (size_t k = 0; k < bucket.size(); ++k)
        gpu->reduce_feeds[b][part(static_cast<int>(i), k)] = std::move(outputs[t][fetch_of_[bucket[k]]]);
    }
    DeviceVariables none;
    std::vector<DeviceTensor> sums = gpu->reduce[b]->queue_to_device(gpu->reduce_feeds[b], none, 0, wait, {}, loc_);
    for (size_t k = 0; k < bucket.size(); ++k) gpu->reduced[bucket[k]] = std::move(sums[k]);
  }
  if (nccl_) {
    std::vector<std::vector<cuda::NcclBuffer>> buffers;
    std::vector<const cuda::Stream*> streams;
    for (auto& gpu : gpus_) {
      buffers.emplace_back();
      for (int k : bucket) {
        const DeviceTensor& sum = gpu->reduced[k];
        buffers.back().push_back({sum.ptr(), static_cast<size_t>(sum.size()), sum.dtype});
      }
      streams.push_back(&gpu->reduce[b]->stream());
    }
    nccl_->all_reduce_sum(buffers, streams, "gradient bucket " + std::to_string(b + 1) + " of " + std::to_string(buckets_.size()), loc_);
  }
  for (auto& gpu : gpus_) {
    gpu->reduced_events[b]->record(gpu->reduce[b]->stream());
    gpu->bucket_done[b] = gpu->reduced_events[b].get();
    if (reduced_on_device()) widen_bucket(*gpu, b);
  }
}

// With compression, bucket b's gradients on `gpu` (their 16-bit total, complete once
// bucket_done[b] is) widened to f32 behind that event; bucket_done[b] becomes the widening's.
void GpuResidentSync::widen_bucket(Gpu& gpu, size_t b) {
  if (wire_ == DType::f32) return;
  std::vector<int> gradients;
  for (int k : buckets_[b])
    if (static_cast<size_t>(k) < gradient_of_.size()) gradients.push_back(k);
  if (gradients.empty()) return;
  DeviceFeeds& feeds = gpu.widen_feeds[b];
  for (size_t i = 0; i < gradients.size(); ++i) feeds[part(0, i)] = std::move(gpu.reduced[gradients[i]]);
  DeviceVariables none;
  std::vector<const cuda::Event*> wait;
  if (gpu.bucket_done[b]) wait.push_back(gpu.bucket_done[b]);
  std::vector<DeviceTensor> wide = gpu.widen[b]->queue_to_device(feeds, none, 0, wait, {}, loc_);
  for (size_t i = 0; i < gradients.size(); ++i) gpu.reduced[gradients[i]] = std::move(wide[i]);
  gpu.widened_events[b]->record(gpu.widen[b]->stream());
  gpu.bucket_done[b] = gpu.widened_events[b].get();
}

// Several GPUs without NCCL: every GPU's sums are copied to the first, added there in GPU
// order, and the total is copied back to each.
void GpuResidentSync::combine_gpus() {
  Gpu& first = *gpus_[0];
  DeviceFeeds& feeds = combine_feeds_;
  for (size_t g = 0; g < gpus_.size(); ++g) {
    const int set = static_cast<int>(g);
    for (size_t j = 0; j < gpus_[g]->reduced.size(); ++j) {
      DeviceTensor& from = gpus_[g]->reduced[j];
      if (g == 0) {
        feeds[part(set, j)] = std::move(from);
        continue;
      }
      DeviceTensor to = empty_device_tensor(*first.context, from.shape, from.dtype);
      cuda::copy_async(to.ptr(), *first.context, from.ptr(), *from.device, from.bytes(), *first.copies);
      feeds[part(set, j)] = std::move(to);
    }
  }
  first.copies->synchronize("copying the GPUs' gradient sums to " + first.context->str(), loc_);
  DeviceVariables none;
  first.reduced = combine_->run_to_device(feeds, none, 0, loc_);
  for (size_t g = 1; g < gpus_.size(); ++g) {
    Gpu& gpu = *gpus_[g];
    for (size_t j = 0; j < first.reduced.size(); ++j) {
      const DeviceTensor& total = first.reduced[j];
      DeviceTensor to = empty_device_tensor(*gpu.context, total.shape, total.dtype);
      cuda::copy_async(to.ptr(), *gpu.context, total.ptr(), *first.context, total.bytes(), *gpu.copies);
      gpu.reduced[j] = std::move(to);
    }
    gpu.copies->synchronize("copying the gradient sum to " + gpu.context->str(), loc_);
  }
}

// The sparse gradients, once the towers have run: each tower's rows and values copied down,
// concatenated in world tower order with the towers' weights (all-gathered across processes,
// after the buckets' all-reduces, in the same order on every rank), and copied to every GPU.
void GpuResidentSync::feed_sparse(const std::vector<std::vector<DeviceTensor>>& outputs,
                                  const std::vector<double>& weights) {
  if (setup_.sparse.empty()) return;
  const size_t first_rows = 1 + setup_.gradient_inputs.size() + setup_.model_update_variables.size();
  std::vector<std::pair<size_t, size_t>> fetches;  // per sparse gradient: its values' and rows' fetch
  for (size_t k = 0; k < setup_.sparse.size(); ++k) fetches.emplace_back(1 + setup_.sparse[k].gradient, first_rows + k);
  std::vector<const cuda::Stream*> streams;
  for (size_t t = 0; t < outputs.size(); ++t) streams.push_back(gpus_[gpu_of_tower_[t]]->copies.get());
  const std::vector<HostTensor> all = detail::concatenate_sparse(outputs, fetches, streams, weights, setup_.world);
  for (auto& gpu : gpus_)
    for (size_t k = 0; k < setup_.sparse.size(); ++k) {
      gpu->apply_feeds[setup_.gradient_inputs[setup_.sparse[k].gradient]] = to_device(all[2 * k], *gpu->context, *gpu->copies);
      gpu->apply_feeds[setup_.sparse[k].rows_input] = to_device(all[2 * k + 1], *gpu->context, *gpu->copies);
    }
}

// The apply's inputs on `gpu`: the reduced gradients as its feeds, and the model's updates
// copied into their variables (which keep their addresses) on the apply's stream, which the
// apply's run follows; the apply does not read them. The copies within the GPU (a batch
// norm's moving statistics: two a layer) are one launch.
void GpuResidentSync::feed_apply(Gpu& gpu) {
  const size_t gradients = gradient_of_.size();
  for (size_t r = 0; r < gradients; ++r) gpu.apply_feeds[setup_.gradient_inputs[gradient_of_[r]]] = std::move(gpu.reduced[r]);
  std::vector<cuda::DeviceCopy> within;
  for (size_t u = 0; u < setup_.model_update_variables.size(); ++u) {
    DeviceTensor& variable = gpu.variables.at(setup_.model_update_variables[u]);
    const DeviceTensor& value = gpu.reduced[gradients + u];
    if (value.device == gpu.context) within.push_back({variable.ptr(), value.ptr(), value.bytes()});
    else cuda::copy_async(variable.ptr(), *gpu.context, value.ptr(), *value.device, value.bytes(), gpu.apply->stream());
  }
  cuda::copy_within(*gpu.context, within, gpu.apply->stream(), "the model updates", loc_);
}

// The optimiser's apply on `gpu`'s copy once the host has the sums, run and waited for. Its
// stream first waits for every bucket's sum (NCCL's all-reduce may still be queued when a
// sparse gradient brought the apply to the host).
void GpuResidentSync::apply(Gpu& gpu, Result& result) {
  for (const cuda::Event* done : gpu.bucket_done)
    if (done) gpu.apply->stream().wait(*done);
  feed_apply(gpu);
  std::vector<HostTensor> fetched = gpu.apply->run(gpu.apply_feeds, gpu.variables, 0, loc_);
  if (&gpu == gpus_[0].get()) result.apply_fetched = std::move(fetched);
}

// The apply queued behind every bucket's sum on the device, its scalars copied down into
// page-locked memory behind it: nothing waits here (finish_all() does, for the whole step).
void GpuResidentSync::queue_apply(Gpu& gpu) {
  const cuda::Stream& stream = gpu.apply->stream();
  for (const cuda::Event* done : gpu.bucket_done) stream.wait(*done);
  feed_apply(gpu);
  gpu.apply_fetches = gpu.apply->queue_to_device(gpu.apply_feeds, gpu.variables, 0, {}, {}, loc_);
  size_t bytes = 0;
  for (const DeviceTensor& f : gpu.apply_fetches) bytes += padded(f.bytes());
  gpu.apply_staging->reserve(std::max<size_t>(bytes, 8), loc_);  // nothing is queued to it now
  gpu.context->make_current();
  size_t offset = 0;
  for (const DeviceTensor& f : gpu.apply_fetches) {
    cuda::check_cuda(cuda::require_driver().MemcpyDtoHAsync(gpu.apply_staging->data() + offset, f.ptr(), f.bytes(),
                                                            stream.handle()),
                     "cuMemcpyDtoHAsync", " (the apply's scalars)", loc_);
    offset += padded(f.bytes());
  }
}

// The queued apply's fetches, once it has run.
std::vector<HostTensor> GpuResidentSync::applied(const Gpu& gpu) const {
  std::vector<HostTensor> out;
  size_t offset = 0;
  for (const DeviceTensor& f : gpu.apply_fetches) {
    HostTensor t(f.shape, f.dtype);
    std::memcpy(t.data(), gpu.apply_staging->data() + offset, f.bytes());
    offset += padded(f.bytes());
    out.push_back(std::move(t));
  }
  return out;
}

// Waits for every queued tower and reduce program, all of them even when one fails (a program
// left queued could not run again); raises the first failure.
void GpuResidentSync::finish_all() {
  std::exception_ptr failure;
  auto finish = [&](CudaProgram& p) {
    try {
      p.finish(loc_);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  };
  for (CudaProgram* tower : setup_.towers) finish(*tower);
  for (auto& gpu : gpus_) {
    for (auto& program : gpu->reduce) finish(*program);
    for (auto& program : gpu->widen) finish(*program);
    finish(*gpu->apply);  // nothing to wait for unless queue_apply() queued it
  }
  if (failure) std::rethrow_exception(failure);
}

// Tower t's loss (its first fetch) into its own page-locked word, queued behind the tower's
// run, so the wait for the run (finish_all) brings it: no wait of its own. Allocating a word
// per step would cost more than the copy.
void GpuResidentSync::queue_loss(int t, const DeviceTensor& loss) {
  CudaProgram& program = *setup_.towers[t];
  program.device().make_current();
  cuda::check_cuda(cuda::require_driver().MemcpyDtoHAsync(loss_staging_[t]->data(), loss.ptr(), 4,
                                                          program.stream().handle()),
                   "cuMemcpyDtoHAsync", " (a tower's loss)", loc_);
}

GpuResidentSync::Result GpuResidentSync::step(const std::vector<TowerFeeds>& slices, const std::vector<double>& weights,
                                              const std::vector<double>& update_weights,
                                              const std::function<uint64_t(int)>& key,
                                              const std::function<void(int, const std::function<void(int)>&)>& on_towers) {
  internal_check(!in_flight_) << "GpuResidentSync::step with a step in flight";
  queue(slices, weights, update_weights, key, on_towers);
  return finish();
}

std::optional<GpuResidentSync::Result> GpuResidentSync::queue(
    const std::vector<TowerFeeds>& slices, const std::vector<double>& weights, const std::vector<double>& update_weights,
    const std::function<uint64_t(int)>& key, const std::function<void(int, const std::function<void(int)>&)>& on_towers) {
  const bool behind = in_flight_;
  internal_check(!behind || overlaps()) << "GpuResidentSync::queue behind a step whose sums need the host";
  const int n = static_cast<int>(setup_.towers.size());
  std::optional<Result> previous;
  // Every tower's forward and backward queued on its stream, each bucket's event recorded as
  // its last gradient is copied out; then each bucket's reduction queued behind its events,
  // so it runs while the towers' backward passes go on; then, where the sums need no host,
  // the apply behind the buckets' events. Behind a step in flight, the towers also wait for
  // its apply (the variables they read); its reductions and apply are waited for before this
  // step's are queued in their places.
  std::vector<std::vector<DeviceTensor>> outputs(n);
  try {
    if (behind) previous = Result{.losses = wait_towers()};
    else
      for (auto& gpu : gpus_) set_weights(*gpu, weights, update_weights);
    on_towers(n, [&](int t) {
      CudaProgram& tower = *setup_.towers[t];
      Gpu& gpu = *gpus_[gpu_of_tower_[t]];
      const TowerFeeds& feeds = slices[t];
      std::vector<const cuda::Event*> wait;
      if (feeds.uploaded) wait.push_back(feeds.uploaded);
      if (behind) wait.push_back(gpu.applied.get());
      outputs[t] = feeds.device ? tower.queue_to_device(*feeds.device, gpu.variables, key(t), wait, record_after_[t], loc_)
                                : tower.queue_to_device(*feeds.host, gpu.variables, key(t), wait, record_after_[t], loc_);
      queue_loss(t, outputs[t][0]);
    });
    if (behind) {
      for (auto& gpu : gpus_) {
        for (auto& program : gpu->reduce) program->finish(loc_);
        for (auto& program : gpu->widen) program->finish(loc_);
        gpu->apply->finish(loc_);
      }
      previous->apply_fetched = applied(*gpus_[0]);
      for (auto& gpu : gpus_) set_weights(*gpu, weights, update_weights);  // the reductions read them
    }
    for (size_t b = 0; b < buckets_.size(); ++b) queue_bucket(b, outputs);
    // Across processes, each bucket leaves as soon as its reduction on this process's GPUs has
    // run (NCCL, or one GPU); when the GPUs' sums meet by copies, after they have.
    if (mpi_between_processes() && !combine_)
      for (size_t b = 0; b < buckets_.size(); ++b) send_bucket(b);
    if (reduced_on_device())
      for (auto& gpu : gpus_) {
        queue_apply(*gpu);
        gpu->applied->record(gpu->apply->stream());
      }
  } catch (...) {
    in_flight_ = false;
    try {
      finish_all();
    } catch (...) {
    }
    throw;
  }
  in_flight_ = true;
  if (behind) queued_behind.fetch_add(1);
  outputs_ = std::move(outputs);
  weights_ = weights;
  return previous;
}

int64_t GpuResidentSync::steps_queued_behind() { return queued_behind.load(); }

std::vector<double> GpuResidentSync::wait_towers() {
  std::vector<double> losses;
  for (size_t t = 0; t < setup_.towers.size(); ++t) {
    setup_.towers[t]->finish(loc_);  // nothing when already waited for
    float value;
    std::memcpy(&value, loss_staging_[t]->data(), 4);
    losses.push_back(value);
  }
  return losses;
}

GpuResidentSync::Result GpuResidentSync::finish() {
  internal_check(in_flight_) << "GpuResidentSync::finish with no step in flight";
  in_flight_ = false;
  Result result;
  finish_all();
  result.losses = wait_towers();
  if (reduced_on_device()) {
    result.apply_fetched = applied(*gpus_[0]);
    return result;
  }
  if (combine_) combine_gpus();
  if (mpi_between_processes() && combine_)
    for (size_t b = 0; b < buckets_.size(); ++b) send_bucket(b);
  if (mpi_between_processes()) receive_buckets();
  for (auto& gpu : gpus_)
    for (size_t b = 0; b < buckets_.size(); ++b) widen_bucket(*gpu, b);
  feed_sparse(outputs_, weights_);
  for (auto& gpu : gpus_) apply(*gpu, result);
  for (auto& gpu : gpus_)
    for (auto& program : gpu->widen) program->finish(loc_);  // done: the apply waited for them
  return result;
}

}  // namespace towerjit
