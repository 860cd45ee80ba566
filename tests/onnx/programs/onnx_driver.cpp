// The towerjit side of the ONNX Runtime check (tests/onnx/onnx_runtime_check.sh):
//
//   onnx_driver <mlp|cnn|resnet> <out dir> [reference examples]
//     trains the example's model a few steps on Fashion-MNIST (one CPU tower), exports it with
//     tj::export_onnx(trainer, ...), and writes beside it the test set's images, the logits of
//     a tj::Predictor loaded with the trained variables (every test example), and for the first
//     examples the reference interpreter's exact logits and their f32 error bounds;
//   onnx_driver ops <out dir>
//     the same for a model that uses every op the exporter maps, on random inputs, exported
//     with the export_onnx overload that takes a graph and values.
//
// Files (raw little-endian): input.f32 [n, ...], predictor.f32 [n, classes] (models only),
// exact.f64 and bound.f64 [k, classes]; meta.json says n, k, classes, the input's name and
// shape. tests/onnx/onnx_runtime_check.py reads them.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "../../../examples/models.h"
#include "jit/passes/select_phase.h"
#include "jit/reference/interpreter.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;

namespace {

void write_raw(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) throw tj::Error("cannot write " + path);
}

// The exact logits and bounds of `output` (a graph selected for inference) for `feeds`.
void write_reference(const std::string& dir, tj::Tensor output, const tj::reference::Feeds& feeds,
                     const tj::HostVariables& values) {
  tj::reference::Variables vars;
  for (const auto& [name, t] : values) {
    tj::reference::Array a(t.shape, t.dtype);
    for (int64_t i = 0; i < t.size(); ++i) a[i] = t.dtype == tj::DType::f32 ? t.f32[i] : t.i32[i];
    vars[name] = a;
  }
  tj::reference::ErrorBounds bounds;
  const auto exact = tj::reference::run(output.graph(), {output}, feeds, vars, {.bounds = &bounds});
  write_raw(dir + "/exact.f64", exact[0].data.data(), exact[0].data.size() * 8);
  write_raw(dir + "/bound.f64", bounds.fetches[0].data.data(), bounds.fetches[0].data.size() * 8);
}

void write_meta(const std::string& dir, int64_t n, int64_t k, int64_t classes, const std::string& input,
                const tj::Shape& shape) {
  std::ofstream f(dir + "/meta.json");
  f << "{\"n\": " << n << ", \"k\": " << k << ", \"classes\": " << classes << ", \"input\": \"" << input
    << "\", \"shape\": [";
  for (int i = 1; i < shape.rank(); ++i) f << (i > 1 ? ", " : "") << shape[i];
  f << "]}\n";
}

int run_model(const std::string& model, const std::string& dir, int64_t k) {
  const auto train = tj::data::load_mnist_format("train");
  const auto test = tj::data::load_mnist_format("test");
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {kBatch, 784});
  auto label = tj::input("label", {kBatch}, tj::DType::i32);
  auto logits = model == "cnn" ? examples::cnn(image) : model == "resnet" ? examples::resnet(image)
                                                                         : examples::mlp(image, 64);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
  tj::TowerTrainer trainer(graph, loss, tj::Towers({tj::cpu(0)}), tj::adam(0.001), {.seed = 3, .logits = logits});
  // A few steps: enough to move every weight and the moving statistics off their first values.
  const int64_t batch = 64;
  for (int64_t s = 0; s < 4; ++s) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < batch; ++i) rows.push_back(s * batch + i);
    tj::HostTensor images, labels;
    tj::data::gather_batch(train, rows, images, labels);
    trainer.step({{"image", images}, {"label", labels}});
  }
  tj::export_onnx(trainer, dir + "/model.onnx");

  tj::Predictor predictor(graph, logits, {.device = tj::cpu(0)});
  predictor.load(trainer.variables());
  const tj::HostTensor predicted = predictor.predict({{"image", test.images}});
  write_raw(dir + "/input.f32", test.images.f32.data(), test.images.f32.size() * 4);
  write_raw(dir + "/predictor.f32", predicted.f32.data(), predicted.f32.size() * 4);

  tj::reference::Array first(tj::Shape{k, 784});
  for (int64_t i = 0; i < k * 784; ++i) first[i] = test.images.f32[i];
  write_reference(dir, trainer.inference_logits(), {{"image", first}}, trainer.variables());
  write_meta(dir, test.size(), k, 10, "image", test.images.shape);
  return 0;
}

