// A model's weights in and out as safetensors, under PyTorch's names and in PyTorch's layouts,
// so that `model.load_state_dict(safetensors.torch.load_file(path))` takes them (docs/interop.md).
//
// Which variables: the model's (what a Predictor reads: weights, biases, batch norm's
// statistics), not the training state. A variable is training state when it is "global_step" or
// when its name extends another variable's ("fc1/kernel/adam_m", "fc1/kernel/ema": optimiser
// slots and EMA shadows are named after their variable, and no layer names a variable inside
// another).
//
// Names (pytorch_name): the scope separator '/' becomes '.', and the last part is renamed where
// PyTorch's modules call it otherwise:
//   kernel -> weight            (dense: nn.Linear; conv2d: nn.Conv2d)
//   gamma -> weight, beta -> bias, moving_mean -> running_mean, moving_variance -> running_var
//                               (batch_norm: nn.BatchNorm1d/2d)
//   anything else is kept ("fc1/bias" -> "fc1.bias").
// so "block1/a/kernel" is "block1.a.weight". SafetensorsOptions::names overrides the rule for
// the variables it lists (e.g. an nn.Sequential's "0.weight").
//
// Layouts: a dense kernel (a rank-2 ".../kernel", [in, out]) is transposed to nn.Linear's
// [out, in]. A conv2d kernel is [filters, channels, kh, kw], nn.Conv2d's own layout: as it is.
// Everything else is as it is.
#pragma once

#include <map>
#include <source_location>
#include <string>

#include "runtime/host_tensor.h"

namespace towerjit {

class TowerTrainer;

struct SafetensorsOptions {
  // Saving: each trainable variable's EMA shadow ("<variable>/ema") in its place, as
  // trainer.predict(inputs, /*ema_weights=*/true) uses them; variables without one (batch
  // norm's statistics) as they are.
  bool ema = false;
  // Variable name -> name in the file, in place of pytorch_name() for the variables it lists.
  std::map<std::string, std::string> names = {};
  // false: towerjit's own layouts (a dense kernel stays [in, out]), e.g. for JAX/flax.
  bool pytorch_layout = true;
  // Loading: a tensor of the file that no variable takes is an error (PyTorch's
  // load_state_dict(strict=True)); false ignores it.
  bool strict = true;
  std::map<std::string, std::string> metadata = {};  // saving: the file's "__metadata__"
};

// The rule above: "fc1/kernel" -> "fc1.weight".
std::string pytorch_name(const std::string& variable);

// The model's variables of `all` (the training state dropped, see above), with their EMA
// shadows' values in their place when `ema`. Errors (at `loc`): `ema` when no variable has a
// shadow (train with the trainer's `ema` option).
HostVariables model_variables(const HostVariables& all, bool ema, std::source_location loc);

// Writes the model's variables of `variables` (or of the trainer's) as a safetensors file,
// atomically, F32 (and I32 for integer variables). Errors (towerjit::Error at `loc`): an EMA
// request without shadows, two variables mapped to one name, a file that cannot be written.
void save_safetensors(const HostVariables& variables, const std::string& path, const SafetensorsOptions& options = {},
                      std::source_location loc = std::source_location::current());
void save_safetensors(TowerTrainer& trainer, const std::string& path, const SafetensorsOptions& options = {},
                      std::source_location loc = std::source_location::current());

// The values of the model's variables of `like` (names, shapes and dtypes; e.g.
// predictor.needed() or trainer.variables()) from a safetensors file, mapped back from their
// file names and layouts. Errors (at `loc`): the file's own (safetensors_format.h), a variable
// the file lacks (naming both names), a tensor of another shape (naming both shapes and the
// layout rule), a float tensor for an integer variable or the reverse, and with `strict` a
// tensor no variable takes.
HostVariables load_safetensors(const std::string& path, const HostVariables& like,
                               const SafetensorsOptions& options = {},
                               std::source_location loc = std::source_location::current());
// The same into a trainer: its model variables take the file's values, and so do their EMA
// shadows where it keeps them (a run that starts from these weights); the optimiser's slots
// and the step stay as they are.
void load_safetensors(TowerTrainer& trainer, const std::string& path, const SafetensorsOptions& options = {},
                      std::source_location loc = std::source_location::current());

}  // namespace towerjit
