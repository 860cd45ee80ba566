// A graph compiled for the CPU: lowered to the kernel IR once, its loop kernels emitted as
// LLVM IR and compiled through ORC once, then run any number of times on new inputs. The
// batch stays symbolic, so an uneven tower slice (7 of 15) runs the same machine code.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dsl/tensor.h"
#include "jit/cpu/cpu_compiler.h"
#include "jit/cpu/llvm_emitter.h"
#include "jit/kir/kernel_ir.h"
#include "jit/passes/buffer_plan.h"
#include "runtime/host_tensor.h"
#include "runtime/thread_pool.h"

namespace towerjit {

class CpuProgram {
 public:
  // Compiles what `fetches` (and, with `run_update_ops`, the graph's update ops) need. The
  // program keeps its own optimised copy of the graph. `pool` splits loop kernels over threads
  // (none: serial). `name` names its files under TOWERJIT_DUMP (jit/dump.h's dump_stem): the
  // LLVM IR, the kernel IR, the index, and the CUDA C and PTX a GPU would run.
  CpuProgram(const Graph& graph, std::vector<Tensor> fetches, bool run_update_ops = false,
             ThreadPool* pool = nullptr, const std::string& name = "program");
  // The same with an explicit list of update ops (Assign tensors) to run, e.g. only an
  // optimiser's apply.
  CpuProgram(const Graph& graph, const std::vector<Tensor>& fetches,
             const std::vector<Tensor>& update_ops, ThreadPool* pool = nullptr,
             const std::string& name = "program");

  // Runs one step. Inputs are checked by name, shape and dtype; variables are read, and
  // written by the update ops. `step` keys random numbers (dropout masks). Denormal floats are
  // flushed to zero while it runs (runtime/flush_denormals.h). With TOWERJIT_CHECK_NUMERICS on,
  // the first op to produce a NaN or an infinity is an error (runtime/cpu/numerics_check.h).
  std::vector<HostTensor> run(const HostFeeds& feeds, HostVariables& variables, uint64_t step = 0);

  const kir::Program& program() const { return program_; }
  const Graph& lowered_graph() const { return graph_; }  // the optimised copy program() refers to
  const std::string& name() const { return name_; }      // its dump stem
  const std::string& llvm_ir() const { return llvm_ir_; }
  const cpujit::CompileStats& compile_stats() const { return stats_; }
  // Bytes of temporaries one run needs at this batch size (after buffer reuse).
  int64_t peak_bytes(int64_t batch) const;

  // Profiling hook (bench/): when set, run() adds each step's wall time in milliseconds to
  // (*step_times)[i], i indexing program().steps (resized to fit). Off (null) by default.
  std::vector<double>* step_times = nullptr;

 private:
  CpuProgram(const Graph& graph, const std::vector<int>& fetches, const std::vector<int>& update_ops,
             ThreadPool* pool, const std::string& name);
  int64_t bind_batch(const HostFeeds& feeds) const;
  std::vector<void*> bind_buffers(const HostFeeds& feeds, HostVariables& variables, int64_t batch);
  void run_kernel(int index, const std::vector<void*>& base, int64_t batch, uint64_t step);

  Graph graph_;  // optimised copy; the program's node ids refer to it
  ThreadPool* pool_;
  std::string name_;
  bool check_numerics_ = false;  // TOWERJIT_CHECK_NUMERICS, read when compiled
  kir::Program program_;
  std::string llvm_ir_;
  std::vector<cpujit::EmittedKernel> emitted_;
  std::vector<void (*)(void**, int64_t, int64_t, int64_t, int64_t)> functions_;
  std::shared_ptr<cpujit::CompiledModule> module_;
  cpujit::CompileStats stats_;
  std::vector<char> arena_;
  BufferPlan plan_;            // the temporaries' layout for planned_batch_
  int64_t planned_batch_ = -1;
};

}  // namespace towerjit
