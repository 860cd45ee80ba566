// Inputs stored in bf16 or f16, rounded on the pipeline's workers (runtime/data/cast_feeds.h):
// each batch's named array holds exactly half_bits of the f32 values; a model declaring the
// input bf16 trains on them as an f32 model that rounds its input in the graph (bitwise); and
// the mistakes are named.
#include <catch2/catch.hpp>
#include <random>

#include "dsl/half_float.h"
#include "towerjit.h"

namespace tj = towerjit;
using Catch::Contains;

namespace {

tj::data::TensorDataset dataset() {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0, 2);
  tj::HostTensor image(tj::Shape{11, 6}), label(tj::Shape{11}, tj::DType::i32);
  for (float& v : image.f32) v = n(rng);
  for (int i = 0; i < 11; ++i) label.i32[i] = i % 3;
  return tj::data::TensorDataset({{"image", image}, {"label", label}}, "label");
}

// A dense layer over the image read as `stored` (the bf16 model's input) or rounded in the
// graph from an f32 input (stored f32, rounded to bf16 and widened).
tj::Tensor loss_of(tj::Graph& graph, tj::DType stored) {
  tj::GraphScope use(graph);
  tj::Tensor image = tj::input("image", {tj::kBatch, 6}, stored);
  if (stored == tj::DType::f32) image = tj::cast(image, tj::DType::bf16);
  auto logits = tj::dense(tj::cast(image, tj::DType::f32), 3, "fc");
  return tj::mean(tj::softmax_cross_entropy(logits, tj::input("label", {tj::kBatch}, tj::DType::i32)));
}

}  // namespace

TEST_CASE("cast_feeds rounds a batch's array to bf16 or f16 on the pipeline's workers", "[pipeline][half]") {
  const tj::data::TensorDataset data = dataset();
  for (const tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    tj::data::BatchPipeline plain(data, {.batch = 4, .seed = 5});
    tj::data::BatchPipeline cast(data, {.batch = 4, .seed = 5, .transform = tj::data::cast_feeds({{"image", t}})});
    for (int b = 0; b < 3; ++b) {
      const tj::data::Batch want = plain.next(), got = cast.next();
      const tj::HostTensor& f = want.feeds.at("image");
      const tj::HostTensor& h = got.feeds.at("image");
      REQUIRE(h.dtype == t);
      REQUIRE(h.shape == f.shape);
      for (int64_t i = 0; i < f.size(); ++i) CHECK(h.b16[i] == tj::half_bits(f.f32[i], t));
      CHECK(got.feeds.at("label").i32 == want.feeds.at("label").i32);
    }
  }
}

TEST_CASE("a model with a bf16 input trains on cast_feeds' batches as an f32 model rounding in the graph", "[pipeline][half]") {
  const tj::data::TensorDataset data = dataset();
  tj::Graph g16, g32;
  tj::TowerTrainer bf16_input(g16, loss_of(g16, tj::DType::bf16), tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.5));
  tj::TowerTrainer f32_input(g32, loss_of(g32, tj::DType::f32), tj::Towers{tj::cpu(0), tj::cpu(1)}, tj::sgd(0.5));
  tj::data::BatchPipeline cast(data, {.batch = 4, .min_batch = 2, .transform = tj::data::cast_feeds({{"image", tj::DType::bf16}})});
  tj::data::BatchPipeline plain(data, {.batch = 4, .min_batch = 2});
  for (int step = 0; step < 4; ++step) CHECK(bf16_input.step(cast.next().feeds).loss == f32_input.step(plain.next().feeds).loss);
  CHECK(bf16_input.variables().at("fc/kernel").f32 == f32_input.variables().at("fc/kernel").f32);
}

TEST_CASE("cast_feeds names a dtype it cannot round to and an array the batch lacks", "[pipeline][half]") {
  static const std::string here = "tests/runtime/test_cast_feeds.cpp:";
  CHECK_THROWS_WITH(tj::data::cast_feeds({{"image", tj::DType::i32}}),
                    Contains("cast_feeds: \"image\" to i32; it rounds f32 inputs to DType::bf16 or DType::f16") &&
                        Contains(here));
  const tj::data::TensorDataset data = dataset();
  tj::data::BatchPipeline pipeline(data, {.batch = 4, .transform = tj::data::cast_feeds({{"images", tj::DType::bf16}})});
  CHECK_THROWS_WITH(pipeline.next(), Contains("cast_feeds: the batch has no array \"images\"; name one of the "
                                              "dataset's arrays") && Contains(here));
}
