#include "runtime/towers/predictor.h"

#include "dsl/ema.h"
#include "dsl/error.h"
#include "jit/passes/select_phase.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/device_program.h"
#include "runtime/thread_pool.h"
#include "runtime/cpu_affinity.h"

namespace towerjit {
namespace {

std::string describe(const HostTensor& t) { return std::string(dtype_name(t.dtype)) + t.shape.str(); }

}  // namespace

HostVariables load_variables(const std::string& path, const HostVariables& like, bool ema_weights, Loc loc) {
  const Checkpoint checkpoint = load_checkpoint(path, loc);
  HostVariables out;
  bool any_shadow = false;
  for (const auto& [name, want] : like) {
    std::string source = name;
    if (ema_weights && checkpoint.variables.count(ema_name(name))) source = ema_name(name), any_shadow = true;
    const auto it = checkpoint.variables.find(source);
    user_check(it != checkpoint.variables.end(), loc)
        << "checkpoint \"" << path << "\" has no variable \"" << name << "\" (" << describe(want)
        << ") that the model reads; was it saved from another model, or is the model built under other names "
        << "(layers, scopes)?";
    user_check(it->second.dtype == want.dtype && it->second.shape == want.shape, loc)
        << "variable \"" << source << "\" is " << describe(it->second) << " in checkpoint \"" << path
        << "\" but the model reads \"" << name << "\" as " << describe(want)
        << "; build the model with the sizes it was trained with";
    out[name] = it->second;
  }
  user_check(!ema_weights || any_shadow || like.empty(), loc)
      << "checkpoint \"" << path << "\" holds no moving averages (\"<variable>/ema\") of the model's variables; "
      << "load it without ema_weights, or train with TowerTrainerOptions{.ema = ...}";
  return out;
}

Predictor::Predictor(const Graph& graph, Tensor logits, PredictorOptions options, Loc loc)
    : options_(options) {
  user_check(logits.valid() && &logits.graph() == &graph, loc)
      << "Predictor: the logits tensor belongs to another graph; pass the model's output of this graph";
  if (options_.device.kind == DeviceKind::cpu) {
    const int threads = options_.threads > 0 ? options_.threads : static_cast<int>(allowed_cores().size());
    if (threads > 1) pool_ = std::make_unique<ThreadPool>(threads);
  }
  Rewritten inference = select_phase(graph, Phase::inference);
  const std::vector<Tensor> fetches = remap_tensors(inference, {logits});
  program_ = DeviceProgram::compile(inference.graph, fetches, options_.device, pool_.get(), "predict", loc);
  for (const kir::Buffer& b : program_->program().buffers)
    if (b.kind == kir::Buffer::Kind::variable && b.alias_of < 0) needed_.emplace(b.name, HostTensor(b.shape, b.dtype));
}

Predictor::Predictor(const Graph& graph, Tensor logits, const std::string& checkpoint, PredictorOptions options,
                     Loc loc)
    : Predictor(graph, logits, options, loc) {
  load(checkpoint, loc);
}

Predictor::~Predictor() = default;

void Predictor::load(const std::string& checkpoint, Loc loc) {
  values_ = load_variables(checkpoint, needed_, options_.ema_weights, loc);
  loaded_ = true;
}

// What to do about a value load() cannot use: the values must come from this model.
constexpr const char* kLoadFix = "; load a checkpoint (or the variables) of the model this predictor runs";

void Predictor::load(const HostVariables& values, Loc loc) {
  HostVariables chosen;
  for (const auto& [name, want] : needed_) {
    auto it = values.find(name);
    user_check(it != values.end(), loc) << "Predictor::load: no value for variable \"" << name << "\" ("
                                        << describe(want) << ") that the model reads" << kLoadFix;
    user_check(it->second.dtype == want.dtype && it->second.shape == want.shape, loc)
        << "Predictor::load: variable \"" << name << "\" is " << describe(it->second) << " but the model reads "
        << describe(want) << kLoadFix;
    chosen[name] = it->second;
  }
  values_ = std::move(chosen);
  loaded_ = true;
}

HostTensor Predictor::predict(const HostFeeds& inputs, Loc loc) {
  user_check(loaded_ || needed_.empty(), loc)
      << "Predictor::predict: no variables loaded; call load(checkpoint) first (or build the Predictor with one)";
  return std::move(program_->run(inputs, values_)[0]);
}

}  // namespace towerjit
