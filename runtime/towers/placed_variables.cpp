// Async GPU towers with each variable on one GPU: the seed's AsyncMultiGPUBuilder with fewer
// than 4 towers. place_variables (dsl/towers.h) puts each of the model's variables, in creation
// order, on the towers' GPU that holds the fewest bytes so far; a variable's optimiser slots and
// EMA shadow live with it. A tower's step:
//   1. under the apply lock, every variable is copied from its GPU into the tower's own copy on
//      the tower's GPU (cuMemcpyPeerAsync between two GPUs): what the tower reads, as it was
//      between two applies;
//   2. the tower's forward and backward run there; its gradients and model updates stay there;
//   3. under the apply lock, one variable at a time, the variable's gradient is copied to the
//      variable's GPU and the variable's own apply runs there (apply_by_variable.h), reading
//      the global step; the model's updates are copied into their variables; last, the host
//      increments the global step and computes the learning rate (the part every apply shares).
// Nothing but the loss and the learning rate crosses to the host in a step; the host copy of
// the variables (checkpoints, predict) is refreshed when asked for.
#include <algorithm>

#include "dsl/error.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/towers/apply_by_variable.h"
#include "runtime/towers/async_variables.h"
#include "runtime/towers/tower_state.h"

namespace towerjit::detail {
namespace {

class PlacedVariables final : public AsyncVariables {
 public:
  PlacedVariables(TowerState& state, Loc loc);

  Read compute(int tower, const HostFeeds& feeds) override;
  double apply(int tower, double scale) override;
  HostVariables& host() override;
  void restore(const HostVariables& values) override;
  std::map<std::string, std::vector<Device>> devices() const override;
  void list_programs(const TowerStrategy::AddProgram& add) const override;

 private:
  struct Home {  // a GPU holding variables
    Device device;
    cuda::DeviceContext* context = nullptr;
    std::unique_ptr<cuda::Stream> copies;
    DeviceVariables variables;  // its variables, their slots and shadows, and a copy of the global step
  };
  struct Placed {  // a trainable variable and its apply
    int home = 0;
    std::unique_ptr<CudaProgram> apply;
    DeviceFeeds feeds;  // its gradient and the scale, at the same addresses every apply
    double scale = 0;   // the scale in feeds
  };
  struct Tower {
    CudaProgram* program = nullptr;
    std::unique_ptr<cuda::Stream> copies;
    DeviceVariables reads;              // its copy of every variable its step reads
    std::vector<DeviceTensor> fetched;  // its last step's outputs (views, until its next step)
  };
  int home_index(const Device& device) const;  // -1: none
  // Copies `from` into `to` (on any GPUs) on `stream`.
  static void copy(const DeviceTensor& from, DeviceTensor& to, const cuda::Stream& stream) {
    cuda::copy_async(to.ptr(), *to.device, from.ptr(), *from.device, from.bytes(), stream);
  }

