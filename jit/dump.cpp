#include "jit/dump.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "dsl/error.h"
#include "jit/kir/traffic.h"

namespace towerjit {
namespace {

using nlohmann::json;

std::string affine_text(const kir::Affine& a) {
  std::ostringstream text;
  if (a.b != 0) text << a.b << "*B" << (a.c ? "+" : "");
  if (a.b == 0 || a.c) text << a.c;
  return text.str();
}

// Bytes of the buffers in `ids`, each counted once, whole (a library call's or a copy's).
kir::Affine bytes(const kir::Program& p, const std::set<int>& ids) {
  kir::Affine total;
  for (int b : ids) {
    const kir::Affine n = kir::buffer_bytes(p, b);
    total = {total.c + n.c, total.b + n.b};
  }
  return total;
}

json ops_of(const Graph& g, const std::vector<int>& nodes) {
  json ops = json::array();
  for (int n : nodes) {
    const Node& node = g.node(n);
    json op = {{"node", n}, {"op", op_name(node.op)}, {"at", format_location(node)},
               {"scope", node.scope}, {"shape", node.shape.str()}};
    if (node.grad_of >= 0) {  // a backward op: the forward op it differentiates
      const Node& forward = g.node(node.grad_of);
      op["gradient_of"] = {{"node", node.grad_of}, {"op", op_name(forward.op)},
                           {"at", format_location(forward)}, {"scope", forward.scope}};
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

}  // namespace

std::string dump_index_json(const Graph& g, const kir::Program& p, const std::string& module) {
  json steps = json::array();
  for (const kir::Step& s : p.steps) {
    json step;
    std::set<int> read, written;
    if (s.kind == kir::Step::Kind::kernel) {
      const kir::Kernel& k = p.kernels[s.index];
      step = {{"kind", "kernel"}, {"name", k.name}, {"space", k.space.str()}, {"ops", ops_of(g, k.nodes)}};
      if (k.evaluations != 1) step["evaluations"] = k.evaluations;  // each point computes the ops this often
      if (k.reduce != Op::Constant) {
        // A kernel of sibling reductions (a cross-entropy's log-sum-exp and its label sum)
        // names each, in output order; "reduce" keeps the first.
        json reductions = json::array();
        for (int r = 0; r < k.reductions(); ++r) reductions.push_back(op_name(k.outputs[r].reduce));
        step["reduce"] = op_name(k.reduce);
        step["reductions"] = reductions;
      }
      if (!k.parts.empty()) {
        json parts = json::array();
        for (const kir::Kernel& part : k.parts) parts.push_back({{"name", part.name}, {"space", part.space.str()}});
        step["space"] = affine_text(kir::segment_starts(k).back());  // the flat range's points
        step["parts"] = parts;
      }
      if (!k.finishers.empty()) {
        json finishers = json::array();
        for (const kir::Kernel& f : k.finishers) finishers.push_back({{"name", f.name}, {"space", f.space.str()}});
        step["finishers"] = finishers;
      }
    } else if (s.kind == kir::Step::Kind::library) {
      const kir::LibraryCall& c = p.calls[s.index];
      read.insert(c.inputs.begin(), c.inputs.end());
      for (int b : c.written()) written.insert(b);
      std::vector<int> nodes{c.node};  // the product, then the ops its epilogue took in
      nodes.insert(nodes.end(), c.epilogue_nodes.begin(), c.epilogue_nodes.end());
      step = {{"kind", "library"}, {"name", op_name(c.op)}, {"space", p.buffers[c.output].shape.str()},
              {"ops", ops_of(g, nodes)}};
    } else {
      read.insert(p.copies[s.index].from);
      written.insert(p.copies[s.index].to);
      step = {{"kind", "copy"}, {"name", "update " + p.buffers[p.copies[s.index].to].name}};
    }
    const bool kernel = s.kind == kir::Step::Kind::kernel;
    step["bytes_read"] = affine_text(kernel ? kir::bytes_read(p, p.kernels[s.index]) : bytes(p, read));
    step["bytes_written"] = affine_text(kernel ? kir::bytes_written(p, p.kernels[s.index]) : bytes(p, written));
    steps.push_back(step);
  }
  json buffers = json::array();
  for (const auto& b : p.buffers)
    buffers.push_back({{"name", b.name}, {"shape", b.shape.str()}, {"dtype", dtype_name(b.dtype)}});
  return json{{"module", module}, {"steps", steps}, {"buffers", buffers}}.dump(1);
}

std::string dump_stem(const std::string& program, const std::string& content) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<size_t>> named;  // name -> contents' hashes, in order
  const size_t hash = std::hash<std::string>{}(content);
  std::lock_guard lock(mutex);
  std::vector<size_t>& seen = named[program];
  auto it = std::find(seen.begin(), seen.end(), hash);
  if (it == seen.end()) it = seen.insert(seen.end(), hash);
  const auto index = it - seen.begin();
  return index == 0 ? program : program + "_" + std::to_string(index + 1);
}

}  // namespace towerjit
