// export_onnx (runtime/interop/onnx_export.h): the file read back with ONNX's own schema, and
// the mistakes it names. ONNX Runtime's run of the files is tests/onnx/onnx_runtime_check.sh.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "../runtime/tower_test_model.h"
#include "towerjit.h"
#ifdef TOWERJIT_ONNX_SCHEMA
#include "onnx/onnx.pb.h"
#endif

namespace tj = towerjit;
using tj::kBatch;
using Catch::Matchers::Contains;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("towerjit-onnx-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

// A small resnet-like model: conv + batch norm + relu + pool, dropout, dense. Every op the
// examples' models use.
tj::Tensor small_model(tj::Tensor x) {
  auto h = tj::reshape(x, {kBatch, 1, 6, 6});
  h = tj::relu(tj::batch_norm(tj::conv2d(h, 4, 3, "conv", {.pad = 1, .use_bias = false}), "bn"));
  h = tj::max_pool2d(h) + tj::avg_pool2d(h);
  h = tj::dropout(tj::reshape(h, {kBatch, 36}), 0.5);
  return tj::dense(tj::relu(tj::dense(h, 8, "fc1")), 3, "logits");
}

struct Trained {
  tj::Graph graph;
  std::unique_ptr<tj::TowerTrainer> trainer;
};

std::unique_ptr<Trained> trained(bool with_logits, bool ema = false) {
  auto t = std::make_unique<Trained>();
  tj::GraphScope use(t->graph);
  auto x = tj::input("x", {kBatch, 36});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto logits = small_model(x);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  std::optional<tj::ExponentialMovingAverage> average;
  if (ema) average = tj::ExponentialMovingAverage{.decay = 0.5};
  t->trainer = std::make_unique<tj::TowerTrainer>(t->graph, loss, tj::Towers({tj::cpu(0)}), tj::sgd(0.1),
                                                  tj::TowerTrainerOptions{.ema = average,
                                                                          .logits = with_logits ? logits : tj::Tensor{}});
  tj::HostFeeds batch;
  batch["x"] = tj::HostTensor(tj::Shape{7, 36});
  batch["labels"] = tj::HostTensor(tj::Shape{7}, tj::DType::i32);
  for (int64_t i = 0; i < 7 * 36; ++i) batch["x"].f32[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.4f;
  for (int64_t i = 0; i < 7; ++i) batch["labels"].i32[i] = static_cast<int32_t>(i % 3);
  t->trainer->step(batch);
  return t;
}

}  // namespace

#ifdef TOWERJIT_ONNX_SCHEMA
TEST_CASE("onnx export: the file holds the inference graph, opset 17, a dynamic batch and the trained variables", "[onnx]") {
  auto t = trained(true);
  const std::string path = temp_path("model.onnx");
  tj::export_onnx(*t->trainer, path);
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  onnx::ModelProto model;
  REQUIRE(model.ParseFromString(bytes));
  CHECK(model.ir_version() == 8);
  REQUIRE(model.opset_import_size() == 1);
  CHECK(model.opset_import(0).version() == 17);
  const onnx::GraphProto& g = model.graph();
  // One input (the labels are not read by the logits), its batch the dynamic axis.
  REQUIRE(g.input_size() == 1);
  CHECK(g.input(0).name() == "x");
  const auto& dims = g.input(0).type().tensor_type().shape().dim();
  REQUIRE(dims.size() == 2);
  CHECK(dims[0].dim_param() == "batch");
  CHECK(dims[1].dim_value() == 36);
  REQUIRE(g.output_size() == 1);
  CHECK(g.output(0).name() == "logits");
  CHECK(g.output(0).type().tensor_type().shape().dim(0).dim_param() == "batch");
  // Inference: no random numbers (dropout gone), batch norm reads its moving statistics.
  std::multiset<std::string> ops;
  for (const auto& n : g.node()) ops.insert(n.op_type());
  CHECK(ops.count("Conv") == 1);
  CHECK(ops.count("MaxPool") == 1);
  CHECK(ops.count("AveragePool") == 1);
  CHECK(ops.count("MatMul") == 2);
  CHECK(ops.count("Relu") == 2);
  CHECK(ops.count("ReduceMean") == 0);  // no batch statistics
  CHECK(ops.count("BatchNormalization") == 1);  // its arithmetic recognised, on the moving ones
  CHECK(ops.count("Sqrt") == 0);
  for (const auto& op : ops) CHECK_THAT(op, !Contains("Random"));
  // The variables the model reads, with their trained values; no optimiser slot, no gradient.
  std::map<std::string, const onnx::TensorProto*> init;
  for (const auto& i : g.initializer()) init[i.name()] = &i;
  for (const char* name : {"conv/kernel", "bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance",
                           "fc1/kernel", "fc1/bias", "logits/kernel", "logits/bias"}) {
    INFO(name);
    REQUIRE(init.count(name) == 1);
    const tj::HostTensor& want = t->trainer->variables().at(name);
    const onnx::TensorProto& got = *init.at(name);
    CHECK(got.data_type() == onnx::TensorProto_DataType_FLOAT);
    CHECK(std::vector<int64_t>(got.dims().begin(), got.dims().end()) == want.shape.dims());
    REQUIRE(got.raw_data().size() == want.f32.size() * 4);
    CHECK(std::memcmp(got.raw_data().data(), want.f32.data(), got.raw_data().size()) == 0);
  }
  // The moving statistics moved in the step, so the file's are the trained ones, not the first.
  CHECK(t->trainer->variables().at("bn/moving_mean").f32[0] != 0);
  // Each node says which line of the model built it.
  CHECK_THAT(g.node(0).doc_string(), Contains("tests/onnx/test_onnx_export.cpp:"));
}

TEST_CASE("onnx export: EMA weights put the shadows in place of the variables", "[onnx]") {
  auto t = trained(true, /*ema=*/true);
  const std::string path = temp_path("ema.onnx");
  tj::export_onnx(*t->trainer, path, {.ema_weights = true});
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  onnx::ModelProto model;
  REQUIRE(model.ParseFromString(bytes));
  const tj::HostTensor& shadow = t->trainer->variables().at("fc1/kernel/ema");
  const tj::HostTensor& trained_value = t->trainer->variables().at("fc1/kernel");
  REQUIRE(shadow.f32 != trained_value.f32);
  bool found = false;
  for (const auto& i : model.graph().initializer()) {
    if (i.name() != "fc1/kernel") continue;
    found = true;
    CHECK(std::memcmp(i.raw_data().data(), shadow.f32.data(), shadow.f32.size() * 4) == 0);
  }
  CHECK(found);
}
#endif

TEST_CASE("onnx export: an op with no ONNX form is named with the line that built it", "[onnx][errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 4});
  tj::Tensor noisy;
  const int line = __LINE__ + 3;
  {
    tj::VariableScope scope("noise");
    noisy = x * tj::random_uniform_like(x, 7);  // random numbers in inference too
  }
  tj::HostVariables none;
  CHECK_THROWS_WITH(tj::export_onnx(g, noisy, none, temp_path("noise.onnx")),
                    Contains("export_onnx: random_uniform (in \"noise\") has no ONNX form: ONNX's random ops draw "
                             "other numbers than towerjit's Philox streams") &&
                        Contains("tests/onnx/test_onnx_export.cpp:" + std::to_string(line)));
}

TEST_CASE("onnx export: a trainer without logits, EMA weights without EMA, an unwritable path, missing values", "[onnx][errors]") {
  auto without = trained(false);
  CHECK_THROWS_WITH(tj::export_onnx(*without->trainer, temp_path("x.onnx")),
                    Contains("export_onnx: the trainer was built without the model's output; pass it as "
                             "TowerTrainerOptions::logits"));
  auto t = trained(true);
  CHECK_THROWS_WITH(tj::export_onnx(*t->trainer, temp_path("x.onnx"), {.ema_weights = true}),
                    Contains("export_onnx with EMA weights: the model keeps no moving averages"));
  if (tj::detail::onnx_schema_built()) {
    const std::string dir = temp_path("no-such-dir");
    CHECK_THROWS_WITH(tj::export_onnx(*t->trainer, dir + "/model.onnx"),
                      Contains("export_onnx: cannot write \"" + dir + "/model.onnx\": No such file or directory; "
                               "give a path in a directory you can write to"));
    tj::HostVariables partial = t->trainer->variables();
    partial.erase("fc1/bias");
    const tj::Tensor logits = t->trainer->inference_logits();
    CHECK_THROWS_WITH(tj::export_onnx(logits.graph(), logits, partial, temp_path("x.onnx")),
                      Contains("export_onnx: no value for the variable \"fc1/bias\" that the model reads"));
    tj::HostVariables reshaped = t->trainer->variables();
    reshaped.at("fc1/bias") = tj::HostTensor(tj::Shape{9});
    CHECK_THROWS_WITH(tj::export_onnx(logits.graph(), logits, reshaped, temp_path("x.onnx")),
                      Contains("export_onnx: the variable \"fc1/bias\" is f32[9] in the values given but f32[8] in "
                               "the model; pass the values of this model's variables"));
    CHECK_THROWS_WITH(tj::export_onnx(*t->trainer, ""),
                      Contains("export_onnx: the path is empty; give a file, e.g. \"model.onnx\""));
  }
}

TEST_CASE("onnx export: a build without ONNX's schema says what to install", "[onnx][errors]") {
  CHECK_THROWS_WITH(tj::detail::onnx_schema_missing(tj::Loc::current()),
                    Contains("export_onnx: this towerjit was built without ONNX's schema (onnx.proto)") &&
                        Contains("install Debian's libonnx-dev"));
#ifdef TOWERJIT_ONNX_SCHEMA
  CHECK(tj::detail::onnx_schema_built());
#else
  CHECK_FALSE(tj::detail::onnx_schema_built());
#endif
}
