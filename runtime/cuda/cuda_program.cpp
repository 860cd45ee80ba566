// Mirrors runtime/cpu/cpu_program.cpp: the same lowering, the same buffer plan and the same
// step order; what differs is where the bytes live (device memory, one arena per program) and
// that every step is queued on a stream rather than run in place.
#include "runtime/cuda/cuda_program.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>

#include "dsl/error.h"
#include "jit/cuda/cuda_dump.h"
#include "jit/dump.h"
#include "jit/kir/views.h"
#include "jit/knobs.h"
#include "jit/passes/pipeline.h"
#include "runtime/bind_feeds.h"
#include "runtime/cuda/library.h"
#include "runtime/cuda/program_graphs.h"
#include "runtime/numerics_check.h"

namespace towerjit {
namespace {

// "k3_relu_add (relu at model.cpp:12, add at model.cpp:12)": a kernel as an error names it.
std::string describe_kernel(const Graph& g, const kir::Kernel& k) {
  std::string out = k.name + " (";
  for (size_t i = 0; i < k.nodes.size() && i < 4; ++i) {
    const Node& n = g.node(k.nodes[i]);
    out += (i ? ", " : "") + std::string(op_name(n.op)) + " at " + format_location(n);
  }
  return out + (k.nodes.size() > 4 ? ", ...)" : ")");
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// The library calls that check their indices on the GPU and report the first one out of range
// in an error slot, read after the run.
bool checks_indices(Op op) {
  return op == Op::OneHot || op == Op::Gather || op == Op::GatherGrad || op == Op::CombineRows || op == Op::ScatterRows;
}

// Every program's counts together (CudaProgram::total_graph_counts).
std::mutex totals_mutex;
CudaProgram::GraphCounts totals;

void add_to_totals(int64_t captures, int64_t replays, int64_t uncaptured) {
  std::lock_guard lock(totals_mutex);
  totals.captures += captures, totals.replays += replays, totals.uncaptured += uncaptured;
}

}  // namespace

CudaProgram::CudaProgram(const Graph& graph, std::vector<Tensor> fetches, bool run_update_ops, Device device,
                         const std::string& name, Loc loc)
    : CudaProgram(graph, node_ids(graph, fetches), run_update_ops ? graph.update_ops : std::vector<int>{}, device,
                  name, loc) {}

CudaProgram::CudaProgram(const Graph& graph, const std::vector<Tensor>& fetches,
                         const std::vector<Tensor>& update_ops, Device device, const std::string& name, Loc loc)
    : CudaProgram(graph, node_ids(graph, fetches), node_ids(graph, update_ops), device, name, loc) {}

CudaProgram::CudaProgram(const Graph& graph, const std::vector<int>& ids, const std::vector<int>& update_ops,
                         Device device, const std::string& name, Loc loc) {
  user_check(device.kind == DeviceKind::gpu, loc)
      << "CudaProgram runs on a GPU, not on " << device.str() << "; use CpuProgram for CPU devices";
  device_ = &cuda::device(device.index, loc);  // "no CUDA device: ..." before any work
  LoweredProgram lowered = lower_graph_for_gpu(graph, ids, update_ops);
  graph_ = std::move(lowered.graph);
  program_ = std::move(lowered.program);
  // The same program keeps its name on every run, so the module's text (and the compile
  // cache's key) is the same.
  name_ = dump_stem(name, kir::to_string(program_));
  check_numerics_ = knobs::check_numerics();
  module_ = cuda::emit_cuda_module(graph_, program_, name_);
  if (!program_.kernels.empty()) {
    compiled_ = cuda::compile_cuda_module(module_, name_, cuda::resolve_arch("", device_->arch()));
    for (size_t i = 0; i < compiled_.parts.size(); ++i)
      loaded_.push_back(std::make_unique<cuda::LoadedModule>(*device_, compiled_.parts[i],
                                                             cuda::part_name(name_, i), loc));
    for (size_t i = 0; i < module_.kernels.size(); ++i) {
      const cuda::LoadedModule& part = *loaded_[compiled_.part_of_kernel[i]];
      functions_.push_back(part.function(module_.kernels[i].symbol));
      const std::string& combine = module_.kernels[i].combine_symbol;
      combine_functions_.push_back(combine.empty() ? nullptr : part.function(combine));
      kernel_what_.push_back(describe_kernel(graph_, program_.kernels[i]));
    }
  }
  bool has_conv = false, needs_library = false;
  for (size_t i = 0; i < program_.calls.size(); ++i) {
    const Op op = program_.calls[i].op;
    internal_check(program_.calls[i].codes < 0) << "a pool taken into a convolution (a CPU pass) in a GPU program";
    has_conv |= op == Op::Conv2D || op == Op::Conv2DGradInput || op == Op::Conv2DGradFilter;
    // A product with an epilogue may need tj_matmul_epilogue, where cuBLASLt has no algorithm
    // taking it: known only at run time, so loaded here with the rest.
    needs_library |= op != Op::MatMul || program_.calls[i].epilogue != kir::Epilogue::none;
    if (checks_indices(op)) one_hot_calls_.push_back(static_cast<int>(i));
  }
  stream_ = std::make_unique<cuda::Stream>(*device_);
  staging_ = std::make_unique<cuda::PinnedBuffer>(device_->context());
  // Convolutions go to cuDNN where it loads and makes a handle; else to the fallback, said
  // once a process (a driver cuDNN cannot work with fails at cudnnCreate).
  if (has_conv && !cuda::cudnn_available()) cuda::warn_cudnn_fallback_once(cuda::cudnn_unavailable_reason());
  if (has_conv && cuda::cudnn_available()) {
    try {
      dnn_ = std::make_unique<cuda::Cudnn>(*device_, *stream_, loc);
    } catch (const Error& e) {
      cuda::warn_cudnn_fallback_once(e.what());
    }
  }
  const bool needs_blas = std::any_of(program_.calls.begin(), program_.calls.end(), [](const kir::LibraryCall& c) {
    return c.op == Op::MatMul;
  });
  if (needs_blas) blas_ = std::make_unique<cuda::Cublas>(*device_, *stream_, loc);
  if (auto dir = knobs::dump_dir())
    cuda::write_cuda_dump(*dir, graph_, program_, module_, name_, compiled_.ptx(), dnn_ || !has_conv,
                          device_->sm_count());
  if (needs_library) device_->library_module();  // compile and load now: errors here, not mid-run
  if (!one_hot_calls_.empty()) error_slots_ = device_->allocate(8 * one_hot_calls_.size(), loc);
  step_slot_ = device_->allocate(8, loc);
  // The one-pass reductions' ticket (jit/cuda/reduction_writer.h): 0 before every launch, as
  // each launch's last block leaves it. Zeroed first on the program's stream.
  if (std::any_of(module_.kernels.begin(), module_.kernels.end(), [](const auto& k) { return k.may_split(); })) {
    ticket_ = device_->allocate(4, loc);
    cuda::check_cuda(cuda::require_driver(loc).MemsetD32Async(ticket_.ptr(), 0, 1, stream_->handle()),
                     "cuMemsetD32Async", "", loc);
  }
  for (const kir::Kernel& k : program_.kernels)
    for (const kir::Kernel* body : k.bodies())
      for (const kir::Expr& e : body->exprs) draws_random_ |= e.kind == kir::Expr::Kind::random;
  graphs_enabled_ = cuda::graphs_enabled();
  // One walk over the steps' writes finds the variables some step writes (their values go
  // back to the host after a host run) and the step after which each fetch holds its value:
  // the last one writing its buffer (-1: none does, an input or a variable read as it is).
  std::vector<int> last_writer(program_.buffers.size(), -1);
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    auto wrote = [&](int b) {
      b = kir::root_of(program_, b);
      last_writer[b] = static_cast<int>(i);
      if (program_.buffers[b].kind == kir::Buffer::Kind::variable && std::find(written_.begin(), written_.end(), b) == written_.end())
        written_.push_back(b), written_names_.push_back(program_.buffers[b].name);
    };
    const kir::Step& st = program_.steps[i];
    if (st.kind == kir::Step::Kind::kernel) {
      for (const kir::Kernel* body : program_.kernels[st.index].bodies())  // a group kernel: each of its parts
        for (const auto& o : body->outputs) wrote(body->accesses[o.access].buffer);
    } else if (st.kind == kir::Step::Kind::library) {
      wrote(program_.calls[st.index].output);
    } else {
      wrote(program_.copies[st.index].to);
    }
  }
  for (int f : program_.fetches) fetch_done_after_.push_back(last_writer[kir::root_of(program_, f)]);
  if (knobs::debug_level() >= 1)
    std::fprintf(stderr, "towerjit: %s on %s: %zu kernels, %zu library calls, %zu copies; compiled in %.1f ms%s\n",
                 name_.c_str(), device_->str().c_str(), program_.kernels.size(), program_.calls.size(),
                 program_.copies.size(), compiled_.compile_ms, compiled_.cache_hit ? " (cache hit)" : "");
}

CudaProgram::~CudaProgram() {
  // Queued work may still use the buffers this program returns to the device's cache.
  try {
    if (stream_) stream_->synchronize();
  } catch (...) {
  }
}

template <typename Feeds>
int64_t CudaProgram::bind_batch(const Feeds& feeds, Loc loc) const {
  const int64_t batch = bind_feeds(program_, graph_, feeds);
  if constexpr (std::is_same_v<Feeds, DeviceFeeds>) {
    for (const auto& b : program_.buffers) {
      if (b.kind != kir::Buffer::Kind::input) continue;
      const auto& t = feeds.at(b.name);
      user_check(t.device == device_, loc)
          << "input \"" << b.name << "\" lives on " << (t.device ? t.device->str() : "no device")
          << " but the program runs on " << device_->str() << "; copy it to the program's device";
    }
  }
  return batch;
}

void CudaProgram::prepare(int64_t batch) {
  // Training runs one batch size step after step: plan once per size, not once per run.
  const bool replan = planned_batch_ != batch;
  if (replan) plan_ = plan_buffers(program_, batch);
  // The previous run has finished (it waited for its stream), so the old blocks are idle.
  if (arena_.bytes() < static_cast<size_t>(plan_.arena_bytes)) arena_ = device_->allocate(plan_.arena_bytes);
  if (replan) {
    // After the arena: cuDNN's algorithms are chosen here (cudnn.h), within the memory left.
    scratch_bytes_ = 0;
    for (const kir::LibraryCall& c : program_.calls) {
      std::vector<Shape> in;
      for (int b : c.inputs) in.push_back(program_.buffers[b].shape.bind(batch));
      scratch_bytes_ = std::max(scratch_bytes_, cuda::library_scratch_bytes(c, graph_.node(c.node), in,
                                                                            program_.buffers[c.output].shape.bind(batch),
                                                                            dnn_.get()));
    }
    // A split reduction's partials share the scratch: steps run one after another on the
    // stream, so no two of them use it at once.
    for (const cuda::EmittedKernel& k : module_.kernels)
      scratch_bytes_ = std::max(scratch_bytes_, static_cast<size_t>(k.launch(batch, device_->sm_count()).partials_bytes));
    planned_batch_ = batch;
  }
  if (scratch_.bytes() < scratch_bytes_) scratch_ = device_->allocate(scratch_bytes_);
}

std::vector<CUdeviceptr> CudaProgram::bind_buffers(const DeviceFeeds& feeds, DeviceVariables& variables,
                                                   int64_t batch) {
  std::vector<CUdeviceptr> base(program_.buffers.size(), 0);
  for (size_t i = 0; i < program_.buffers.size(); ++i) {
    const kir::Buffer& b = program_.buffers[i];
    if (b.alias_of >= 0) {
      base[i] = base[b.alias_of];  // aliases follow the buffer they view (lower ids)
    } else if (b.kind == kir::Buffer::Kind::input) {
      base[i] = feeds.at(b.name).ptr();
    } else if (b.kind == kir::Buffer::Kind::variable) {
      auto it = variables.find(b.name);
      const bool ok = it != variables.end() && it->second.shape == b.shape && it->second.dtype == b.dtype;
      user_check(ok, graph_.node(b.nodes[0]))
          << "variable \"" << b.name << "\" " << dtype_name(b.dtype) << b.shape.str()
          << (it == variables.end() ? " has no value" : " holds " + it->second.shape.str())
          << "; initialise it before running the program";
      user_check(it->second.device == device_, graph_.node(b.nodes[0]))
          << "variable \"" << b.name << "\" lives on " << (it->second.device ? it->second.device->str() : "no device")
          << " but the program runs on " << device_->str() << "; copy it to the program's device";
      base[i] = it->second.ptr();
    } else if (plan_.offset[i] >= 0) {
      base[i] = arena_.ptr() + plan_.offset[i];
    }
  }
  return base;
}

void CudaProgram::run_kernel(int index, const std::vector<CUdeviceptr>& base, int64_t batch) {
  const cuda::EmittedKernel& k = module_.kernels[index];
  // (buffers..., long long batch, const unsigned long long* step_slot[, void* partials,
  // long long chunk, unsigned int* ticket]): each passed by address.
  const cuda::Launch shape = k.launch(batch, device_->sm_count());
  std::vector<CUdeviceptr> ptrs;
  for (int b : k.buffers) ptrs.push_back(base[b]);
  long long batch_arg = batch, chunk_arg = shape.chunk;
  CUdeviceptr step_arg = step_slot_.ptr();
  CUdeviceptr partials = shape.partials_bytes > 0 ? scratch_.ptr() : 0;
  CUdeviceptr ticket = shape.one_pass ? ticket_.ptr() : 0;
  std::vector<void*> params;
  for (CUdeviceptr& p : ptrs) params.push_back(&p);
  params.push_back(&batch_arg);
  params.push_back(&step_arg);
  if (k.is_reduction()) {
    internal_check(scratch_.bytes() >= static_cast<size_t>(shape.partials_bytes))
        << k.symbol << ": scratch of " << scratch_.bytes() << " bytes for " << shape.partials_bytes << " of partials";
    params.push_back(&partials);
    params.push_back(&chunk_arg);
    params.push_back(&ticket);
  }
  const std::vector<int>& nodes = program_.kernels[index].nodes;
  const Loc at = nodes.empty() ? Loc::current() : graph_.node(nodes.front()).loc;
  cuda::launch(functions_[index], shape.grid, k.block, *stream_, params.data(), kernel_what_[index], at);
  if (shape.combine_grid > 0)  // pass 2: fold the partials in split order
    cuda::launch(combine_functions_[index], shape.combine_grid, k.block, *stream_, params.data(),
                 kernel_what_[index] + " (combine)", at);
}

void CudaProgram::run_call(int index, const std::vector<CUdeviceptr>& base, int64_t batch) {
  const kir::LibraryCall& c = program_.calls[index];
  std::vector<cuda::DeviceView> in;
  for (int b : c.inputs) in.push_back({program_.buffers[b].shape.bind(batch), base[b], program_.buffers[b].dtype});
  const cuda::DeviceView out{program_.buffers[c.output].shape.bind(batch), base[c.output],
                             program_.buffers[c.output].dtype};
  cuda::LibraryEnv env{*device_, *stream_, blas_.get(), scratch_, 0};
  env.dnn = dnn_.get();
  if (checks_indices(c.op)) {
    const auto slot = std::find(one_hot_calls_.begin(), one_hot_calls_.end(), index) - one_hot_calls_.begin();
    env.error_slot = error_slots_.ptr() + 8 * slot;
  }
  cuda::run_library_call(c, graph_.node(c.node), in, out, env);
}

void CudaProgram::queue_steps(const std::vector<CUdeviceptr>& base, int64_t batch, int first, int last, Loc loc) {
  for (int i = first; i <= last; ++i) {
    const kir::Step& s = program_.steps[i];
    if (s.kind == kir::Step::Kind::kernel) {
      run_kernel(s.index, base, batch);
    } else if (s.kind == kir::Step::Kind::library) {
      run_call(s.index, base, batch);
    } else {
      const kir::Copy& c = program_.copies[s.index];
      const size_t bytes = program_.buffers[c.to].shape.elements(batch) * dtype_bytes(program_.buffers[c.to].dtype);
      cuda::check_cuda(cuda::require_driver().MemcpyDtoDAsync(base[c.to], base[c.from], bytes, stream_->handle()),
                       "cuMemcpyDtoDAsync", "", loc);
    }
    if (step_times) timing_[i + 1]->record(*stream_);
  }
}

void CudaProgram::queue_run(const DeviceFeeds& feeds, DeviceVariables& variables, int64_t batch, uint64_t step,
                            const std::vector<Transfer>& uploads, const std::vector<Transfer>& downloads,
                            std::vector<HostTensor>* host_fetches, std::vector<DeviceTensor>* device_fetches,
                            const std::vector<const cuda::Event*>& wait, const std::vector<cuda::Event*>& ready,
                            Loc loc) {
  const cuda::DriverApi& api = cuda::require_driver(loc);
  internal_check(!queued_) << name_ << ": a run queued before the previous one finished";
  device_->make_current();
  prepare(batch);
  const std::vector<CUdeviceptr> base = bind_buffers(feeds, variables, batch);
  // The fetches come back to the host (host_fetches) or stay on the device in new tensors,
  // which outlive the arena's next run (device_fetches); then the caller's downloads and the
  // one-hot error slots come back.
  std::vector<Transfer> back;  // host = the final destination; device = the source
  if (host_fetches) {
    host_fetches->clear();
    for (int f : program_.fetches) {
      host_fetches->emplace_back(program_.buffers[f].shape.bind(batch), program_.buffers[f].dtype);
      back.push_back({host_fetches->back().data(), base[f], static_cast<size_t>(host_fetches->back().bytes())});
    }
  }
  if (device_fetches) {
    device_fetches->clear();
    for (int f : program_.fetches)
      if (fetches_in_place_) {  // a view of its buffer where it may be one (below), else a copy
        device_fetches->push_back({program_.buffers[f].shape.bind(batch), program_.buffers[f].dtype, {}, device_});
      } else {
        device_fetches->push_back(
            empty_device_tensor(*device_, program_.buffers[f].shape.bind(batch), program_.buffers[f].dtype));
      }
  }
  back.insert(back.end(), downloads.begin(), downloads.end());
  slots_.assign(one_hot_calls_.size(), 0);
  for (size_t i = 0; i < slots_.size(); ++i) back.push_back({&slots_[i], error_slots_.ptr() + 8 * i, 8});

  // Everything that crosses to or from the host goes through one page-locked block, laid out
  // now (so it never grows while copies are queued): uploads, then the copies back.
  size_t total = 64;
  for (const Transfer& t : uploads) total += align64(t.bytes);
  for (const Transfer& t : back) total += align64(t.bytes);
  char* staging = staging_->reserve(total, loc);
  back_ = std::move(back);
  back_offsets_.clear();
  size_t at = 0;
  std::vector<size_t> upload_offsets;
  for (const Transfer& t : uploads) upload_offsets.push_back(at), at += align64(t.bytes);
  for (const Transfer& t : back_) back_offsets_.push_back(at), at += align64(t.bytes);

  // A fetch kept on the device is a view of its buffer (set_fetches_in_place, when the buffer
  // is one of the program's temporaries) or else copied out as soon as the step that finishes
  // it has run; ready[j] is recorded then, so a stream waiting on it starts on the fetch while
  // later steps run. Those copies and records are "cuts": queued between the pieces of the run
  // (each piece one graph when captured), as a captured event could not be waited on from
  // outside the graph, and a copy into a new tensor would move at every run.
  std::vector<std::vector<int>> cut_fetches(program_.steps.size() + 1);  // by step + 1
  if (device_fetches) {
    for (size_t j = 0; j < program_.fetches.size(); ++j) {
      const int f = program_.fetches[j];
      const int root = kir::root_of(program_, f);
      const bool in_place = fetches_in_place_ && program_.buffers[root].kind != kir::Buffer::Kind::input &&
                            program_.buffers[root].kind != kir::Buffer::Kind::variable && plan_.offset[root] >= 0;
      DeviceTensor& d = (*device_fetches)[j];
      if (in_place) d.buffer = cuda::DeviceBuffer::view(base[f], d.bytes());
      else if (!d.buffer) d.buffer = device_->allocate(d.bytes(), loc);
      const bool signals = j < ready.size() && ready[j];
      if (!in_place || signals) cut_fetches[fetch_done_after_[j] + 1].push_back(static_cast<int>(j));
    }
  }
  auto queue_cut = [&](int done) {
    if (check_numerics_ && done >= 0) check_numerics_after(done, base, batch, feeds, variables, step, loc);
    for (int j : cut_fetches[done + 1]) {
      DeviceTensor& d = (*device_fetches)[j];
      if (d.ptr() != base[program_.fetches[j]])  // a copy, not a view
        cuda::check_cuda(api.MemcpyDtoDAsync(d.ptr(), base[program_.fetches[j]], d.bytes(), stream_->handle()),
                         "cuMemcpyDtoDAsync", "", loc);
      if (static_cast<size_t>(j) < ready.size() && ready[j]) ready[j]->record(*stream_);
    }
  };
  // The pieces: the uploads and the steps up to the first cut, ..., the steps after the last
  // cut and the copies back. cuts[k] is the step after which piece k ends.
  std::vector<int> cuts;
  for (int done = -1; done < static_cast<int>(program_.steps.size()); ++done)
    if (!cut_fetches[done + 1].empty() || (check_numerics_ && done >= 0)) cuts.push_back(done);
  const int last_step = static_cast<int>(program_.steps.size()) - 1;
  auto in_feed_block = [&](const Transfer& t) {
    return t.device >= feed_block_.ptr() && t.device + t.bytes <= feed_block_.ptr() + feed_block_.bytes();
  };
  auto queue_piece = [&](size_t k) {
    const int first = k == 0 ? 0 : cuts[k - 1] + 1, last = k < cuts.size() ? cuts[k] : last_step;
    if (k == 0)  // feeds that sit back to back in staging and in their block: one copy
      for (size_t i = 0, j; i < uploads.size(); i = j) {
        for (j = i + 1; j < uploads.size() && in_feed_block(uploads[j - 1]) && in_feed_block(uploads[j]) &&
                        uploads[j].device == uploads[j - 1].device + align64(uploads[j - 1].bytes);)
          ++j;
        const size_t bytes = uploads[j - 1].device + uploads[j - 1].bytes - uploads[i].device;
        cuda::check_cuda(api.MemcpyHtoDAsync(uploads[i].device, staging + upload_offsets[i], bytes, stream_->handle()),
                         "cuMemcpyHtoDAsync", "", loc);
      }
    queue_steps(base, batch, first, last, loc);
    if (k == cuts.size())
      for (size_t i = 0; i < back_.size(); ++i)
        cuda::check_cuda(api.MemcpyDtoHAsync(staging + back_offsets_[i], back_[i].device, back_[i].bytes,
                                             stream_->handle()),
                         "cuMemcpyDtoHAsync", "", loc);
  };

  queued_ = true;
  std::vector<uint64_t> key;  // the graph's: what it baked in
  try {
    for (const cuda::Event* e : wait) stream_->wait(*e);
    for (size_t i = 0; i < uploads.size(); ++i) std::memcpy(staging + upload_offsets[i], uploads[i].host, uploads[i].bytes);
    // The step that keys random numbers, into the device word the kernels read, where a kernel
    // draws them: a 4-byte memset of its low half, and of its high half when that changes
    // (their values are taken at the call, and queued in order: the host goes on at once).
    if (draws_random_) {
      cuda::check_cuda(api.MemsetD32Async(step_slot_.ptr(), static_cast<unsigned>(step), 1, stream_->handle()),
                       "cuMemsetD32Async", "", loc);
      if (step >> 32 != step_high_) {
        cuda::check_cuda(api.MemsetD32Async(step_slot_.ptr() + 4, static_cast<unsigned>(step >> 32), 1,
                                            stream_->handle()),
                         "cuMemsetD32Async", "", loc);
        step_high_ = step >> 32;
      }
    }
    if (step_times) {
      step_times->resize(program_.steps.size(), 0.0);
      while (timing_.size() < program_.steps.size() + 1) timing_.push_back(std::make_unique<cuda::Event>(*device_));
      timing_[0]->record(*stream_);
    }
    // Captured only when nothing in the run waits for the host or records a timing event.
    const bool captured = graphs_enabled_ && !step_times && !check_numerics_ && misses_in_a_row_ < kMissesToGiveUp;
    if (!captured) {
      ++graph_counts_.uncaptured;
      add_to_totals(0, 0, 1);
      for (size_t k = 0; k <= cuts.size(); ++k) {
        queue_piece(k);
        if (k < cuts.size()) queue_cut(cuts[k]);
      }
    } else {
      // A graph per batch size, captured again when anything it baked in has moved.
      key.assign(base.begin(), base.end());
      key.insert(key.end(), {static_cast<uint64_t>(batch), reinterpret_cast<uint64_t>(staging), arena_.ptr(), scratch_.ptr(), step_slot_.ptr(),
                             uploads.size(), back_.size()});
      for (const Transfer& t : uploads) key.insert(key.end(), {t.device, t.bytes});
      for (const Transfer& t : back_) key.insert(key.end(), {t.device, t.bytes});
      for (int c : cuts) key.push_back(static_cast<uint64_t>(c + 1));
      // A few graphs are kept (the full batch and the last, smaller one; the addresses of
      // feeds that alternate): a program whose addresses move at every run would otherwise
      // keep a graph for each.
      if (!graphs_.count(key) && graphs_.size() >= kGraphsKept) graphs_.clear();
      std::vector<std::unique_ptr<cuda::GraphExec>>& pieces = graphs_[key];
      misses_in_a_row_ = pieces.empty() ? misses_in_a_row_ + 1 : 0;
      if (pieces.empty()) {
        for (size_t k = 0; k <= cuts.size(); ++k)
          pieces.push_back(cuda::capture_graph(
              *stream_,
              [&] {
                queue_piece(k);
                if (during_capture) during_capture();
              },
              "program \"" + name_ + "\" on gpu:" + std::to_string(device_->ordinal()), loc));
        ++graph_counts_.captures;
        if (knobs::debug_level() >= 1)
          std::fprintf(stderr, "towerjit: %s on gpu:%d: captured as %zu CUDA graph%s for batch %lld (capture %lld)%s\n",
                       name_.c_str(), device_->ordinal(), pieces.size(), pieces.size() == 1 ? "" : "s",
                       static_cast<long long>(batch), static_cast<long long>(graph_counts_.captures),
                       misses_in_a_row_ == kMissesToGiveUp
                           ? "; its addresses move at every run, so later runs are queued call by call"
                           : "");
        add_to_totals(1, 0, 0);
      }
      ++graph_counts_.replays;
      add_to_totals(0, 1, 0);
      for (size_t k = 0; k <= cuts.size(); ++k) {
        pieces[k]->launch(*stream_, name_ + " on gpu:" + std::to_string(device_->ordinal()), loc);
        if (k < cuts.size()) queue_cut(cuts[k]);
      }
    }
  } catch (...) {  // copies from staging may be in flight: let them land before the next run
    queued_ = false;
    graphs_.erase(key);
    try {
      stream_->synchronize();
    } catch (...) {
    }
    throw;
  }
}

void CudaProgram::check_numerics_after(int index, const std::vector<CUdeviceptr>& base, int64_t batch,
                                       const DeviceFeeds& feeds, const DeviceVariables& variables, uint64_t step,
                                       Loc loc) {
  const cuda::DriverApi& api = cuda::require_driver(loc);
  std::vector<std::vector<char>> host(program_.buffers.size());
  std::vector<void*> host_base(program_.buffers.size(), nullptr);
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    if (!base[b]) continue;
    host[b].resize(program_.buffers[b].shape.elements(batch) * dtype_bytes(program_.buffers[b].dtype));
    cuda::check_cuda(api.MemcpyDtoHAsync(host[b].data(), base[b], host[b].size(), stream_->handle()),
                     "cuMemcpyDtoHAsync", "", loc);
    host_base[b] = host[b].data();
  }
  stream_->synchronize(name_ + " on " + device_->str(), loc);
  const HostInputs inputs = [&] {
    HostFeeds host_feeds;
    for (const auto& [name, t] : feeds) host_feeds.emplace(name, to_host(t, *stream_));
    return std::pair(std::move(host_feeds), to_host(variables, *stream_));
  };
  check_step_numerics(graph_, program_, index, host_base, batch, inputs, step);
}

