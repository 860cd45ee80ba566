// Inference from a checkpoint in one call: the model's logits compiled in inference (the graph
// selected for Phase::inference, as TowerTrainer compiles "predict": batch norm on its moving
// statistics, no dropout) and the checkpoint's values of every variable that program reads.
//
//   tj::Graph graph;                 // a fresh graph: the model only, no loss or optimiser
//   tj::GraphScope use(graph);
//   auto logits = mlp(tj::input("image", {tj::kBatch, 784}));
//   tj::Predictor predictor(graph, logits, "runs/mlp/best.tjck", {.ema_weights = true});
//   tj::HostTensor out = predictor.predict({{"image", images}});
//
// Variables are found by name, so the graph must build the model under the same names (the
// same layers and scopes) as the training run did.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dsl/devices.h"
#include "dsl/tensor.h"
#include "runtime/host_tensor.h"

namespace towerjit {

class DeviceProgram;
class ThreadPool;

struct PredictorOptions {
  // Load each variable's EMA shadow ("<variable>/ema") in its place, where the checkpoint has
  // one: predict as trainer.predict(inputs, /*ema_weights=*/true) does.
  bool ema_weights = false;
  Device device = {};  // cpu:0 by default; gpu(i) runs the program on that GPU
  int threads = 0;     // a CPU program's threads (0: every core the process may use)
};

// The values of the variables named in `like` (checked against its shapes and dtypes; its
// values are not read) from the checkpoint `path` (a file, or a directory's newest), with
// their EMA shadows in their place when `ema_weights`: e.g. load_variables(path,
// predictor.needed()) or load_variables(path, trainer.variables()). Errors (towerjit::Error at
// `loc`): the checkpoint's own (missing, damaged, ...); a variable it lacks or holds with
// another shape or dtype, naming the variable and the file; EMA weights asked of a checkpoint
// that holds no shadow of any of them. Variables of the checkpoint not in `like` are ignored.
HostVariables load_variables(const std::string& path, const HostVariables& like, bool ema_weights = false,
                             Loc loc = Loc::current());

class Predictor {
 public:
  // Compiles `logits` of `graph` in inference for `options.device`, with no values yet (load()
  // them). Errors: a tensor of another graph, a GPU the machine does not have.
  Predictor(const Graph& graph, Tensor logits, PredictorOptions options = {}, Loc loc = Loc::current());
  // The same, then load(checkpoint).
  Predictor(const Graph& graph, Tensor logits, const std::string& checkpoint, PredictorOptions options = {},
            Loc loc = Loc::current());
  ~Predictor();

  // Loads every variable the program reads from a checkpoint (a file or a directory's newest),
  // checked for name, shape and dtype: see load_variables. The previous values stay on error.
  void load(const std::string& checkpoint, Loc loc = Loc::current());
  // The same from values in memory (e.g. trainer.variables()). Errors: a variable missing or
  // of another shape or dtype.
  void load(const HostVariables& values, Loc loc = Loc::current());

  // The logits of every example of `inputs` (the model's inputs by name; others are ignored).
  // Errors: nothing loaded yet, inputs of the wrong shape (at the input's line in the model).
  HostTensor predict(const HostFeeds& inputs, Loc loc = Loc::current());

  // The variables the program reads, by name, with their shapes and dtypes (values zero).
  const HostVariables& needed() const { return needed_; }
  const HostVariables& values() const { return values_; }

 private:
  PredictorOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<DeviceProgram> program_;
  HostVariables needed_;
  HostVariables values_;
  bool loaded_ = false;
};

}  // namespace towerjit
