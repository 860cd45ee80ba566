#include "runtime/numerics_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "dsl/error.h"
#include "jit/reference/interpreter.h"

namespace towerjit {
namespace {

// The first non-finite element of an f32 buffer.
std::optional<int64_t> first_non_finite(const kir::Buffer& b, const void* data, int64_t batch) {
  if (b.dtype != DType::f32 || data == nullptr) return std::nullopt;
  const float* v = static_cast<const float*>(data);
  const int64_t n = b.shape.elements(batch);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return i;
  return std::nullopt;
}

// The buffers step `s` reads and writes.
void buffers_of(const kir::Program& p, const kir::Step& s, std::set<int>& read, std::set<int>& written) {
  if (s.kind == kir::Step::Kind::kernel) {
    for (const kir::Kernel* body : p.kernels[s.index].bodies()) {
      for (const auto& o : body->outputs) written.insert(body->accesses[o.access].buffer);
      for (const auto& e : body->exprs)
        if (e.kind == kir::Expr::Kind::load) read.insert(body->accesses[e.access].buffer);
    }
  } else if (s.kind == kir::Step::Kind::library) {
    read.insert(p.calls[s.index].inputs.begin(), p.calls[s.index].inputs.end());
    for (int b : p.calls[s.index].written()) written.insert(b);
  } else {
    read.insert(p.copies[s.index].from);
    written.insert(p.copies[s.index].to);
  }
}

reference::Array to_array(const HostTensor& t) {
  reference::Array a(t.shape, t.dtype);
  for (int64_t i = 0; i < a.size(); ++i) a[i] = value_at(t, i);
  return a;
}

// Of a fused kernel's nodes, the first (in graph order) whose exact value is NaN or beyond
// float's range, as the reference interpreter computes it on the run's feeds and variables.
struct BadValue {
  int node;
  int64_t element;
  double value;
};
std::optional<BadValue> first_bad_node(const Graph& g, const std::vector<int>& nodes, const HostInputs& inputs,
                                       uint64_t random_step) {
  std::vector<int> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  std::vector<Tensor> fetches;
  for (int n : sorted)
    if (g.node(n).dtype == DType::f32) fetches.emplace_back(const_cast<Graph*>(&g), n);
  const auto [feeds, variables] = inputs();
  reference::Feeds ref_feeds;
  for (const auto& [name, t] : feeds) ref_feeds[name] = to_array(t);
  reference::Variables ref_vars;
  for (const auto& [name, t] : variables) ref_vars[name] = to_array(t);
  try {
    const auto values = reference::run(g, fetches, ref_feeds, ref_vars, {.step = random_step});
    for (size_t k = 0; k < values.size(); ++k)
      for (int64_t i = 0; i < values[k].size(); ++i)
        if (const double v = values[k][i]; std::isnan(v) || std::fabs(v) > std::numeric_limits<float>::max())
          return BadValue{fetches[k].id(), i, v};
  } catch (const Error&) {
    // The interpreter could not run the graph as the program did: keep the kernel's own report.
  }
  return std::nullopt;
}

std::string node_text(const Graph& g, int id) {
  const Node& n = g.node(id);
  std::string out = std::string(op_name(n.op)) + " at " + format_location(n);
  if (!n.scope.empty()) out += " in \"" + n.scope + "\"";
  if (n.grad_of >= 0) out += " (the gradient of " + std::string(op_name(g.node(n.grad_of).op)) + ")";
  return out;
}

}  // namespace

void check_step_numerics(const Graph& graph, const kir::Program& program, size_t step,
                         const std::vector<void*>& base, int64_t batch, const HostInputs& inputs,
                         uint64_t random_step) {
  const kir::Step& s = program.steps[step];
  std::set<int> read, written;
  buffers_of(program, s, read, written);
  for (int b : written) {
    const kir::Buffer& buffer = program.buffers[b];
    const auto bad = first_non_finite(buffer, base[b], batch);
    if (!bad) continue;
    const float value = static_cast<const float*>(base[b])[*bad];
    std::ostringstream m;
    m << "TOWERJIT_CHECK_NUMERICS: ";
    // The op whose value the buffer holds is its last node (earlier ones are views of it); in
    // a fused kernel, the first op to go wrong may be one whose value no buffer holds.
    auto what = [](double v) { return std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf"; };
    // A kernel's nodes, and its finishers' (jit/passes/reduction_finishers.h): what the step ran.
    std::vector<int> nodes;
    if (s.kind == kir::Step::Kind::kernel) {
      nodes = program.kernels[s.index].nodes;
      for (const kir::Kernel& f : program.kernels[s.index].finishers) nodes.insert(nodes.end(), f.nodes.begin(), f.nodes.end());
    }
    const bool fused = nodes.size() > 1;
    const auto first = fused ? first_bad_node(graph, nodes, inputs, random_step) : std::nullopt;
    const bool inner = first && (buffer.nodes.empty() || first->node != buffer.nodes.back());
    if (inner)
      m << node_text(graph, first->node) << " produced " << what(first->value) << " at element " << first->element
        << " of " << graph.node(first->node).shape.str() << ", so ";
    m << (buffer.nodes.empty() ? "buffer " + buffer.name : node_text(graph, buffer.nodes.back())) << " produced "
      << what(value) << " at element " << *bad << " of " << buffer.shape.str();
    if (fused) {
      m << " (kernel " << program.kernels[s.index].name << " fuses";
      for (int n : nodes) m << " " << op_name(graph.node(n).op);
      m << ")";
    }
    std::string source;
    for (int r : read) {
      const kir::Buffer& in = program.buffers[r];
      const auto in_bad = first_non_finite(in, base[r], batch);
      if (!in_bad || in.kind == kir::Buffer::Kind::temp) continue;  // a temp would have stopped an earlier step
      source = in.kind == kir::Buffer::Kind::input ? "input \"" + in.name + "\" fed it: it holds a non-finite value at element " +
                                                         std::to_string(*in_bad) + "; check the data"
                                                   : "variable \"" + in.name + "\" already held a non-finite value at element " +
                                                         std::to_string(*in_bad) + " (an earlier step diverged)";
      break;
    }
    if (source.empty())
      source = "its operands were finite, so the op itself overflowed or was undefined there (0/0, log of 0 or "
               "less, sqrt of a negative, inf - inf); lower the learning rate, clip, or add an epsilon";
    m << "; " << source;
    throw Error(m.str());
  }
}

}  // namespace towerjit
