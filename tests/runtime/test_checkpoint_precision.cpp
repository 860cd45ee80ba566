// A checkpoint read into a model holding some variables in another float precision
// (runtime/checkpoint/precision_change.h): converted with a warning naming each variable
// (widened exactly, or rounded to nearest even as dsl/half_float.h defines), or refused when
// CheckpointPrecision::exact is asked for; integers and shapes are never converted.
#include <catch2/catch.hpp>
#include <cmath>

#include "dsl/half_float.h"
#include "runtime/checkpoint/precision_change.h"
#include "tests/jit/cpu_test_env.h"
#include "tests/runtime/tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
using Catch::Contains;

namespace {

// The small MLP plus a frozen table of `dtype` added to its logits' input (not trained).
tj::Tensor model_with_table(tj::Graph& graph, tj::DType dtype) {
  tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::GraphScope use(graph);
  auto table = tj::variable("table", {7}, {.init = tj::init::uniform(-3, 3), .trainable = false, .dtype = dtype});
  return loss + 0.0 * tj::sum(tj::cast(table, tj::DType::f32));
}

}  // namespace

TEST_CASE("convert_precision widens or rounds each float variable to the model's dtype", "[checkpoint][half]") {
  tj::Checkpoint c;
  tj::HostTensor w(tj::Shape{3}), ids(tj::Shape{2}, tj::DType::i32), h(tj::Shape{2}, tj::DType::bf16);
  w.f32 = {1.0f / 3, -0.0f, 70000.0f};
  ids.i32 = {1, 2};
  h.b16 = {tj::half_bits(1.5, tj::DType::bf16), tj::half_bits(-2.0, tj::DType::bf16)};
  c.variables = {{"w", w}, {"ids", ids}, {"h", h}};
  tj::HostVariables model = {{"w", tj::HostTensor(tj::Shape{3}, tj::DType::f16)},
                             {"ids", tj::HostTensor(tj::Shape{2})},       // i32 -> f32: not a precision
                             {"h", tj::HostTensor(tj::Shape{2})}};       // bf16 -> f32
  const std::vector<tj::PrecisionChange> changes = tj::convert_precision(c, model);
  REQUIRE(changes.size() == 2);
  CHECK(tj::describe(changes) == "\"h\" bf16 -> f32 (exact), \"w\" f32 -> f16 (rounded to nearest even)");
  CHECK(c.variables.at("h").f32 == std::vector<float>{1.5f, -2.0f});
  const tj::HostTensor& w16 = c.variables.at("w");
  REQUIRE(w16.dtype == tj::DType::f16);
  for (int i = 0; i < 3; ++i) CHECK(w16.b16[i] == tj::half_bits(w.f32[i], tj::DType::f16));  // 70000: inf
  CHECK(c.variables.at("ids").dtype == tj::DType::i32);
  CHECK_THROWS_WITH(tj::check_matches(c, model),
                    Contains("\"ids\" is i32[2] in the checkpoint but f32[2] in the model; was it saved"));
}

TEST_CASE("resume_from converts another precision with a warning, or refuses it when asked for exactness", "[checkpoint][half]") {
  tj::test::TempDir dir;
  tj::Graph g32;
  tj::TowerTrainer f32_run(g32, model_with_table(g32, tj::DType::f32), tj::Towers{tj::cpu(0)}, tj::sgd(0.1));
  f32_run.step(tj::testing::batch_of(5, 1));
  const std::string path = tj::save_checkpoint(dir.str(), {.step = 1, .variables = f32_run.variables()});

  tj::Graph g16;
  tj::TowerTrainer bf16_run(g16, model_with_table(g16, tj::DType::bf16), tj::Towers{tj::cpu(0)}, tj::sgd(0.1));
  CHECK_THROWS_WITH(tj::resume_from(bf16_run, path, {}, tj::CheckpointPrecision::exact),
                    Contains("variable \"table\" is f32[7] in the checkpoint but bf16[7] in the model (another "
                             "precision: resume_from converts it unless asked for CheckpointPrecision::exact)"));
  tj::resume_from(bf16_run, path, {});
  const tj::HostTensor& table = bf16_run.variables().at("table");
  for (int i = 0; i < 7; ++i)
    CHECK(table.b16[i] == tj::half_bits(f32_run.variables().at("table").f32[i], tj::DType::bf16));
  CHECK(bf16_run.variables().at("fc1/kernel").f32 == f32_run.variables().at("fc1/kernel").f32);
}
