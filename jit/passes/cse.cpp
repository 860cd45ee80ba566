#include "jit/passes/cse.h"

#include <map>
#include <sstream>

namespace towerjit {
namespace {

// Everything that makes two nodes compute the same value, as one comparable string.
std::string key_of(const Node& n) {
  std::ostringstream k;
  const Attrs& a = n.attrs;
  k << static_cast<int>(n.op) << '|' << dtype_name(n.dtype) << n.shape.str() << '|';
  for (int in : n.inputs) k << in << ',';
  k << '|' << a.keepdims << a.axis << a.shape.str() << '|' << std::hexfloat << a.value << std::defaultfloat << '|' << a.depth << '|'
    << a.seed << '|' << a.name << '|' << a.dense_gradient << a.causal << a.rms << a.relu_mask << '|';
  for (int x : a.axes) k << x << ',';
  for (int64_t x : a.begin) k << x << ',';
  k << ';';
  for (int64_t x : a.end) k << x << ',';
  for (int i = 0; i < 2; ++i) k << a.kernel[i] << a.stride[i] << a.pad[i] << ',';
  return k.str();
}

}  // namespace

Rewritten eliminate_common_subexpressions(const Graph& graph) {
  std::map<std::string, int> seen;
  return rewrite_graph(graph, [&](Node node, Graph& out) {
    // An update op is a side effect, never a duplicate of another.
    if (node.op == Op::Assign) return out.add(std::move(node));
    auto [it, fresh] = seen.try_emplace(key_of(node), -1);
    if (fresh) it->second = out.add(std::move(node));
    return it->second;
  });
}

}  // namespace towerjit
