#include "runtime/cpu/cpu_program.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "dsl/error.h"
#include "jit/cuda/cuda_dump.h"
#include "jit/dump.h"
#include "jit/knobs.h"
#include "jit/passes/pipeline.h"
#include "runtime/flush_denormals.h"
#include "runtime/bind_feeds.h"
#include "runtime/cpu/library.h"
#include "runtime/cpu/relaxed_copy.h"
#include "runtime/numerics_check.h"

namespace towerjit {

using KernelFn = void (*)(void**, int64_t, int64_t, int64_t, int64_t);

CpuProgram::CpuProgram(const Graph& graph, std::vector<Tensor> fetches, bool run_update_ops,
                       ThreadPool* pool, const std::string& name)
    : CpuProgram(graph, node_ids(graph, fetches), run_update_ops ? graph.update_ops : std::vector<int>{},
                 pool, name) {}

CpuProgram::CpuProgram(const Graph& graph, const std::vector<Tensor>& fetches,
                       const std::vector<Tensor>& update_ops, ThreadPool* pool, const std::string& name)
    : CpuProgram(graph, node_ids(graph, fetches), node_ids(graph, update_ops), pool, name) {}

CpuProgram::CpuProgram(const Graph& graph, const std::vector<int>& ids,
                       const std::vector<int>& update_ops, ThreadPool* pool, const std::string& name)
    : pool_(pool) {
  LoweredProgram lowered = lower_graph(graph, ids, update_ops);
  graph_ = std::move(lowered.graph);
  program_ = std::move(lowered.program);
  llvm_ir_ = cpujit::emit_llvm_module(program_, &emitted_);
  // Named after the kernel IR, which a GPU's copy of the program shares.
  name_ = dump_stem(name, kir::to_string(program_));
  check_numerics_ = knobs::check_numerics();
  const std::string& module = name_;
  if (auto dir = knobs::dump_dir()) cuda::dump_cuda_of(*dir, graph_, program_, module);
  if (!program_.kernels.empty()) {
    module_ = cpujit::compile(llvm_ir_, module, &stats_);
    for (const auto& k : emitted_) functions_.push_back(reinterpret_cast<KernelFn>(module_->lookup(k.symbol)));
  }
  if (knobs::debug_level() >= 1)
    std::fprintf(stderr, "towerjit: %s: %zu kernels, %zu library calls, %zu copies; compiled in %.1f ms%s\n",
                 module.c_str(), program_.kernels.size(), program_.calls.size(), program_.copies.size(),
                 stats_.compile_ms, stats_.shared ? " (shared with an identical program)" : stats_.cache_hit ? " (cache hit)" : "");
}

int64_t CpuProgram::bind_batch(const HostFeeds& feeds) const {
  return bind_feeds(program_, graph_, feeds);
}

std::vector<void*> CpuProgram::bind_buffers(const HostFeeds& feeds, HostVariables& variables,
                                            int64_t batch) {
  // Training runs one batch size step after step: plan once per size, not once per run.
  if (planned_batch_ != batch) plan_ = plan_buffers(program_, batch), planned_batch_ = batch;
  const BufferPlan& plan = plan_;
  if (static_cast<int64_t>(arena_.size()) < plan.arena_bytes) arena_.assign(plan.arena_bytes, 0);
  std::vector<void*> base(program_.buffers.size(), nullptr);
  for (size_t i = 0; i < program_.buffers.size(); ++i) {
    const kir::Buffer& b = program_.buffers[i];
    if (b.alias_of >= 0) {
      base[i] = base[b.alias_of];  // aliases follow the buffer they view (lower ids)
    } else if (b.kind == kir::Buffer::Kind::input) {
      base[i] = const_cast<void*>(feeds.at(b.name).data());
    } else if (b.kind == kir::Buffer::Kind::variable) {
      base[i] = bind_variable(b, graph_, variables).data();
    } else if (plan.offset[i] >= 0) {
      base[i] = arena_.data() + plan.offset[i];
    }
  }
  return base;
}

void CpuProgram::run_kernel(int index, const std::vector<void*>& base, int64_t batch, uint64_t step) {
  const cpujit::EmittedKernel& k = emitted_[index];
  std::vector<void*> args;
  for (int b : k.buffers) args.push_back(base[b]);
  KernelFn fn = functions_[index];
  const Shape& space = k.space;  // as emitted: contiguous axes merged
  // A group kernel ranges over its parts' points, one flat range.
  const int64_t outer = k.flat ? k.points.at(batch)
                        : k.split_axis >= 0 ? Shape{space[k.split_axis]}.elements(batch) : 1;
  const int64_t work = k.flat ? outer : space.elements(batch);
  auto body = [&](int64_t begin, int64_t end) { fn(args.data(), batch, begin, end, step); };
  // Small kernels are not worth waking the other threads for.
  if (pool_ && (k.flat || k.split_axis >= 0) && work >= 32768) pool_->parallel_for(outer, body);
  else body(0, outer);
}

std::vector<HostTensor> CpuProgram::run(const HostFeeds& feeds, HostVariables& variables,
                                        uint64_t step) {
  const FlushDenormals flush;
  const int64_t batch = bind_batch(feeds);
  std::vector<void*> base = bind_buffers(feeds, variables, batch);
  if (step_times) step_times->resize(program_.steps.size(), 0.0);
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    const kir::Step& s = program_.steps[i];
    const auto start = step_times ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    if (s.kind == kir::Step::Kind::kernel) {
      run_kernel(s.index, base, batch, step);
    } else if (s.kind == kir::Step::Kind::library) {
      const kir::LibraryCall& c = program_.calls[s.index];
      auto view = [&](int b) { return cpujit::View{program_.buffers[b].shape.bind(batch), base[b], program_.buffers[b].dtype}; };
      std::vector<cpujit::View> in;
      for (int b : c.inputs) in.push_back(view(b));
      const cpujit::View codes = c.op == Op::Conv2D && c.codes >= 0 ? view(c.codes) : cpujit::View{};
      cpujit::run_library_call(c, graph_.node(c.node), in, view(c.output), pool_, codes);
    } else {
      const kir::Copy& c = program_.copies[s.index];
      const kir::Buffer& to = program_.buffers[c.to];
      const size_t bytes = to.shape.elements(batch) * dtype_bytes(to.dtype);
      // A new value copied over a variable: async towers may be reading it now (relaxed_copy.h).
      if (to.kind == kir::Buffer::Kind::variable) cpujit::copy_relaxed(base[c.to], base[c.from], bytes);
      else std::memmove(base[c.to], base[c.from], bytes);
    }
    if (step_times)
      (*step_times)[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (check_numerics_)
      check_step_numerics(graph_, program_, i, base, batch, [&] { return std::pair(feeds, variables); }, step);
  }
  std::vector<HostTensor> out;
  for (int f : program_.fetches) {
    HostTensor t(program_.buffers[f].shape.bind(batch), program_.buffers[f].dtype);
    std::memcpy(t.data(), base[f], t.bytes());
    out.push_back(std::move(t));
  }
  return out;
}

int64_t CpuProgram::peak_bytes(int64_t batch) const { return plan_buffers(program_, batch).arena_bytes; }

}  // namespace towerjit
