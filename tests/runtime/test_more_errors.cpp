// More of the runtime's user mistakes, each quoted in docs/errors.md: the trainer, predict and
// evaluate, checkpoints, datasets and metrics files. Every message says what is wrong, names
// the line of this file that made the mistake, and what to do.
#include <catch2/catch.hpp>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <zlib.h>

#include "runtime/checkpoint/checkpoint_format.h"
#include "jit/cost/gpu_specs.h"
#include "runtime/cost/recorded_step.h"
#include "runtime/cpu/cpu_program.h"
#include "tests/jit/cpu_test_env.h"
#include "tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using Catch::Contains;
using tj::kBatch;
using tj::testing::batch_of;
using tj::testing::small_mlp_loss;

namespace {

// Where a call on line `line` of this file is reported; pass __LINE__ on the call's own line.
std::string here(int line) { return "tests/runtime/test_more_errors.cpp:" + std::to_string(line); }

using towerjit::test::TempDir;  // tests/jit/cpu_test_env.h

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The small MLP of tower_test_model.h with its logits kept, so predict() and evaluate() work.
struct Model {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  std::unique_ptr<tj::TowerTrainer> trainer;
};

Model model_with_logits(tj::Towers towers) {
  Model m;
  tj::GraphScope use(*m.graph);
  auto x = tj::input("x", {kBatch, 5});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto logits = tj::dense(tj::relu(tj::dense(x, 4, "fc1")), 3, "fc2");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  m.trainer = std::make_unique<tj::TowerTrainer>(*m.graph, loss, std::move(towers), tj::sgd(0.1),
                                                 tj::TowerTrainerOptions{.logits = logits});
  return m;
}

// `bytes` (a checkpoint's) with the first `from` replaced by `to` and the size and CRC-32 set
// right again: damage only the reader's checks of the contents can find.
std::string resealed(std::string bytes, const std::string& from, const std::string& to) {
  bytes.replace(bytes.find(from), from.size(), to);
  for (int i = 0; i < 8; ++i) bytes[8 + i] = static_cast<char>(static_cast<uint64_t>(bytes.size()) >> (8 * i));
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4));
  for (int i = 0; i < 4; ++i) bytes[bytes.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
  return bytes;
}

std::string le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}
std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

}  // namespace

