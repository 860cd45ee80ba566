#include "runtime/towers/variable_homes.h"

#include <algorithm>

#include "dsl/error.h"
#include "runtime/cuda/library.h"
#include "runtime/towers/tower_state.h"

namespace towerjit::detail {

struct VariableHomes::Home {  // a GPU holding variables
  Device device;
  cuda::DeviceContext* context = nullptr;
  std::unique_ptr<cuda::Stream> copies;
  DeviceVariables variables;  // its variables, their slots and shadows, and a copy of the global step
};

struct VariableHomes::Placed {  // a trainable variable and its apply
  int home = 0;
  std::unique_ptr<CudaProgram> apply;
  // Its gradient and the scale, at the same addresses every apply; a sparse gradient's values
  // and rows, in blocks kept from the largest slice so far (their first axis is the slice's).
  DeviceFeeds feeds;
  double scale = 0;  // the scale in feeds
};

struct VariableHomes::Tower {
  CudaProgram* program = nullptr;
  std::unique_ptr<cuda::Stream> copies;
  DeviceVariables reads;  // its copy of every variable its step reads
};

namespace {
// Copies `from` into `to` (on any GPUs) on `stream`.
void copy(const DeviceTensor& from, DeviceTensor& to, const cuda::Stream& stream) {
  cuda::copy_async(to.ptr(), *to.device, from.ptr(), *from.device, from.bytes(), stream);
}
// Makes `to`, on `device`, hold `from`'s shape (its block grown when too small) and copies.
void copy_resized(const DeviceTensor& from, DeviceTensor& to, cuda::DeviceContext& device, const cuda::Stream& stream) {
  if (!to.buffer || to.buffer.bytes() < from.bytes()) to = empty_device_tensor(device, from.shape, from.dtype);
  to.shape = from.shape;
  copy(from, to, stream);
}
}  // namespace

VariableHomes::VariableHomes(TowerState& state, Loc loc)
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
    internal_check(tower.program) << "a tower with placed variables that is not a GPU";
    tower.program->set_fetches_in_place(true);
    tower.copies = std::make_unique<cuda::Stream>(tower.program->device());
    if (home_index(state.towers.devices()[t]) < 0)
      homes_.push_back(std::make_unique<Home>(Home{.device = state.towers.devices()[t],
                                                   .context = &tower.program->device(),
                                                   .copies = std::make_unique<cuda::Stream>(tower.program->device())}));
    towers_.push_back(std::move(tower));
  }
  const std::vector<Device> placement = state.towers.placement(bytes, {}, loc);
  for (size_t i = 0; i < model.size(); ++i) home_of_[model[i]] = home_index(placement[i]);
  for (const auto& [slot, variable] : state_of) home_of_[slot] = home_of_.at(variable);
  for (const auto& [name, h] : home_of_) {
    internal_check(h >= 0) << "\"" << name << "\" placed off the towers' GPUs";
    Home& home = *homes_[h];
    home.variables.emplace(name, to_device(c.initial.at(name), *home.context, *home.copies));
  }
  if (!split_.global_step.empty()) {
    step_[split_.global_step] = c.initial.at(split_.global_step);
    for (auto& home : homes_)
      home->variables.emplace(split_.global_step, to_device(step_.at(split_.global_step), *home->context, *home->copies));
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
    Home& home = *homes_[p.home];
    std::string stem = "apply_" + a.variable;
    std::replace(stem.begin(), stem.end(), '/', '_');
    p.apply = std::make_unique<CudaProgram>(g, std::vector<Tensor>{}, a.updates, home.device, stem, loc);
    if (a.rows_input.empty())  // a sparse gradient's feeds take their shapes at the first apply
      p.feeds.emplace(a.gradient_input, empty_device_tensor(*home.context, c.initial.at(a.variable).shape, DType::f32));
    p.feeds.emplace(TowerProgram::gradient_scale, to_device(scalar(0.0), *home.context, *home.copies));
    placed_.push_back(std::move(p));
  }
  shared_ = std::make_unique<CpuProgram>(g, c.apply_fetches, split_.shared, nullptr, "apply_global_step");
}

int VariableHomes::home_index(const Device& device) const {
  for (size_t h = 0; h < homes_.size(); ++h)
    if (homes_[h]->device == device) return static_cast<int>(h);
  return -1;
}

