#include "runtime/towers/gpu_resident_sync.h"

#include <cstring>
#include <map>

#include "dsl/error.h"
#include "dsl/ops.h"
#include "jit/knobs.h"

namespace towerjit {
namespace {

HostTensor scalar(double v) {
  HostTensor t(Shape{});
  t.f32[0] = static_cast<float>(v);
  return t;
}

std::string part(int set, size_t j) { return "s" + std::to_string(set) + "/" + std::to_string(j); }
std::string gradient_weight(int set) { return "w" + std::to_string(set); }
std::string update_weight(int set) { return "m" + std::to_string(set); }

// A program on `device` forming, for every j, Σ_i weight_i · s<i>/<j> over `sets` sets of
// tensors of `shapes`: the first `gradients` weighted by the scalar input w<i>, the rest (the
// model's updates) by m<i>. towerjit fuses it into a few elementwise kernels.
std::unique_ptr<CudaProgram> weighted_sum(int sets, const std::vector<Shape>& shapes, size_t gradients,
                                          const Device& device, Loc loc) {
  Graph g;
  GraphScope use(g);
  std::vector<Tensor> w, m, sums;
  for (int i = 0; i < sets; ++i) {
    w.push_back(input(gradient_weight(i), Shape{}));
    m.push_back(input(update_weight(i), Shape{}));
  }
  for (size_t j = 0; j < shapes.size(); ++j) {
    Tensor sum;
    for (int i = 0; i < sets; ++i) {
      const Tensor term = input(part(i, j), shapes[j]) * (j < gradients ? w[i] : m[i]);
      sum = i == 0 ? term : sum + term;
    }
    sums.push_back(sum);
  }
  return std::make_unique<CudaProgram>(g, sums, /*run_update_ops=*/false, device, loc);
}

}  // namespace

struct GpuResidentSync::Gpu {
  cuda::DeviceContext* context = nullptr;
  std::vector<int> towers;  // the towers on this GPU, in tower order
  DeviceVariables variables;
  std::unique_ptr<CudaProgram> reduce, apply;
  std::unique_ptr<cuda::Stream> copies;
  DeviceFeeds reduce_feeds;       // w<i>, m<i> (kept), and each step's tower outputs
  std::vector<double> uploaded;   // the values now in `weights`
  DeviceFeeds apply_feeds;        // the scale (1), then the reduced gradients each step
  std::vector<DeviceTensor> reduced;
};

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
  }
  for (CudaProgram* tower : setup_.towers) {
    loss_staging_.push_back(std::make_unique<cuda::PinnedBuffer>(tower->device().context()));
    loss_staging_.back()->reserve(64, loc);
  }
  // The reduced tensors' shapes: each gradient's variable's, then each updated variable's.
  std::vector<Shape> shapes;
  const std::string prefix = "tower_gradient/";
  for (const std::string& name : setup_.gradient_inputs) shapes.push_back(initial.at(name.substr(prefix.size())).shape);
  for (const std::string& name : setup_.model_update_variables) shapes.push_back(initial.at(name).shape);
  const size_t gradients = setup_.gradient_inputs.size();
  for (auto& gpu : gpus_) {
    const Device device = towerjit::gpu(gpu->context->ordinal());
    gpu->copies = std::make_unique<cuda::Stream>(*gpu->context);
    gpu->reduce = weighted_sum(static_cast<int>(gpu->towers.size()), shapes, gradients, device, loc);
    gpu->apply = std::make_unique<CudaProgram>(*setup_.apply_graph, setup_.apply_fetches, setup_.apply_updates,
                                               device, loc);
    gpu->variables = to_device(initial, *gpu->context, *gpu->copies);
    gpu->apply_feeds[setup_.gradient_scale] = to_device(scalar(1.0), *gpu->context, *gpu->copies);
  }
  if (gpus_.size() > 1 && knobs::nccl_enabled() && cuda::nccl_available()) {
    std::vector<cuda::DeviceContext*> contexts;
    for (auto& gpu : gpus_) contexts.push_back(gpu->context);
    nccl_ = std::make_unique<cuda::NcclCommunicators>(contexts, loc);
  } else if (gpus_.size() > 1) {
    Gpu& first = *gpus_[0];
    combine_ = weighted_sum(static_cast<int>(gpus_.size()), shapes, gradients, towerjit::gpu(first.context->ordinal()), loc);
    for (size_t g = 0; g < gpus_.size(); ++g) {  // every GPU's sum counts once
      combine_feeds_[gradient_weight(static_cast<int>(g))] = to_device(scalar(1.0), *first.context, *first.copies);
      combine_feeds_[update_weight(static_cast<int>(g))] = to_device(scalar(1.0), *first.context, *first.copies);
    }
  }
}

GpuResidentSync::~GpuResidentSync() = default;

void GpuResidentSync::download(HostVariables& values) const {
  values = to_host(gpus_[0]->variables, *gpus_[0]->copies);
}