TEST_CASE("step: no inputs, or inputs of different batch sizes", "[towers][runtime][errors]") {
  tj::Graph g;
  const tj::Tensor loss = small_mlp_loss(g);
  tj::TowerTrainer trainer(g, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  REQUIRE_THROWS_WITH(trainer.step({}), Contains("step: no inputs fed; feed the model's inputs with the batch") && Contains(here(__LINE__)));
  tj::HostFeeds uneven = batch_of(8, 1);
  uneven["labels"] = batch_of(6, 1).at("labels");
  REQUIRE_THROWS_WITH(trainer.step(uneven), Contains("step: input \"x\" has 8 examples but \"labels\" has 6; feed every input the same batch") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(trainer.step({}, {.accumulate = 2}), Contains("step: no batched inputs fed") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(trainer.step(uneven, {.accumulate = 2}), Contains("step: input \"x\" has 8 examples but \"labels\" has 6") && Contains(here(__LINE__)));
}

TEST_CASE("run_async of sync towers, fit accumulating over async towers", "[towers][runtime][errors]") {
  tj::Graph g;
  const tj::Tensor loss = small_mlp_loss(g);
  tj::TowerTrainer sync(g, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  REQUIRE_THROWS_WITH(sync.run_async(1, [](int, int) { return batch_of(4, 1); }), Contains("run_async: the towers are declared") && Contains("declare them with .reduce(AsyncApply{}) to run them free") && Contains(here(__LINE__)));

  tj::Graph h;
  const tj::Tensor async_loss = small_mlp_loss(h);
  tj::TowerTrainer async(h, async_loss, tj::Towers{tj::cpu(0), tj::cpu(1)}.reduce(tj::AsyncApply{}), tj::sgd(0.1));
  const tj::data::TensorDataset data(batch_of(32, 2), "labels");
  tj::data::BatchPipeline pipeline(data, {.batch = 8});
  REQUIRE_THROWS_WITH(tj::fit(async, pipeline, {.accumulate = 2, .stop_on_signals = false}), Contains("fit: accumulate 2 needs sync towers; async towers apply each gradient as it comes") && Contains(here(__LINE__)));
}

TEST_CASE("a trainer given logits of another graph", "[towers][runtime][errors]") {
  tj::Graph other;
  tj::Tensor stray;
  {
    tj::GraphScope use(other);
    stray = tj::input("x", {kBatch, 3});
  }
  tj::Graph g;
  const tj::Tensor loss = small_mlp_loss(g);
  REQUIRE_THROWS_WITH(tj::TowerTrainer(g, loss, tj::Towers{tj::cpu(0)}, tj::sgd(0.1), {.logits = stray}), Contains("TowerTrainerOptions::logits belongs to another graph; pass the model's output tensor") && Contains(here(__LINE__)));
}

TEST_CASE("predict: no inputs, no examples, a scalar input, no logits", "[towers][runtime][errors]") {
  Model m = model_with_logits(tj::Towers{tj::cpu(0), tj::cpu(1)});
  REQUIRE_THROWS_WITH(m.trainer->predict({}), Contains("predict: no batched inputs fed; feed the model's inputs") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(m.trainer->predict({{"x", tj::HostTensor(tj::Shape{0, 5})}}), Contains("predict: no examples fed") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(m.trainer->predict({{"x", batch_of(4, 1).at("x")}, {"z", tj::HostTensor(tj::Shape{})}}), Contains("input \"z\" is a scalar; every input fed to the towers needs the batch as its first dimension") && Contains(here(__LINE__)));

  tj::Graph g;
  const tj::Tensor loss = small_mlp_loss(g);
  tj::TowerTrainer without(g, loss, tj::Towers{tj::cpu(0)}, tj::sgd(0.1));
  REQUIRE_THROWS_WITH(without.predict(batch_of(4, 1)), Contains("predict: the trainer was built without the model's output; pass it as TowerTrainerOptions{.logits = logits}") && Contains(here(__LINE__)));
}

TEST_CASE("evaluate: labels that are not class indices, or that do not fit the inputs", "[towers][runtime][errors]") {
  Model m = model_with_logits(tj::Towers{tj::cpu(0), tj::cpu(1)});
  const tj::HostFeeds batch = batch_of(8, 1);
  const tj::HostFeeds inputs = {{"x", batch.at("x")}};
  REQUIRE_THROWS_WITH(m.trainer->evaluate(inputs, tj::HostTensor(tj::Shape{8})), Contains("evaluate: labels must be i32 [examples] (class indices), got f32[8]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(m.trainer->evaluate(inputs, batch_of(6, 1).at("labels")), Contains("evaluate: input \"x\" has 8 examples but the labels have 6") && Contains("feed one label per example") && Contains(here(__LINE__)));
  tj::HostTensor labels = batch.at("labels");
  labels.i32[5] = 3;
  REQUIRE_THROWS_WITH(m.trainer->evaluate(inputs, labels), Contains("evaluate: label 3 of example 5 is outside [0, 3); labels are class indices of the logits") && Contains(here(__LINE__)));
}

TEST_CASE("a Predictor given logits of another graph", "[predictor][errors]") {
  tj::Graph other;
  tj::Tensor stray;
  {
    tj::GraphScope use(other);
    stray = tj::dense(tj::input("x", {kBatch, 3}), 2, "fc");
  }
  tj::Graph g;
  REQUIRE_THROWS_WITH(tj::Predictor(g, stray), Contains("Predictor: the logits tensor belongs to another graph; pass the model's output of this graph") && Contains(here(__LINE__)));
}

TEST_CASE("a checkpoint directory whose latest file names nothing", "[checkpoint][errors]") {
  TempDir dir;
  write_text(dir / "latest", "");
  REQUIRE_THROWS_WITH(tj::load_checkpoint(dir.str()), Contains("latest\" names no checkpoint (its first line should be ckpt-<step>.tjck)") && Contains(here(__LINE__)));
}

TEST_CASE("a checkpoint whose checksum is right but whose contents are not a checkpoint's", "[checkpoint][errors]") {
  TempDir dir;
  tj::Checkpoint c;
  c.variables = {{"w", tj::HostTensor(tj::Shape{2})}};
  const std::string good = tj::encode_checkpoint(c, {});
  const std::string w = le64(1) + "w" + le32(0) + le32(1) + le64(2);  // name, dtype f32, rank 1, [2]
  const std::string path = dir / "ckpt-0.tjck";
  write_text(path, resealed(good, w, le64(1) + "w" + le32(7) + le32(1) + le64(2)));
  REQUIRE_THROWS_WITH(tj::load_checkpoint(path), Contains("is malformed: variable \"w\" has dtype code 7 (0 is f32, 1 is i32, 2 is bf16, 3 is f16)") && Contains(here(__LINE__)));
  write_text(path, resealed(good, w, le64(1) + "w" + le32(0) + le32(1) + le64(static_cast<uint64_t>(-2))));
  REQUIRE_THROWS_WITH(tj::load_checkpoint(path), Contains("is malformed: variable \"w\" has a negative dimension -2") && Contains(here(__LINE__)));
  const std::string data = le32(0) + le32(0);  // the two zeros of w's data, then the checksum
  write_text(path, resealed(good, w + data, w + data + "junk"));
  REQUIRE_THROWS_WITH(tj::load_checkpoint(path), Contains("is malformed: 4 bytes follow the last variable") && Contains(here(__LINE__)));
  write_text(path, resealed(good, le64(1) + le64(1) + "w", le64(1) + le64(100) + "w"));  // a name longer than the file
  REQUIRE_THROWS_WITH(tj::load_checkpoint(path), Contains("is malformed: a variable's name at byte") && Contains("it was not written by towerjit's save_checkpoint") && Contains(here(__LINE__)));
}

TEST_CASE("a dataset asked for an array it lacks, an EvalHook of labels only", "[data][errors]") {
  const tj::data::TensorDataset data(batch_of(8, 1), "labels");
  REQUIRE_THROWS_WITH(data.array("image"), Contains("the dataset has no array \"image\"; its arrays are") && Contains(here(__LINE__)));
  const tj::data::TensorDataset labels_only(tj::HostFeeds{{"labels", batch_of(8, 1).at("labels")}}, "labels");
  std::FILE* sink = std::tmpfile();
  {
    tj::report::Progress progress(0, sink, false);
    REQUIRE_THROWS_WITH(tj::EvalHook(labels_only, progress, nullptr), Contains("EvalHook: the dataset holds only its label array \"labels\"; add the model's inputs") && Contains(here(__LINE__)));
  }
  std::fclose(sink);
}

TEST_CASE("augmentation of integer images or of a batch that is not images", "[data][errors]") {
  tj::HostTensor ints(tj::Shape{2, 16}, tj::DType::i32);
  REQUIRE_THROWS_WITH(tj::data::augment_images(ints, {.flip = true, .height = 4, .width = 4}, 0, 0), Contains("augment: feed \"image\" [2,16] is i32; augmentation works on f32 images") && Contains(here(__LINE__)));
  tj::HostTensor flat(tj::Shape{16});
  REQUIRE_THROWS_WITH(tj::data::augment_images(flat, {.flip = true}, 0, 0), Contains("augment: feed \"image\" [16] is not a batch of images; feed [n, C*H*W], [n, H, W] or [n, C, H, W]") && Contains(here(__LINE__)));
}

TEST_CASE("a metrics file with a record of no kind or a missing key", "[report][errors]") {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  write_text(path, "{\"kind\":\"lap\",\"step\":1}\n");
  REQUIRE_THROWS_WITH(tj::report::read_metrics(path), Contains("metrics.jsonl\" line 1 has no \"kind\" of \"step\" or \"eval\"") && Contains(here(__LINE__)));
  write_text(path, "{\"kind\":\"eval\",\"step\":1,\"epoch\":0,\"test_accuracy\":0.5}\n");
  REQUIRE_THROWS_WITH(tj::report::read_metrics(path), Contains("metrics.jsonl\" line 1 lacks \"test_loss\"") && Contains(here(__LINE__)));
}

TEST_CASE("evaluate with EMA weights of a trainer that keeps none", "[towers][runtime][errors]") {
  Model m = model_with_logits(tj::Towers{tj::cpu(0)});
  const tj::HostFeeds batch = batch_of(4, 1);
  REQUIRE_THROWS_WITH(m.trainer->evaluate({{"x", batch.at("x")}}, batch.at("labels"), true), Contains("evaluate with EMA weights: the trainer keeps no moving averages") && Contains("TowerTrainerOptions{.ema = ExponentialMovingAverage{...}}") && Contains(here(__LINE__)));
}

TEST_CASE("a CpuProgram not fed an input, fed the wrong shape, or run without its variables", "[runtime][errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const int x_line = __LINE__ + 1;
  auto x = tj::input("x", {kBatch, 3});
  const int w_line = __LINE__ + 1;
  auto w = tj::variable("w", {3, 2});
  tj::CpuProgram program(g, {tj::matmul(x, w)});
  tj::HostVariables values{{"w", tj::HostTensor(tj::Shape{3, 2})}}, none;
  REQUIRE_THROWS_WITH(program.run({}, values), Contains("input \"x\" [B,3] was not fed; pass it in the feeds") && Contains(here(x_line)));
  REQUIRE_THROWS_WITH(program.run({{"x", tj::HostTensor(tj::Shape{2, 4})}}, values), Contains("input \"x\" expects f32[B,3] but got f32[2,4]; feed a tensor of the declared shape and dtype") && Contains(here(x_line)));
  REQUIRE_THROWS_WITH(program.run({{"x", tj::HostTensor(tj::Shape{2, 3})}}, none), Contains("variable \"w\" f32[3,2] has no value; initialise it before running the program") && Contains(here(w_line)));
}

TEST_CASE("dump_cuda of a trainer into a path that is a file", "[dump][errors]") {
  TempDir dir;
  write_text(dir / "taken", "a file, not a directory\n");
  Model m = model_with_logits(tj::Towers{tj::cpu(0)});
  REQUIRE_THROWS_WITH(tj::dump_cuda(*m.trainer, dir / "taken"), Contains("dump_cuda: cannot make the directory") && Contains("pass a writable directory") && Contains(here(__LINE__)));
}

TEST_CASE("resuming from a checkpoint whose apply count is not a number", "[checkpoint][errors]") {
  TempDir dir;
  Model m = model_with_logits(tj::Towers{tj::cpu(0)});
  const std::string path = tj::save_checkpoint(dir.str(), {.step = 0, .variables = m.trainer->variables(), .metadata = {{"optimizer_applies", "many"}}});
  REQUIRE_THROWS_WITH(tj::resume_from(*m.trainer, path, {}), Contains("its optimizer_applies \"many\" is not a count of applies") && Contains("resume from an earlier checkpoint") && Contains(here(__LINE__)));
}

TEST_CASE("fit of no epochs, evaluate in chunks of 0", "[towers][runtime][errors]") {
  Model m = model_with_logits(tj::Towers{tj::cpu(0)});
  const tj::data::TensorDataset data(batch_of(16, 3), "labels");
  tj::data::BatchPipeline pipeline(data, {.batch = 8});
  REQUIRE_THROWS_WITH(tj::fit(*m.trainer, pipeline, {.epochs = 0}), Contains("fit: epochs 0 must be at least 1") && Contains(here(__LINE__)));
  const tj::HostFeeds batch = batch_of(4, 1);
  REQUIRE_THROWS_WITH(m.trainer->evaluate({{"x", batch.at("x")}}, batch.at("labels"), false, 0), Contains("evaluate: chunk 0 must be at least 1") && Contains(here(__LINE__)));
}

// Under the conv policy a convolution takes 16-bit operands, which only cuDNN runs on a GPU
// (the fallback's kernels are f32): without it, the first step says so and how to keep
// convolutions in f32. On the emulated GPU, set up as the cost model's steps are, so like them
// it needs a process of its own (as ctest runs it): untagged [half], whose other cases load the
// real NVRTC first when run together.
TEST_CASE("a 16-bit convolution on a GPU without cuDNN", "[errors]") {
  std::string dir = (fs::temp_directory_path() / "towerjit-half-conv-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  tj::cost::prepare_emulated_gpu(tj::cost::gpu_spec("h200"), dir);
  tj::test::ScopedEnv off("TOWERJIT_CUDNN", "off");
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 1, 5, 5});
  auto y = tj::conv2d(x, tj::variable("w", {2, 1, 3, 3}, {.init = tj::init::uniform(-1, 1)}), {.stride = 1, .pad = 1});
  tj::TowerTrainer trainer(g, tj::mean(y * y), tj::Towers{tj::gpu(0)}.precision({.conv_operands = tj::DType::bf16}),
                           tj::sgd(0.1));
  tj::HostTensor xs(tj::Shape{2, 1, 5, 5});
  CHECK_THROWS_WITH(trainer.step({{"x", xs}}),
                    Contains("the precision policy runs this convolution (conv2d) in bf16, which needs cuDNN") &&
                        Contains("TOWERJIT_CUDNN=off") && Contains(".conv_operands = DType::f32"));
  fs::remove_all(dir);
}
