// The towerjit side of the round trips with PyTorch and NumPy (tests/interop/roundtrip.py):
//
//   interop_tool export <mlp|cnn|resnet> DIR
//     trains the example model 3 steps on random data with Adam and EMA, then writes
//     weights.safetensors and weights_ema.safetensors (save_safetensors, EMA off and on),
//     x.npy (7 images), logits.npy and logits_ema.npy (Predictor's logits of x with each set of
//     weights loaded back from its file), bound.npy, bound_ema.npy (the reference
//     interpreter's error bound of each f32 logit: how far from the exact value it may lie) and
//     exact.json, exact_ema.json (the interpreter's logits, computed in double).
//   interop_tool first-step <mlp|cnn> DIR
//     loads DIR/init.safetensors (weights written by PyTorch or NumPy) into a trainer, takes one
//     step on DIR/batch.npz (x, y) and prints {"loss": ..., "bound": ...}: the step's loss and
//     its error bound.
//   interop_tool read-npz FILE DIR
//     writes every array of FILE as DIR/<name>.npy in towerjit's dtypes (f32 or i32), to
//     compare with what numpy reads.
#include <cstdio>
#include <filesystem>
#include <string>

#include "examples/models.h"
#include "jit/passes/select_phase.h"
#include "jit/reference/interpreter.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace fs = std::filesystem;

namespace {

tj::Tensor model(const std::string& name, tj::Tensor image) {
  if (name == "cnn") return examples::cnn(image);
  if (name == "resnet") return examples::resnet(image);
  return examples::mlp(image, 32);
}

tj::HostTensor random_images(int64_t n, uint64_t seed) {
  tj::HostTensor x(tj::Shape{n, 784});
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& v : x.f32) s = s * 6364136223846793005ull + 1442695040888963407ull, v = static_cast<float>(s >> 40) / (1 << 24);
  return x;
}

tj::reference::Array to_array(const tj::HostTensor& t) {
  tj::reference::Array a(t.shape, t.dtype);
  for (int64_t i = 0; i < t.size(); ++i) a[i] = t.dtype == tj::DType::f32 ? t.f32[i] : t.i32[i];
  return a;
}

tj::HostTensor to_host(const tj::reference::Array& a) {
  tj::HostTensor t(a.shape);
  // The bound rounded up, so that storing it in f32 never tightens it.
  for (int64_t i = 0; i < a.size(); ++i) t.f32[i] = static_cast<float>(a[i] * (1 + 1e-6));
  return t;
}

// The reference interpreter's logits (exact, in double) with `values` loaded, on the graph
// selected for inference, written as JSON to `path`; returns their error bounds for an f32
// result.
tj::HostTensor exact_logits(const tj::Graph& graph, tj::Tensor logits, const tj::HostVariables& values,
                            const tj::HostTensor& x, const fs::path& path) {
  tj::Rewritten inference = tj::select_phase(graph, tj::Phase::inference);
  tj::reference::Variables vars;
  for (const auto& [name, t] : values) vars.emplace(name, to_array(t));
  tj::reference::ErrorBounds bounds;
  const auto exact = tj::reference::run(inference.graph, tj::remap_tensors(inference, {logits}),
                                        {{"image", to_array(x)}}, vars, {.bounds = &bounds});
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw tj::Error("cannot write " + path.string());
  for (int64_t i = 0; i < exact.at(0).size(); ++i) std::fprintf(f, "%s%.17g", i ? ", " : "[", exact.at(0)[i]);
  std::fprintf(f, "]\n");
  std::fclose(f);
  return to_host(bounds.fetches.at(0));
}

int export_weights(const std::string& name, const fs::path& dir) {
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto logits = model(name, image);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
  tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0)}, tj::adam(0.01),
                           {.seed = 5, .ema = tj::ExponentialMovingAverage{.decay = 0.5}, .logits = logits});
  for (int step = 0; step < 3; ++step) {
    tj::HostTensor y(tj::Shape{16}, tj::DType::i32);
    for (int i = 0; i < 16; ++i) y.i32[i] = (i * 7 + step) % 10;
    trainer.step({{"image", random_images(16, step + 1)}, {"label", y}});
  }
  const tj::HostTensor x = random_images(7, 99);
  tj::data::save_npy((dir / "x.npy").string(), x);

  tj::Graph model_only;  // the model alone, as a user serving it builds it
  tj::GraphScope use_model(model_only);
  auto served = model(name, tj::input("image", {tj::kBatch, 784}));
  tj::Predictor predictor(model_only, served);
  for (const bool ema : {false, true}) {
    const std::string suffix = ema ? "_ema" : "";
    const std::string file = (dir / ("weights" + suffix + ".safetensors")).string();
    tj::save_safetensors(trainer, file, {.ema = ema});
    const tj::HostVariables values = tj::load_safetensors(file, predictor.needed());
    predictor.load(values);
    tj::data::save_npy((dir / ("logits" + suffix + ".npy")).string(), predictor.predict({{"image", x}}));
    tj::data::save_npy((dir / ("bound" + suffix + ".npy")).string(),
                       exact_logits(model_only, served, values, x, dir / ("exact" + suffix + ".json")));
  }
  return 0;
}

int first_step(const std::string& name, const fs::path& dir) {
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto loss = tj::mean(tj::softmax_cross_entropy(model(name, image), label));
  tj::TowerTrainer trainer(graph, loss, tj::Towers{tj::cpu(0)}, tj::sgd(0.1));
  tj::load_safetensors(trainer, (dir / "init.safetensors").string());
  const tj::HostFeeds batch = tj::data::load_npz((dir / "batch.npz").string());
  const tj::HostFeeds feeds = {{"image", batch.at("x")}, {"label", batch.at("y")}};

  tj::reference::Variables vars;
  for (const auto& [n, t] : trainer.variables()) vars.emplace(n, to_array(t));
  tj::reference::ErrorBounds bounds;
  tj::reference::run(graph, {loss}, {{"image", to_array(feeds.at("image"))}, {"label", to_array(feeds.at("label"))}},
                     vars, {.bounds = &bounds});
  const double got = trainer.step(feeds).loss;
  std::printf("{\"loss\": %.17g, \"bound\": %.17g}\n", got, bounds.fetches.at(0)[0] * (1 + 1e-6));
  return 0;
}

int read_npz(const std::string& file, const fs::path& dir) {
  for (const auto& [name, t] : tj::data::load_npz(file)) tj::data::save_npy((dir / (name + ".npy")).string(), t);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: interop_tool export <mlp|cnn|resnet> DIR | first-step <mlp|cnn> DIR | read-npz FILE DIR";
  if (argc != 4) return std::fprintf(stderr, "%s\n", usage.c_str()), 2;
  const std::string command = argv[1];
  try {
    if (command == "export") return export_weights(argv[2], argv[3]);
    if (command == "first-step") return first_step(argv[2], argv[3]);
    if (command == "read-npz") return read_npz(argv[2], argv[3]);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return std::fprintf(stderr, "%s\n", usage.c_str()), 2;
}