VariableHomes::~VariableHomes() = default;

cuda::DeviceContext& VariableHomes::home_of_variable(size_t v) const { return *homes_[placed_[v].home]->context; }

cuda::DeviceContext& VariableHomes::home_of_update(size_t u) const {
  return *homes_[home_of_.at(state_.compiled.model_updates[u].variable)]->context;
}

DeviceVariables& VariableHomes::read(int t) {
  Tower& tower = towers_[t];
  for (auto& [name, into] : tower.reads) {
    if (name == split_.global_step) upload(step_.at(name), into, *tower.copies);
    else copy(homes_[home_of_.at(name)]->variables.at(name), into, *tower.copies);
  }
  tower.copies->synchronize("copying the variables to tower " + std::to_string(t), loc_);
  return tower.reads;
}

void VariableHomes::apply(size_t v, const DeviceTensor& gradient, const DeviceTensor* rows, double scale,
                          uint64_t step) {
  Placed& p = placed_[v];
  Home& home = *homes_[p.home];
  if (p.scale != scale) upload(scalar(scale), p.feeds.at(TowerProgram::gradient_scale), *home.copies);
  p.scale = scale;
  // On the apply's stream, so its run waits for the copies.
  const cuda::Stream& stream = p.apply->stream();
  const VariableApply& a = split_.variables[v];
  DeviceTensor& values = p.feeds[a.gradient_input];
  if (a.rows_input.empty()) {
    copy(gradient, values, stream);
  } else {
    internal_check(rows) << "the sparse gradient of \"" << a.variable << "\" without its rows";
    copy_resized(gradient, values, *home.context, stream);
    copy_resized(*rows, p.feeds[a.rows_input], *home.context, stream);
    // The values reach the apply as they are (no collective scales them): the factor goes on
    // here, rounded as the host's async apply rounds it (async_variables.cpp).
    if (scale != 1.0)
      cuda::scale_floats(*home.context, values.ptr(), values.size(), scale, stream,
                         "the sparse gradient of \"" + a.variable + "\"", loc_);
  }
  p.apply->run(p.feeds, home.variables, step, loc_);
}

void VariableHomes::write_update(size_t u, const DeviceTensor& value) {
  Home& home = *homes_[home_of_.at(state_.compiled.model_updates[u].variable)];
  copy(value, home.variables.at(state_.compiled.model_updates[u].variable), *home.copies);
  home.copies->synchronize("writing a model update into " + state_.compiled.model_updates[u].variable, loc_);
}

void VariableHomes::begin_apply() {
  if (split_.global_step.empty()) return;
  for (auto& home : homes_) upload(step_.at(split_.global_step), home->variables.at(split_.global_step), *home->copies);
}

double VariableHomes::finish_apply(uint64_t step) { return shared_->run({}, step_, step)[0].f32[0]; }

HostVariables& VariableHomes::host(int64_t applies) {
  if (host_at_ == applies) return host_;
  host_at_ = applies;
  host_ = step_;
  for (const auto& home : homes_)
    for (const auto& [name, value] : home->variables)
      if (name != split_.global_step) host_[name] = to_host(value, *home->copies);
  return host_;
}

void VariableHomes::restore(const HostVariables& values) {
  for (auto& home : homes_)
    for (auto& [name, value] : home->variables) upload(values.at(name), value, *home->copies);
  for (auto& [name, value] : step_) value = values.at(name);
  host_at_ = -1;
}

std::map<std::string, std::vector<Device>> VariableHomes::devices() const {
  std::map<std::string, std::vector<Device>> out;
  for (const auto& [name, h] : home_of_) out[name] = {homes_[h]->device};
  for (const auto& [name, value] : step_) out[name] = {cpu(0)};
  return out;
}

void VariableHomes::list_programs(const TowerStrategy::AddProgram& add) const {
  for (size_t v = 0; v < placed_.size(); ++v) {
    const Placed& p = placed_[v];
    add(p.apply->name(),
        "on " + homes_[p.home]->device.str() + ", after each tower's step: the apply of " + split_.variables[v].variable,
        p.apply->lowered_graph(), p.apply->program());
  }
  add(shared_->name(), "on the host, after each tower's applies: the global step and the learning rate",
      shared_->lowered_graph(), shared_->program());
}

}  // namespace towerjit::detail