// Every op the exporter maps, on x [B, 2, 6, 6]; each result flattened into one [B, F] output.
tj::Tensor every_op(tj::Tensor x) {
  std::vector<tj::Tensor> parts;
  auto flat = [&](tj::Tensor t) {
    int64_t f = 1;
    for (int i = 1; i < t.rank(); ++i) f *= t.shape()[i];
    parts.push_back(tj::reshape(t, {kBatch, f}));
  };
  auto c = tj::conv2d(x, 3, 3, "conv", {.pad = 1});                     // [B,3,6,6]
  auto s = tj::conv2d(x, 2, 2, "strided", {.stride = 2, .use_bias = false});  // [B,2,3,3]
  flat(s);
  flat(tj::batch_norm(c, "bn"));                                               // BatchNormalization
  flat(tj::batch_norm(tj::transpose(c, {0, 2, 3, 1}), "bn_last", {.axis = 3}));  // its arithmetic
  flat(tj::batch_norm(tj::dense(tj::reshape(x, {kBatch, 72}), 5, "fc_in"), "bn_dense"));  // [N, C]
  flat(tj::dropout(tj::relu(c), 0.5));
  flat(tj::max_pool2d(c, {.kernel = 3, .stride = 2, .pad = 1}));
  flat(tj::avg_pool2d(c, {.kernel = 2, .stride = 2, .pad = 1}));
  flat(tj::sigmoid(c) + tj::tanh(c) - tj::erf(c) * tj::gelu(c) / (tj::softplus(c) + 1));
  flat(tj::sqrt(tj::abs(c) + 1) + tj::rsqrt(tj::abs(c) + 1) + tj::log(tj::exp(-tj::abs(c)) + 1) + tj::sign(c));
  flat(tj::maximum(c, 0.25) - tj::minimum(c, -0.25) + tj::pow(tj::abs(c) + 1, 1.5));
  flat(tj::where(c > 0, c, 0.5 * c) + (c < 0.1) + (c <= 0.2) + (c >= -0.1) + tj::equal(c, c) +
       tj::not_equal(c, 0.0) + tj::stop_gradient(c));
  flat(tj::sum(c, {2, 3}) + tj::mean(c, {2, 3}) + tj::max(c, {2, 3}) + tj::logsumexp(c, {2, 3}));
  flat(tj::logsumexp(c, {1}, true) - tj::sum(c, {1, 3}, true) + tj::mean(c, {1}, true));
  flat(tj::softmax(tj::reshape(c, {kBatch, 108})));
  flat(tj::layer_norm(c, "ln") + tj::rms_norm(c, "rms"));  // the fused ops, written out
  flat(tj::transpose(c, {0, 2, 3, 1}));
  flat(tj::slice(c, {0, 1, 1, 0}, {kBatch, 3, 5, 4}));
  flat(tj::pad(x, {0, 0, 1, 2}, {0, 1, 0, 1}));
  flat(tj::concat({c, x}, 1));
  flat(tj::broadcast_to(tj::sum(x, {1, 2, 3}, true), {kBatch, 2, 3, 1}) + tj::constant(0.5, {1, 2, 3, 1}));
  auto arg = tj::argmax(tj::reshape(c, {kBatch, 108}), 1);
  flat(tj::cast(arg, tj::DType::f32));
  flat(tj::one_hot(arg, 108));
  flat(tj::dense(tj::reshape(c, {kBatch, 108}), 5, "fc"));
  return tj::concat(parts, 1);
}

int run_ops(const std::string& dir) {
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto x = tj::input("x", {kBatch, 2, 6, 6});
  auto out = every_op(x);
  // Random weights, moving statistics off their first values, so no op sees only zeros and ones.
  tj::HostVariables values;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const auto& v : graph.variables()) {
    tj::HostTensor t(v.shape, v.dtype);
    for (float& e : t.f32) e = v.name.find("variance") != std::string::npos ? 0.5f + u(rng) * 0.4f : u(rng);
    values[v.name] = t;
  }
  tj::export_onnx(graph, out, values, dir + "/model.onnx");
  const int64_t n = 7;
  tj::HostTensor input(tj::Shape{n, 2, 6, 6});
  for (float& e : input.f32) e = u(rng) * 2;
  write_raw(dir + "/input.f32", input.f32.data(), input.f32.size() * 4);
  tj::Rewritten inference = tj::select_phase(graph, tj::Phase::inference);
  const tj::Tensor selected = tj::remap_tensors(inference, {out})[0];
  tj::reference::Array xa(input.shape);
  for (int64_t i = 0; i < input.size(); ++i) xa[i] = input.f32[i];
  write_reference(dir, selected, {{"x", xa}}, values);
  write_meta(dir, n, n, out.shape()[1], "x", input.shape);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: onnx_driver <mlp|cnn|resnet|ops> <out dir> [reference examples]\n");
    return 2;
  }
  try {
    const std::string what = argv[1];
    if (what == "ops") return run_ops(argv[2]);
    // The reference interpreter takes about half a second per resnet example on one core.
    return run_model(what, argv[2], argc > 3 ? std::stoll(argv[3]) : what == "resnet" ? 16 : 32);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    if (!tj::detail::onnx_schema_built()) {  // a build that could not find onnx.proto
      std::printf("SKIP: this towerjit was built without ONNX's schema (install libonnx-dev)\n");
      return 77;
    }
    return 1;
  }
}
