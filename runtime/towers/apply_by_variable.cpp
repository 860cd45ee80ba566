#include "runtime/towers/apply_by_variable.h"

#include <algorithm>
#include <optional>
#include <set>

#include "dsl/error.h"
#include "dsl/tower_program.h"
#include "runtime/towers/compile_towers.h"

namespace towerjit::detail {
namespace {

constexpr const char* kHostFix =
    "per-variable placement applies each variable by itself; keep the variables in host memory "
    "(TowerStrategyOptions::gpu_variables = false, or TOWERJIT_GPU_VARIABLES=off), where one apply "
    "updates them all";

// The variable an update op writes.
std::string target_of(const Graph& g, const Tensor& update) {
  return g.node(g.node(update.id()).inputs.at(0)).attrs.name;
}

// The inputs and variables the nodes `from` read, transitively (the targets of update ops
// count as read: the op's value depends on nothing else of theirs).
std::set<std::string> leaves_read(const Graph& g, const std::vector<Tensor>& from) {
  std::set<std::string> leaves;
  std::vector<int> stack;
  std::vector<bool> seen(static_cast<size_t>(g.size()), false);
  for (const Tensor& t : from) stack.push_back(t.id());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    const Node& n = g.node(id);
    if (n.op == Op::Input || n.op == Op::Variable) leaves.insert(n.attrs.name);
    for (int in : n.inputs) stack.push_back(in);
  }
  return leaves;
}

// The variable whose slot `target` is ("<variable>/<slot>"): its longest prefix that is one.
std::optional<size_t> slot_owner(const std::string& target, const std::map<std::string, size_t>& variables) {
  for (size_t cut = target.rfind('/'); cut != std::string::npos && cut > 0; cut = target.rfind('/', cut - 1))
    if (auto it = variables.find(target.substr(0, cut)); it != variables.end()) return it->second;
  return std::nullopt;
}

}  // namespace

ApplyByVariable split_apply_by_variable(const CompiledTowers& compiled, Loc loc) {
  const Graph& g = compiled.apply_side->graph;
  ApplyByVariable out;
  std::map<std::string, size_t> variables, shadows;  // name -> its VariableApply
  for (const std::string& input : compiled.gradient_inputs) {
    VariableApply a;
    a.gradient_input = input;
    a.variable = input.substr(TowerProgram::gradient_prefix.size());
    for (const CompiledTowers::Sparse& sparse : compiled.sparse)
      if (sparse.variable == out.variables.size()) a.rows_input = sparse.rows_input;
    variables[a.variable] = out.variables.size();
    if (auto shadow = compiled.ema_shadows.find(a.variable); shadow != compiled.ema_shadows.end())
      shadows[shadow->second] = out.variables.size();
    out.variables.push_back(std::move(a));
  }
  for (const Tensor& update : compiled.apply_updates) {
    const std::string target = target_of(g, update);
    const VariableInfo* info = g.find_variable(target);
    std::optional<size_t> owner;
    if (auto it = variables.find(target); it != variables.end()) owner = it->second;
    if (auto it = shadows.find(target); it != shadows.end()) owner = it->second;
    if (!owner && info && !info->trainable) owner = slot_owner(target, variables);
    if (owner) {
      VariableApply& a = out.variables[*owner];
      a.updates.push_back(update);
      if (std::find(a.state.begin(), a.state.end(), target) == a.state.end()) a.state.push_back(target);
      continue;
    }
    user_check(target.rfind("loss_scale/", 0) != 0, loc)
        << "the apply updates \"" << target << "\": loss scaling (Optimizer::with_loss_scale) skips a step "
        << "when any gradient is not finite, so it needs every gradient before any variable applies, and "
        << "per-variable placement and per-variable rules (Towers::with) apply each variable by itself; "
        << "train without loss scaling, or with one apply: no per-variable rule and the variables in host "
        << "memory (TowerStrategyOptions::gpu_variables = false, or TOWERJIT_GPU_VARIABLES=off)";
    // What is left must be the global step's increment (once per apply, dsl/state.h).
    user_check(out.global_step.empty() && info && !info->trainable && info->shape.rank() == 0, loc)
        << "the apply updates \"" << target << "\", which belongs to no trainable variable's apply (not "
        << "its slot \"<variable>/<slot>\" nor its EMA shadow); " << kHostFix;
    out.global_step = target;
    out.shared.push_back(update);
  }
  // Each variable's apply reads its own gradient, the scale, its own state and the global step.
  for (const VariableApply& a : out.variables) {
    std::set<std::string> allowed(a.state.begin(), a.state.end());
    allowed.insert({a.variable, a.gradient_input, a.rows_input, TowerProgram::gradient_scale, out.global_step});
    for (const std::string& read : leaves_read(g, a.updates))
      user_check(allowed.count(read) != 0, loc)
          << "the apply of \"" << a.variable << "\" reads \"" << read << "\""
          << (read.rfind(TowerProgram::gradient_prefix, 0) == 0
                  ? " (another variable's gradient: clip_by_global_norm sums every gradient)"
                  : " (another variable's state)")
          << "; " << kHostFix;
  }
  return out;
}

}  // namespace towerjit::detail