void CudaProgram::finish_run(Loc loc) {
  if (!queued_) return;
  queued_ = false;
  stream_->synchronize(name_ + " on " + device_->str() +
                           " (a kernel failed: rerun with CUDA_LAUNCH_BLOCKING=1 to have the error name it)",
                       loc);
  for (size_t i = 0; i < back_.size(); ++i) std::memcpy(back_[i].host, staging_->data() + back_offsets_[i], back_[i].bytes);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Node& node = graph_.node(program_.calls[one_hot_calls_[i]].node);
    if (node.op == Op::OneHot) {
      cuda::check_one_hot_slot(node, slots_[i]);
    } else {  // a gather (table, indices), the gradient or sparse apply's (indices, ...) -> table
      const bool table_first = node.op == Op::Gather || node.op == Op::ScatterRows;
      const Shape& table = table_first ? graph_.node(node.inputs[0]).shape : node.attrs.shape;
      cuda::check_gather_slot(node, table, graph_.node(node.inputs[table_first ? 1 : 0]).shape, slots_[i]);
    }
  }
  if (step_times)
    for (size_t i = 0; i < program_.steps.size(); ++i) (*step_times)[i] += timing_[i]->elapsed_ms(*timing_[i + 1]);
}

std::vector<HostTensor> CudaProgram::execute(const DeviceFeeds& feeds, DeviceVariables& variables, int64_t batch,
                                             uint64_t step, const std::vector<Transfer>& uploads,
                                             const std::vector<Transfer>& downloads, Loc loc) {
  std::vector<HostTensor> out;
  queue_run(feeds, variables, batch, step, uploads, downloads, &out, nullptr, {}, {}, loc);
  finish_run(loc);
  return out;
}

