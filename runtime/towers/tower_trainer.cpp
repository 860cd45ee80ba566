#include "runtime/towers/tower_trainer.h"

#include <algorithm>
#include <condition_variable>
#include <thread>
#include <cstring>

#include "dsl/autodiff.h"
#include "dsl/error.h"
#include "dsl/ops.h"
#include "jit/reference/interpreter.h"

namespace towerjit {
namespace {

HostTensor to_host(const reference::Array& a) {
  HostTensor t(a.shape, a.dtype);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (a.dtype == DType::f32) t.f32[i] = static_cast<float>(a[i]);
    else t.i32[i] = static_cast<int32_t>(a[i]);
  }
  return t;
}

// A gradient that is a constant zero: autodiff's answer for a variable the loss never reads.
bool is_zero_constant(const Tensor& g) {
  const Node& n = g.node();
  return n.op == Op::Constant && n.attrs.value == 0;
}

}  // namespace

TowerTrainer::TowerTrainer(Graph& graph, Tensor loss, Towers towers, const Optimizer& optimizer,
                           TowerTrainerOptions options, Loc loc)
    : towers_(std::move(towers)), threads_(towers_.size()) {
  for (const Device& d : towers_.devices())
    user_check(d.kind == DeviceKind::cpu, loc)
        << "tower on " << d.str() << ": GPU towers need the CUDA runtime, which is not built "
        << "yet; use cpu:N towers";
  GraphScope use(graph);
  // The model's own update ops (batch norm's moving averages): every tower computes their new
  // values from its slice; the trainer writes them once the towers are done (see combine_updates).
  for (int u : graph.update_ops) {
    const Node& assign = graph.node(u);
    model_updates_.push_back({graph.node(assign.inputs[0]).attrs.name, Tensor(&graph, assign.inputs[1])});
  }
  for (int id : graph.trainable_variable_nodes()) variables_in_order_.emplace_back(&graph, id);
  const std::vector<Tensor> grads = grad(loss, variables_in_order_, loc);
  for (size_t i = 0; i < grads.size(); ++i)
    user_check(!is_zero_constant(grads[i]), loc)
        << "variable \"" << variables_in_order_[i].node().attrs.name << "\" (created at "
        << format_location(variables_in_order_[i].node().loc) << ") is trainable but the loss "
        << "does not depend on it, so the towers would never update it; use it in the model or "
        << "create it with trainable = false";

  // The towers' program: the loss and every gradient, for any slice size.
  std::vector<Tensor> fetches = {loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  for (const auto& u : model_updates_) fetches.push_back(u.value);
  for (int t = 0; t < towers_.size(); ++t)
    tower_programs_.push_back(std::make_unique<CpuProgram>(graph, fetches));

  // The apply program: the optimiser's update ops, fed the combined gradients.
  std::vector<Tensor> gradient_inputs;
  for (const Tensor& v : variables_in_order_) {
    gradient_inputs_.push_back("tower_gradient/" + v.node().attrs.name);
    gradient_inputs.push_back(input(gradient_inputs_.back(), v.shape(), DType::f32, loc));
  }
  const std::vector<Tensor> updates = optimizer.apply(gradient_inputs, variables_in_order_, loc);
  apply_program_ = std::make_unique<CpuProgram>(graph, std::vector<Tensor>{}, updates);

  for (auto& [name, value] : reference::initialize_variables(graph, options.seed))
    variables_[name] = to_host(value);
}

TowerTrainer::~TowerTrainer() = default;

std::vector<HostFeeds> TowerTrainer::slice_batch(const HostFeeds& batch,
                                                 const std::vector<int64_t>& slices, Loc loc) const {
  std::vector<HostFeeds> out(slices.size());
  for (const auto& [name, t] : batch) {
    user_check(t.shape.rank() > 0, loc) << "input \"" << name << "\" is a scalar; every input "
                                        << "fed to the towers needs the batch as its first dimension";
    const int64_t row = t.size() / t.shape[0];
    int64_t offset = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      Shape shape = t.shape;
      shape[0] = slices[i];
      HostTensor part(shape, t.dtype);
      std::memcpy(part.data(), static_cast<const char*>(t.data()) + offset * row * 4, slices[i] * row * 4);
      out[i][name] = std::move(part);
      offset += slices[i];
    }
  }
  return out;
}

// Combines the given towers' gradients with their weights, in tower order (so a sync step is
// bitwise reproducible), and runs the optimiser's apply once.
void TowerTrainer::apply(const std::vector<std::vector<HostTensor>>& outputs,
                         const std::vector<double>& weights, const std::vector<int>& towers) {
  HostFeeds feeds;
  for (size_t v = 0; v < gradient_inputs_.size(); ++v) {
    HostTensor g(outputs[towers[0]][v + 1].shape);
    for (int64_t k = 0; k < g.size(); ++k) {
      double sum = 0;
      for (int t : towers) sum += weights[t] * outputs[t][v + 1].f32[k];
      g.f32[k] = static_cast<float>(sum);
    }
    feeds[gradient_inputs_[v]] = std::move(g);
  }
  apply_program_->run(feeds, variables_, static_cast<uint64_t>(applies_));
  ++applies_;
}

