// The feeds of a compiled program checked against its inputs — every input fed, with its
// declared dtype and shape — and the batch size they bind B to; and a host variable checked
// against its buffer. Shared by CpuProgram and CudaProgram; `Feeds` maps input names to
// anything with `dtype` and `shape` (host or device tensors).
#pragma once

#include <string>

#include "dsl/error.h"
#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/host_tensor.h"

namespace towerjit {

// Returns the batch: from the inputs the program reads, else from any other fed input of the
// graph, else 1 when no buffer has one. Errors name the input, both shapes and, for a batch
// that disagrees, the input the batch was taken from, at the input's DSL file:line; or a
// buffer of shape with B when no fed input says what B is.
template <typename Feeds>
int64_t bind_feeds(const kir::Program& program, const Graph& graph, const Feeds& feeds) {
  int64_t batch = -1;
  std::string from;
  for (const auto& b : program.buffers) {
    if (b.kind != kir::Buffer::Kind::input) continue;
    auto it = feeds.find(b.name);
    user_check(it != feeds.end(), graph.node(b.nodes[0]))
        << "input \"" << b.name << "\" " << b.shape.str() << " was not fed; pass it in the feeds";
    const auto& t = it->second;
    bool ok = t.dtype == b.dtype && t.shape.rank() == b.shape.rank();
    for (int i = 0; ok && i < b.shape.rank(); ++i) {
      if (b.shape[i] != kBatch) { ok = t.shape[i] == b.shape[i]; continue; }
      if (batch < 0) batch = t.shape[i], from = b.name;
      ok = t.shape[i] == batch;
    }
    user_check(ok, graph.node(b.nodes[0]))
        << "input \"" << b.name << "\" expects " << dtype_name(b.dtype) << b.shape.str() << " but got "
        << dtype_name(t.dtype) << t.shape.str()
        << (batch >= 0 && from != b.name ? " (batch " + std::to_string(batch) + " from \"" + from + "\")" : "")
        << "; feed a tensor of the declared shape and dtype";
  }
  // Fed inputs the program does not read still bind B, as in the reference interpreter: zeros
  // shaped [B,3] (the gradient of a loss that does not depend on that input) have as many rows
  // as were fed, not 1. The graph keeps every input of the one it was lowered from.
  for (int id = 0; batch < 0 && id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    const auto it = n.op == Op::Input ? feeds.find(n.attrs.name) : feeds.end();
    if (it == feeds.end() || it->second.shape.rank() != n.shape.rank()) continue;
    for (int i = 0; i < n.shape.rank(); ++i)
      if (n.shape[i] == kBatch) batch = it->second.shape[i];
  }
  if (batch >= 0) return batch;
  for (const auto& b : program.buffers) {
    if (!b.shape.has_batch() || b.nodes.empty()) continue;
    const Node& n = graph.node(b.nodes[0]);
    user_check(false, n.loc) << "batch size unknown: " << op_name(n.op) << " has shape " << b.shape.str()
                             << " but no fed input holds the batch dimension B; feed an input declared with kBatch";
  }
  return 1;
}

// The value of variable buffer `b` in `variables`. Errors (at the variable's DSL file:line): no
// value, or one of another shape or dtype.
inline HostTensor& bind_variable(const kir::Buffer& b, const Graph& graph, HostVariables& variables) {
  auto it = variables.find(b.name);
  user_check(it != variables.end() && it->second.shape == b.shape && it->second.dtype == b.dtype,
             graph.node(b.nodes[0]).loc)
      << "variable \"" << b.name << "\" " << dtype_name(b.dtype) << b.shape.str()
      << (it == variables.end() ? " has no value" : " holds " + it->second.shape.str())
      << "; initialise it before running the program";
  return it->second;
}

}  // namespace towerjit