std::vector<CudaProgram::Transfer> CudaProgram::stage_feeds(const HostFeeds& feeds) {
  // The feeds' device tensors are views into one block, each 64-byte aligned in buffer order as
  // queue_run lays the uploads out in staging, so feeds that fill their room go up in one copy.
  // A feed keeps the room of its largest batch so far: the addresses stay, and with them the
  // graph of each batch size, until a larger batch grows the block and moves every view.
  std::vector<const kir::Buffer*> inputs;
  bool grown = false;
  for (const kir::Buffer& b : program_.buffers) {
    if (b.kind != kir::Buffer::Kind::input) continue;
    inputs.push_back(&b);
    size_t& room = feed_room_[b.name];
    const size_t bytes = static_cast<size_t>(feeds.at(b.name).bytes());
    if (bytes > room) room = bytes, grown = true;
  }
  size_t total = 0;
  for (const kir::Buffer* b : inputs) total += align64(feed_room_.at(b->name));
  if (grown) feed_block_ = device_->allocate(total);  // every offset after the grown room moves
  std::vector<Transfer> uploads;
  size_t at = 0;
  for (const kir::Buffer* b : inputs) {
    const HostTensor& h = feeds.at(b->name);
    DeviceTensor& d = host_feeds_[b->name];
    d.shape = h.shape;
    d.dtype = h.dtype;
    d.device = device_;
    d.buffer = cuda::DeviceBuffer::view(feed_block_.ptr() + at, static_cast<size_t>(h.bytes()));
    uploads.push_back({const_cast<void*>(h.data()), d.ptr(), d.bytes()});
    at += align64(feed_room_.at(b->name));
  }
  return uploads;
}