// The model's update ops: the given towers' new values, weighted (sync: by slice size, so a
// moving mean follows the whole batch's mean; async: one tower's value), in tower order.
void TowerTrainer::write_model_updates(const std::vector<std::vector<HostTensor>>& outputs,
                                       const std::vector<double>& weights, const std::vector<int>& towers) {
  const size_t first = 1 + gradient_inputs_.size();
  for (size_t u = 0; u < model_updates_.size(); ++u) {
    HostTensor& target = variables_.at(model_updates_[u].variable);
    for (int64_t k = 0; k < target.size(); ++k) {
      double sum = 0;
      for (size_t j = 0; j < towers.size(); ++j)
        sum += weights[towers.size() == 1 ? 0 : j] * outputs[towers[j]][first + u].f32[k];
      target.f32[k] = static_cast<float>(sum);
    }
  }
}

TowerTrainer::StepResult TowerTrainer::step(const HostFeeds& batch, Loc loc) {
  user_check(!batch.empty(), loc) << "step: no inputs fed; feed the model's inputs with the batch";
  const int64_t examples = batch.begin()->second.shape.rank() ? batch.begin()->second.shape[0] : 0;
  for (const auto& [name, t] : batch)
    user_check(t.shape.rank() > 0 && t.shape[0] == examples, loc)
        << "step: input \"" << name << "\" has " << (t.shape.rank() ? t.shape[0] : 0)
        << " examples but \"" << batch.begin()->first << "\" has " << examples
        << "; feed every input the same batch";
  StepResult result;
  result.slices = towers_.slices(examples, loc);
  const std::vector<double> weights = towers_.weights(examples, loc);
  const std::vector<HostFeeds> feeds = slice_batch(batch, result.slices, loc);
  const int n = towers_.size();
  std::vector<std::vector<HostTensor>> outputs(n);
  const bool async = is_async(towers_.reduction());
  // One tower per thread; an async tower applies as soon as its gradient is ready.
  threads_.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      outputs[t] = tower_programs_[t]->run(feeds[t], variables_);
      if (async) {
        std::lock_guard lock(apply_mutex_);
        apply(outputs, weights, {static_cast<int>(t)});
        write_model_updates(outputs, {1.0}, {static_cast<int>(t)});
      }
    }
  });
  if (!async) {
    std::vector<int> all(n);
    for (int t = 0; t < n; ++t) all[t] = t;
    apply(outputs, weights, all);
    std::vector<double> by_slice(n);
    for (int t = 0; t < n; ++t) by_slice[t] = static_cast<double>(result.slices[t]) / examples;
    write_model_updates(outputs, by_slice, all);
  }
  for (int t = 0; t < n; ++t)
    result.loss += static_cast<double>(result.slices[t]) / examples * outputs[t][0].f32[0];
  return result;
}

TowerTrainer::AsyncReport TowerTrainer::run_async(
    int steps_per_tower, const std::function<HostFeeds(int, int)>& batch_for, Loc loc) {
  user_check(is_async(towers_.reduction()), loc)
      << "run_async: the towers are declared " << to_string(towers_.reduction())
      << "; declare them with .reduce(AsyncApply{}) to run them free";
  const auto bound = std::get<AsyncApply>(towers_.reduction()).max_staleness;
  const int n = towers_.size();
  // The scale of an async apply does not depend on slice sizes (1/N or 1).
  const std::vector<double> weights = reduction_weights(std::vector<int64_t>(n, 1), towers_.reduction(), loc);
  std::vector<int64_t> done(n, 0);
  std::condition_variable turn;
  AsyncReport report;
  int64_t staleness_sum = 0;
  std::exception_ptr failure;
  auto slowest = [&] { return *std::min_element(done.begin(), done.end()); };
  auto tower = [&](int t) {
    try {
      for (int s = 0; s < steps_per_tower; ++s) {
        int64_t read_at;
        {
          std::unique_lock lock(apply_mutex_);
          // A tower more than k applies ahead of the slowest waits for it.
          if (bound) turn.wait(lock, [&] { return done[t] - slowest() <= *bound || failure; });
          if (failure) return;
          read_at = applies_;
        }
        std::vector<std::vector<HostTensor>> outputs(n);
        outputs[t] = tower_programs_[t]->run(batch_for(t, s), variables_);
        std::lock_guard lock(apply_mutex_);
        const int64_t staleness = applies_ - read_at;
        report.max_staleness = std::max(report.max_staleness, staleness);
        report.max_lead = std::max(report.max_lead, done[t] - slowest());
        staleness_sum += staleness;
        apply(outputs, weights, {t});
        write_model_updates(outputs, {1.0}, {t});
        ++done[t];
        turn.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(apply_mutex_);
      if (!failure) failure = std::current_exception();
      turn.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back(tower, t);
  for (auto& th : threads) th.join();
  if (failure) std::rethrow_exception(failure);
  report.applies = static_cast<int64_t>(n) * steps_per_tower;
  report.mean_staleness = report.applies ? static_cast<double>(staleness_sum) / report.applies : 0;
  return report;
}

}  // namespace towerjit
