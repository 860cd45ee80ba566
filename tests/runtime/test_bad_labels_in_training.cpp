// A label or id out of range while training names the input it came from, the step and the
// example's row in the global batch (not the kernel's flat index in one tower's slice), as the
// NaN error does.
#include <catch2/catch.hpp>

#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using Catch::Matchers::Contains;

namespace {

const std::string here = "tests/runtime/test_bad_labels_in_training.cpp:";

// "tokens" and "targets", i32 [n, 3], every value i % 4 < vocab: a tiny language-model batch.
tj::HostFeeds tokens_and_targets(int64_t n) {
  tj::HostTensor tokens({n, 3}, tj::DType::i32), targets({n, 3}, tj::DType::i32);
  for (int64_t i = 0; i < n * 3; ++i) tokens.i32[i] = targets.i32[i] = static_cast<int32_t>(i % 4);
  return {{"tokens", tokens}, {"targets", targets}};
}

}  // namespace

TEST_CASE("an out-of-range target in fit names the input and the step and the example", "[towers][errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::embedding(tj::input("tokens", {tj::kBatch, 3}, tj::DType::i32), 5, 4, "embed");  // [B,3,4]
  const int line = __LINE__ + 1;
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("targets", {tj::kBatch, 3}, tj::DType::i32)));
  tj::TowerTrainer trainer(g, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  tj::HostFeeds arrays = tokens_and_targets(16);
  arrays.at("targets").i32[11 * 3 + 2] = 7;  // row 11: batch 3 (rows 8 to 11), its example 3, on tower 1
  const tj::data::TensorDataset data(arrays);
  tj::data::BatchPipeline batches(data, {.batch = 4, .shuffle = false});
  CHECK_THROWS_WITH(tj::fit(trainer, batches, {.epochs = 1}),
                    Contains("input \"targets\" holds label 7 at example 3 (element 2 of it) of step 3's batch (epoch 1, "
                             "batch 3 of 4), out of range [0, 4) for one_hot; labels must be class indices below the "
                             "number of classes; the data is the cause: check the dataset and its transform") &&
                        Contains(here + std::to_string(line)));
}

TEST_CASE("an out-of-range id in step() names the input and the example in the whole batch", "[towers][errors]") {
  for (int towers : {1, 2}) {
    tj::Graph g;
    tj::GraphScope use(g);
    const int line = __LINE__ + 1;
    auto logits = tj::embedding(tj::input("tokens", {tj::kBatch, 3}, tj::DType::i32), 5, 4, "embed");
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("targets", {tj::kBatch, 3}, tj::DType::i32)));
    tj::TowerTrainer trainer(g, loss, towers == 1 ? tj::Towers{tj::cpu(0)} : tj::Towers{tj::cpu(0), tj::cpu(1)},
                             tj::sgd(0.1));
    tj::HostFeeds batch = tokens_and_targets(7);
    trainer.step(batch);
    batch.at("tokens").i32[5 * 3 + 1] = -2;  // example 5: tower 1's second with 2 towers (3 and 4)
    INFO(towers << " towers");
    CHECK_THROWS_WITH(trainer.step(batch),
                      Contains("input \"tokens\" holds index -2 at example 5 (element 1 of it) of step()'s batch "
                               "(apply 2), out of range [0, 5) for gather in \"embed\"; an index must name a row") &&
                          Contains(here + std::to_string(line)));
  }
}

TEST_CASE("a program run by itself says where in its indices the bad label sits", "[errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto hot = tj::one_hot(tj::reshape(tj::input("labels", {tj::kBatch, 2}, tj::DType::i32), {tj::kBatch, 2}), 3);
  tj::HostTensor labels(tj::Shape{2, 2}, tj::DType::i32);
  labels.i32 = {0, 1, 2, 3};
  tj::HostVariables vars;
  CHECK_THROWS_WITH(tj::CpuProgram(g, {hot}).run({{"labels", labels}}, vars),
                    Contains("one_hot: label 3 at flat index 3 of input \"labels\" is out of range [0, 3)"));
}

TEST_CASE("out-of-range labels computed from the inputs are named as computed", "[towers][errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::embedding(tj::input("tokens", {tj::kBatch, 3}, tj::DType::i32), 5, 4, "embed");  // [B,3,4]
  auto shifted = tj::input("targets", {tj::kBatch, 3}, tj::DType::i32) + 1;  // computed: no input's values
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, shifted));
  tj::TowerTrainer trainer(g, loss, tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.1));
  tj::HostFeeds batch = tokens_and_targets(4);  // targets 0..3: 3 + 1 is out of range
  CHECK_THROWS_WITH(trainer.step(batch), Contains("the computed labels of one_hot hold label 4 at example ") &&
                                             Contains(", out of range [0, 4) for one_hot; labels must be class indices") &&
                                             !Contains("the data is the cause"));
}