  TowerState& state_;
  const Loc loc_;
  const ApplyByVariable split_;
  std::vector<Home> homes_;
  std::map<std::string, int> home_of_;  // every variable but the global step -> its home
  std::vector<Placed> placed_;          // in the gradients' order
  std::vector<Tower> towers_;
  std::unique_ptr<CpuProgram> shared_;  // the global step's increment, fetching the learning rate
  HostVariables step_;                  // the global step (none without one), in host memory
  HostVariables host_;                  // the copy host() refreshes
  int64_t host_at_ = -1;                // the applies host_ holds (-1: none yet)
};

PlacedVariables::PlacedVariables(TowerState& state, Loc loc)
    : state_(state), loc_(loc), split_(split_apply_by_variable(state.compiled, loc)) {
  const CompiledTowers& c = state.compiled;
  // The model's variables (not the optimiser's or EMA's state, nor the global step), placed in
  // creation order by their bytes; each state variable follows its variable.
  std::map<std::string, std::string> state_of;  // slot or shadow -> its variable
  for (const VariableApply& a : split_.variables)
    for (const std::string& s : a.state)
      if (s != a.variable) state_of[s] = a.variable;
  std::vector<std::string> model;
  std::vector<int64_t> bytes;
  for (const std::string& name : c.variable_order)
    if (name != split_.global_step && !state_of.count(name)) {
      model.push_back(name);
      bytes.push_back(c.initial.at(name).size() * dtype_bytes(c.initial.at(name).dtype));
    }
  // The homes: the towers' GPUs, each with the context its first tower's program holds.
  for (int t = 0; t < state.towers.size(); ++t) {
    Tower tower;
    tower.program = c.tower_step[t]->cuda();
    internal_check(tower.program) << "a placed async tower that is not a GPU";
    tower.program->set_fetches_in_place(true);
    tower.copies = std::make_unique<cuda::Stream>(tower.program->device());
    if (home_index(state.towers.devices()[t]) < 0)
      homes_.push_back(Home{.device = state.towers.devices()[t],
                            .context = &tower.program->device(),
                            .copies = std::make_unique<cuda::Stream>(tower.program->device())});
    towers_.push_back(std::move(tower));
  }
  const std::vector<Device> placement = state.towers.placement(bytes, {}, loc);
  for (size_t i = 0; i < model.size(); ++i) home_of_[model[i]] = home_index(placement[i]);
  for (const auto& [slot, variable] : state_of) home_of_[slot] = home_of_.at(variable);
  for (const auto& [name, h] : home_of_) {
    internal_check(h >= 0) << "\"" << name << "\" placed off the towers' GPUs";
    Home& home = homes_[h];
    home.variables.emplace(name, to_device(c.initial.at(name), *home.context, *home.copies));
  }
  if (!split_.global_step.empty()) {
    step_[split_.global_step] = c.initial.at(split_.global_step);
    for (Home& home : homes_)
      home.variables.emplace(split_.global_step, to_device(step_.at(split_.global_step), *home.context, *home.copies));
  }
  // A tower reads every variable but the optimiser's and EMA's state.
  for (Tower& tower : towers_) {
    for (const std::string& name : model)
      tower.reads.emplace(name, empty_device_tensor(tower.program->device(), c.initial.at(name).shape,
                                                    c.initial.at(name).dtype));
    if (!split_.global_step.empty())
      tower.reads.emplace(split_.global_step, to_device(step_.at(split_.global_step), tower.program->device(),
                                                        *tower.copies));
  }
  // Each variable's apply, compiled for its home; the shared part for the host.
  const Graph& g = c.apply_side->graph;
  for (const VariableApply& a : split_.variables) {
    Placed p;
    p.home = home_of_.at(a.variable);
    Home& home = homes_[p.home];
    std::string stem = "apply_" + a.variable;
    std::replace(stem.begin(), stem.end(), '/', '_');
    p.apply = std::make_unique<CudaProgram>(g, std::vector<Tensor>{}, a.updates, home.device, stem, loc);
    p.feeds.emplace(a.gradient_input, empty_device_tensor(*home.context, c.initial.at(a.variable).shape, DType::f32));
    p.feeds.emplace(TowerProgram::gradient_scale, to_device(scalar(0.0), *home.context, *home.copies));
    placed_.push_back(std::move(p));
  }
  shared_ = std::make_unique<CpuProgram>(g, c.apply_fetches, split_.shared, nullptr, "apply_global_step");
}

int PlacedVariables::home_index(const Device& device) const {
  for (size_t h = 0; h < homes_.size(); ++h)
    if (homes_[h].device == device) return static_cast<int>(h);
  return -1;
}

AsyncVariables::Read PlacedVariables::compute(int t, const HostFeeds& feeds) {
  Tower& tower = towers_[t];
  int64_t read_at = 0;
  {
    std::lock_guard lock(state_.apply_mutex);
    read_at = state_.applies;
    for (auto& [name, copy] : tower.reads) {
      if (name == split_.global_step) upload(step_.at(name), copy, *tower.copies);
      else this->copy(homes_[home_of_.at(name)].variables.at(name), copy, *tower.copies);
    }
    tower.copies->synchronize("copying the variables to tower " + std::to_string(t), loc_);
  }
  tower.fetched = tower.program->run_to_device(feeds, tower.reads, random_key(read_at, t), loc_);
  return {to_host(tower.fetched[0], tower.program->stream()).f32[0], read_at};
}

double PlacedVariables::apply(int t, double scale) {
  Tower& tower = towers_[t];
  if (!split_.global_step.empty())
    for (Home& home : homes_) upload(step_.at(split_.global_step), home.variables.at(split_.global_step), *home.copies);
  const auto step = static_cast<uint64_t>(state_.applies.load());
  for (size_t v = 0; v < placed_.size(); ++v) {
    Placed& p = placed_[v];
    if (p.scale != scale) upload(scalar(scale), p.feeds.at(TowerProgram::gradient_scale), *homes_[p.home].copies);
    p.scale = scale;
    // On the apply's stream, so its run waits for the copy.
    copy(tower.fetched[1 + v], p.feeds.at(split_.variables[v].gradient_input), p.apply->stream());
    p.apply->run(p.feeds, homes_[p.home].variables, step, loc_);
  }
  // The model's updates (batch norm's moving statistics) take this tower's values.
  const auto& updates = state_.compiled.model_updates;
  for (size_t u = 0; u < updates.size(); ++u) {
    Home& home = homes_[home_of_.at(updates[u].variable)];
    copy(tower.fetched[1 + placed_.size() + u], home.variables.at(updates[u].variable), *home.copies);
  }
  for (Home& home : homes_) home.copies->synchronize("writing tower " + std::to_string(t) + "'s model updates", loc_);
  return shared_->run({}, step_, step)[0].f32[0];
}

HostVariables& PlacedVariables::host() {
  std::lock_guard lock(state_.apply_mutex);
  if (host_at_ == state_.applies) return host_;
  host_at_ = state_.applies;
  host_ = step_;
  for (const Home& home : homes_)
    for (const auto& [name, value] : home.variables)
      if (name != split_.global_step) host_[name] = to_host(value, *home.copies);
  return host_;
}

void PlacedVariables::restore(const HostVariables& values) {
  std::lock_guard lock(state_.apply_mutex);
  for (Home& home : homes_)
    for (auto& [name, value] : home.variables) upload(values.at(name), value, *home.copies);
  for (auto& [name, value] : step_) value = values.at(name);
  host_at_ = -1;
}

std::map<std::string, std::vector<Device>> PlacedVariables::devices() const {
  std::map<std::string, std::vector<Device>> out;
  for (const auto& [name, h] : home_of_) out[name] = {homes_[h].device};
  for (const auto& [name, value] : step_) out[name] = {cpu(0)};
  return out;
}

void PlacedVariables::list_programs(const TowerStrategy::AddProgram& add) const {
  for (size_t v = 0; v < placed_.size(); ++v) {
    const Placed& p = placed_[v];
    add(p.apply->name(),
        "on " + homes_[p.home].device.str() + ", after each tower's step: the apply of " + split_.variables[v].variable,
        p.apply->lowered_graph(), p.apply->program());
  }
  add(shared_->name(), "on the host, after each tower's applies: the global step and the learning rate",
      shared_->lowered_graph(), shared_->program());
}

}  // namespace

std::unique_ptr<AsyncVariables> placed_async_variables(TowerState& state, Loc loc) {
  return std::make_unique<PlacedVariables>(state, loc);
}

}  // namespace towerjit::detail
