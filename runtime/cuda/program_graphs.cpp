#include "runtime/cuda/program_graphs.h"

#include <exception>
#include <string>

#include "dsl/error.h"
#include "jit/knobs.h"

namespace towerjit::cuda {

GraphExec::~GraphExec() {
  const DriverApi& api = require_driver();
  api.GraphExecDestroy(exec_);  // errors ignored: nothing to do about them in a destructor
  api.GraphDestroy(graph_);
}

void GraphExec::launch(const Stream& stream, const std::string& what, std::source_location loc) const {
  check_cuda(require_driver(loc).GraphLaunch(exec_, stream.handle()), "cuGraphLaunch", " (" + what + ")", loc);
}

bool graphs_enabled() { return knobs::cuda_graphs() && require_driver().has_graphs(); }

std::unique_ptr<GraphExec> capture_graph(const Stream& stream, const std::function<void()>& queue,
                                         const std::string& what, std::source_location loc) {
  const DriverApi& api = require_driver(loc);
  const std::string context = " (capturing " + what + " as a CUDA graph)";
  check_cuda(api.StreamBeginCapture(stream.handle(), kStreamCaptureModeThreadLocal), "cuStreamBeginCapture", context,
             loc);
  std::exception_ptr failure;
  try {
    queue();
  } catch (...) {
    failure = std::current_exception();
  }
  CUgraph graph = nullptr;
  const CuResult ended = api.StreamEndCapture(stream.handle(), &graph);  // always: the stream leaves capture
  if (failure) {
    if (graph) api.GraphDestroy(graph);
    try {
      std::rethrow_exception(failure);
    } catch (const Error& e) {
      // The call that broke it has said which it was (its own check_cuda message).
      std::string why = e.what();
      if (why.rfind("towerjit: ", 0) == 0) why.erase(0, 10);
      user_check(false, loc) << "capturing " << what << " as a CUDA graph failed: " << why
                             << "; a call that waits for the GPU may not run inside a captured step "
                                "(TOWERJIT_CUDA_GRAPHS=off runs the step uncaptured)";
    }
  }
  check_cuda(ended, "cuStreamEndCapture", context, loc);
  CUgraphExec exec = nullptr;
  const CuResult made = api.GraphInstantiate(&exec, graph, 0);
  if (made != kCudaSuccess) {
    api.GraphDestroy(graph);
    check_cuda(made, "cuGraphInstantiate", context, loc);
  }
  return std::make_unique<GraphExec>(graph, exec);
}

}  // namespace towerjit::cuda