std::vector<HostTensor> CudaProgram::run(const HostFeeds& feeds, HostVariables& variables, uint64_t step, Loc loc) {
  cuda::require_driver(loc);
  const int64_t batch = bind_batch(feeds, loc);
  std::vector<Transfer> uploads = stage_feeds(feeds), downloads;
  for (const kir::Buffer& b : program_.buffers) {
    if (b.kind != kir::Buffer::Kind::variable || b.alias_of >= 0) continue;
    HostTensor& value = bind_variable(b, graph_, variables);
    DeviceTensor& d = host_variables_[b.name];
    if (!(d.shape == b.shape) || d.dtype != b.dtype || !d.buffer) d = empty_device_tensor(*device_, b.shape, b.dtype);
    uploads.push_back({value.data(), d.ptr(), d.bytes()});
  }
  for (const std::string& name : written_names_)
    downloads.push_back({variables.at(name).data(), host_variables_.at(name).ptr(), host_variables_.at(name).bytes()});
  return execute(host_feeds_, host_variables_, batch, step, uploads, downloads, loc);
}

std::vector<HostTensor> CudaProgram::run(const HostFeeds& feeds, DeviceVariables& variables, uint64_t step, Loc loc) {
  cuda::require_driver(loc);
  const int64_t batch = bind_batch(feeds, loc);
  return execute(host_feeds_, variables, batch, step, stage_feeds(feeds), {}, loc);
}

