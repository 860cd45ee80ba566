// CUDA Graphs for a program's runs (CudaProgram, runtime/cuda/cuda_program.h).
//
// A run queues dozens to thousands of launches, library calls and copies; queued call by call,
// the host spends microseconds on each. Captured once into a graph (cuStreamBeginCapture ...
// cuStreamEndCapture, cuGraphInstantiate) and replayed with one cuGraphLaunch per run, the
// host's cost per run is one call, and the GPU runs the work back to back.
//
// What a graph bakes in is every argument as captured: buffer addresses, the batch size and
// launch shapes, the byte counts of copies. So a program keeps one graph per batch size (the
// last, smaller batch of an epoch has its own) together with the addresses it was captured
// with, and captures again when any of them moves. The step that keys random numbers is the
// one argument that changes every run: it lives in a device word the kernels read (their
// `step_slot` parameter, jit/cuda/kernel_writer.h), written before each launch, outside the
// graph, by two 4-byte memsets (whose values are taken at the call, so the host never waits).
//
// A capture is made in CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: other threads (other towers) keep
// allocating while one captures; on the capturing thread, a synchronising call (a stream or
// context synchronisation, a copy to pageable memory, an allocation) breaks the capture, and
// the error names the call and the program.
#pragma once

#include <functional>
#include <memory>
#include <source_location>
#include <string>

#include "runtime/cuda/device.h"
#include "runtime/cuda/driver_api.h"

namespace towerjit::cuda {

// An instantiated graph. Move-only; destroys its graph and executable.
class GraphExec {
 public:
  GraphExec(CUgraph graph, CUgraphExec exec) : graph_(graph), exec_(exec) {}
  ~GraphExec();
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  // Queues the graph's work on `stream`; `what` names the program for an error.
  void launch(const Stream& stream, const std::string& what,
              std::source_location loc = std::source_location::current()) const;

 private:
  CUgraph graph_;
  CUgraphExec exec_;
};

// Whether runs are captured: TOWERJIT_CUDA_GRAPHS is on (the default) and the driver has the
// graph entry points.
bool graphs_enabled();

// Captures what `queue` queues on `stream` (it must queue nothing on other streams unless they
// join through events, and make no synchronising call). Throws towerjit::Error "capturing
// <what> as a CUDA graph failed: <the call that broke it and why>" when a call broke the
// capture; the stream is left out of capture either way.
std::unique_ptr<GraphExec> capture_graph(const Stream& stream, const std::function<void()>& queue,
                                         const std::string& what,
                                         std::source_location loc = std::source_location::current());

}  // namespace towerjit::cuda
