#include "runtime/interop/safetensors.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "dsl/error.h"
#include "runtime/data/whole_file.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/interop/safetensors_format.h"
#include "runtime/towers/tower_trainer.h"

namespace towerjit {
namespace {

bool is_training_state(const std::string& name, const HostVariables& all) {
  if (name == "global_step") return true;
  for (size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
    if (all.count(name.substr(0, slash))) return true;
  return false;
}

bool is_dense_kernel(const std::string& name, const HostTensor& t) {
  return t.shape.rank() == 2 && (name == "kernel" || name.ends_with("/kernel"));
}

HostTensor transposed(const HostTensor& t) {
  HostTensor out(Shape{t.shape[1], t.shape[0]}, t.dtype);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      if (t.dtype == DType::f32) out.f32[c * rows + r] = t.f32[r * cols + c];
      else out.i32[c * rows + r] = t.i32[r * cols + c];
    }
  return out;
}

std::string file_name(const std::string& variable, const SafetensorsOptions& options) {
  auto it = options.names.find(variable);
  return it != options.names.end() ? it->second : pytorch_name(variable);
}

bool transposes(const std::string& variable, const HostTensor& t, const SafetensorsOptions& options) {
  return options.pytorch_layout && is_dense_kernel(variable, t);
}

}  // namespace

std::string pytorch_name(const std::string& variable) {
  static const std::map<std::string, std::string> renamed = {{"kernel", "weight"},
                                                             {"gamma", "weight"},
                                                             {"beta", "bias"},
                                                             {"moving_mean", "running_mean"},
                                                             {"moving_variance", "running_var"}};
  const size_t slash = variable.rfind('/');
  const std::string scope = slash == std::string::npos ? "" : variable.substr(0, slash);
  std::string last = slash == std::string::npos ? variable : variable.substr(slash + 1);
  if (auto it = renamed.find(last); it != renamed.end()) last = it->second;
  std::string out = scope;
  for (char& c : out)
    if (c == '/') c = '.';
  return out.empty() ? last : out + "." + last;
}

HostVariables model_variables(const HostVariables& all, bool ema, std::source_location loc) {
  HostVariables out;
  bool shadowed = false;
  for (const auto& [name, t] : all) {
    if (is_training_state(name, all)) continue;
    auto shadow = ema ? all.find(name + "/ema") : all.end();
    shadowed = shadowed || shadow != all.end();
    out.emplace(name, shadow != all.end() ? shadow->second : t);
  }
  user_check(!ema || shadowed, loc)
      << "EMA weights were asked for, but no variable has an EMA shadow (\"<variable>/ema\"); train with the "
         "trainer's ema option (fashion_mnist --ema 0.999), or save without .ema";
  return out;
}

void save_safetensors(const HostVariables& variables, const std::string& path, const SafetensorsOptions& options,
                      std::source_location loc) {
  SafetensorsFile file{{}, options.metadata};
  std::map<std::string, std::string> owner;  // file name -> variable, to name a clash
  for (const auto& [name, t] : model_variables(variables, options.ema, loc)) {
    const std::string to = file_name(name, options);
    auto [it, fresh] = owner.emplace(to, name);
    user_check(fresh, loc) << "variables \"" << it->second << "\" and \"" << name << "\" would both be saved as \""
                           << to << "\"; give one another name in SafetensorsOptions::names";
    file.tensors.emplace(to, transposes(name, t, options) ? transposed(t) : t);
  }
  write_file_atomically(path, encode_safetensors(file, loc), loc);
}

void save_safetensors(TowerTrainer& trainer, const std::string& path, const SafetensorsOptions& options,
                      std::source_location loc) {
  save_safetensors(trainer.variables(), path, options, loc);
}

HostVariables load_safetensors(const std::string& path, const HostVariables& like, const SafetensorsOptions& options,
                               std::source_location loc) {
  const std::string bytes = data::read_whole_file(path, loc);
  SafetensorsFile file = decode_safetensors(bytes, path, loc);

  HostVariables out;
  std::set<std::string> taken;
  for (const auto& [name, want] : model_variables(like, false, loc)) {
    const std::string from = file_name(name, options);
    auto it = file.tensors.find(from);
    user_check(it != file.tensors.end(), loc)
        << "\"" << path << "\" has no tensor \"" << from << "\" for the variable \"" << name << "\" (" << file.tensors.size()
        << " tensors" << (file.tensors.empty() ? "" : ", the first \"" + file.tensors.begin()->first + "\"")
        << "); save it under that name, or map the name in SafetensorsOptions::names";
    const bool flip = transposes(name, want, options);
    HostTensor value = flip && it->second.shape.rank() == 2 ? transposed(it->second) : it->second;
    user_check(value.shape == want.shape, loc)
        << "tensor \"" << from << "\" of \"" << path << "\" is " << it->second.shape.str() << " but the variable \""
        << name << "\" is " << want.shape.str()
        << (flip ? ", which a PyTorch file holds transposed, as " + Shape{want.shape[1], want.shape[0]}.str() +
                       " (nn.Linear's [out, in])"
                 : std::string())
        << "; the file holds another model";
    user_check(value.dtype == want.dtype, loc)
        << "tensor \"" << from << "\" of \"" << path << "\" holds " << (value.dtype == DType::f32 ? "floats" : "integers")
        << " but the variable \"" << name << "\" is " << dtype_name(want.dtype) << "; save it with that type";
    taken.insert(from);
    out.emplace(name, std::move(value));
  }
  for (const auto& [from, t] : file.tensors)
    user_check(!options.strict || taken.count(from), loc)
        << "\"" << path << "\" holds the tensor \"" << from << "\", which no variable of the model takes (" << out.size()
        << " variables); check the model and the names, or load with .strict = false to ignore it";
  return out;
}

void load_safetensors(TowerTrainer& trainer, const std::string& path, const SafetensorsOptions& options,
                      std::source_location loc) {
  HostVariables values = trainer.variables();
  for (auto& [name, t] : load_safetensors(path, values, options, loc)) {
    if (auto shadow = values.find(name + "/ema"); shadow != values.end()) shadow->second = t;
    values[name] = std::move(t);
  }
  trainer.restore(values, trainer.applies(), loc);
}

}  // namespace towerjit