std::vector<HostTensor> CudaProgram::run(const DeviceFeeds& feeds, DeviceVariables& variables, uint64_t step,
                                         Loc loc) {
  cuda::require_driver(loc);
  const int64_t batch = bind_batch(feeds, loc);
  return execute(feeds, variables, batch, step, {}, {}, loc);
}

std::vector<DeviceTensor> CudaProgram::queue_to_device(const HostFeeds& feeds, DeviceVariables& variables,
                                                       uint64_t step, const std::vector<const cuda::Event*>& wait,
                                                       const std::vector<cuda::Event*>& ready, Loc loc) {
  cuda::require_driver(loc);
  const int64_t batch = bind_batch(feeds, loc);
  std::vector<DeviceTensor> fetched;
  queue_run(host_feeds_, variables, batch, step, stage_feeds(feeds), {}, nullptr, &fetched, wait, ready, loc);
  return fetched;
}

std::vector<DeviceTensor> CudaProgram::queue_to_device(const DeviceFeeds& feeds, DeviceVariables& variables,
                                                       uint64_t step, const std::vector<const cuda::Event*>& wait,
                                                       const std::vector<cuda::Event*>& ready, Loc loc) {
  cuda::require_driver(loc);
  const int64_t batch = bind_batch(feeds, loc);
  std::vector<DeviceTensor> fetched;
  queue_run(feeds, variables, batch, step, {}, {}, nullptr, &fetched, wait, ready, loc);
  return fetched;
}

template <typename Feeds>
std::vector<DeviceTensor> CudaProgram::run_fetching_to_device(const Feeds& feeds, DeviceVariables& variables,
                                                              uint64_t step, Loc loc) {
  std::vector<DeviceTensor> fetched = queue_to_device(feeds, variables, step, {}, {}, loc);
  finish_run(loc);
  return fetched;
}

std::vector<DeviceTensor> CudaProgram::run_to_device(const HostFeeds& feeds, DeviceVariables& variables,
                                                     uint64_t step, Loc loc) {
  return run_fetching_to_device(feeds, variables, step, loc);
}

std::vector<DeviceTensor> CudaProgram::run_to_device(const DeviceFeeds& feeds, DeviceVariables& variables,
                                                     uint64_t step, Loc loc) {
  return run_fetching_to_device(feeds, variables, step, loc);
}

CudaProgram::GraphCounts CudaProgram::total_graph_counts() {
  std::lock_guard lock(totals_mutex);
  return totals;
}

int64_t CudaProgram::peak_bytes(int64_t batch) const { return plan_buffers(program_, batch).arena_bytes; }

}  // namespace towerjit