void GpuResidentSync::upload(const HostVariables& values) {
  for (auto& gpu : gpus_) gpu->variables = to_device(values, *gpu->context, *gpu->copies);
}

// The towers' outputs on `gpu` (loss first) summed with their weights into gpu.reduced.
void GpuResidentSync::step_reduce(Gpu& gpu, std::vector<std::vector<DeviceTensor>>& outputs,
                                     const std::vector<double>& weights, const std::vector<double>& update_weights) {
  std::vector<double> wanted;
  for (int t : gpu.towers) wanted.insert(wanted.end(), {weights[t], update_weights[t]});
  if (wanted != gpu.uploaded) {  // the weights change only with the slice sizes
    for (size_t i = 0; i < gpu.towers.size(); ++i) {
      const int set = static_cast<int>(i);
      gpu.reduce_feeds[gradient_weight(set)] = to_device(scalar(wanted[2 * i]), *gpu.context, *gpu.copies);
      gpu.reduce_feeds[update_weight(set)] = to_device(scalar(wanted[2 * i + 1]), *gpu.context, *gpu.copies);
    }
    gpu.uploaded = wanted;
  }
  for (size_t i = 0; i < gpu.towers.size(); ++i) {
    std::vector<DeviceTensor>& out = outputs[gpu.towers[i]];
    for (size_t j = 1; j < out.size(); ++j) gpu.reduce_feeds[part(static_cast<int>(i), j - 1)] = std::move(out[j]);
  }
  DeviceVariables none;
  gpu.reduced = gpu.reduce->run_to_device(gpu.reduce_feeds, none, 0, loc_);
}

// Several GPUs with NCCL: every GPU's sums are all-reduced in place, one grouped call.
void GpuResidentSync::all_reduce_gpus() {
  std::vector<std::vector<std::pair<CUdeviceptr, size_t>>> buffers;
  std::vector<const cuda::Stream*> streams;
  for (auto& gpu : gpus_) {
    buffers.emplace_back();
    for (const DeviceTensor& t : gpu->reduced) buffers.back().emplace_back(t.ptr(), static_cast<size_t>(t.size()));
    streams.push_back(gpu->copies.get());
  }
  nccl_->all_reduce_sum(buffers, streams, "the towers' gradients", loc_);
  for (auto& gpu : gpus_) gpu->copies->synchronize("the all-reduce between the GPUs", loc_);
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

// The optimiser's apply on `gpu`'s copy, then the model's updates written into it.
void GpuResidentSync::apply(Gpu& gpu, Result& result) {
  const size_t gradients = setup_.gradient_inputs.size();
  for (size_t j = 0; j < gradients; ++j) gpu.apply_feeds[setup_.gradient_inputs[j]] = std::move(gpu.reduced[j]);
  const std::vector<HostTensor> fetched = gpu.apply->run(gpu.apply_feeds, gpu.variables, 0, loc_);
  if (&gpu == gpus_[0].get()) result.learning_rate = fetched[0].f32[0];
  for (size_t u = 0; u < setup_.model_update_variables.size(); ++u)
    gpu.variables[setup_.model_update_variables[u]] = std::move(gpu.reduced[gradients + u]);
  gpu.reduced.clear();
}

GpuResidentSync::Result GpuResidentSync::step(const std::vector<HostFeeds>& slices, const std::vector<double>& weights,
                                              const std::vector<double>& update_weights,
                                              const std::function<uint64_t(int)>& key,
                                              const std::function<void(int, const std::function<void(int)>&)>& on_towers) {
  const int n = static_cast<int>(setup_.towers.size());
  Result result;
  result.losses.resize(n);
  std::vector<std::vector<DeviceTensor>> outputs(n);
  on_towers(n, [&](int t) {
    CudaProgram& program = *setup_.towers[t];
    outputs[t] = program.run_to_device(slices[t], gpus_[gpu_of_tower_[t]]->variables, key(t), loc_);
    // The loss through the tower's own page-locked word (allocating one per step would cost
    // more than the copy).
    const DeviceTensor& loss = outputs[t][0];
    program.device().make_current();
    cuda::check_cuda(cuda::require_driver().MemcpyDtoHAsync(loss_staging_[t]->data(), loss.ptr(), 4,
                                                            program.stream().handle()),
                     "cuMemcpyDtoHAsync", " (a tower's loss)", loc_);
    program.stream().synchronize("a tower's loss", loc_);
    float value;
    std::memcpy(&value, loss_staging_[t]->data(), 4);
    result.losses[t] = value;
  });
  for (auto& gpu : gpus_) step_reduce(*gpu, outputs, weights, update_weights);
  if (nccl_) all_reduce_gpus();
  else if (combine_) combine_gpus();
  for (auto& gpu : gpus_) apply(*gpu, result);
  return result;
}

}  // namespace towerjit
