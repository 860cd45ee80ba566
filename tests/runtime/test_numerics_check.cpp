// TOWERJIT_CHECK_NUMERICS: the first op to produce a NaN or an infinity stops the program,
// named with the user's line, and the message says whether an input fed it.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;

namespace {

struct NumericsOn {
  NumericsOn() { ::setenv("TOWERJIT_CHECK_NUMERICS", "on", 1); }
  ~NumericsOn() { ::unsetenv("TOWERJIT_CHECK_NUMERICS"); }
};

tj::HostTensor row(std::vector<float> v) {
  tj::HostTensor t(tj::Shape{1, static_cast<int64_t>(v.size())});
  t.f32 = std::move(v);
  return t;
}

}  // namespace

TEST_CASE("check numerics names the op that produced a NaN from finite operands", "[numerics]") {
  NumericsOn on;
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto y = tj::relu(x) * 2.0;
  const int line = __LINE__ + 1;
  auto bad = tj::log(y - 2.0);  // log of a negative where x < 1
  auto out = tj::sum(bad, {1});
  tj::CpuProgram program(g, {out});
  tj::HostVariables none;
  CHECK_NOTHROW(program.run({{"x", row({2, 3, 4})}}, none));
  CHECK_THROWS_WITH(program.run({{"x", row({2, 0.5f, 4})}}, none),
                    Catch::Contains("TOWERJIT_CHECK_NUMERICS: log at") &&
                        Catch::Contains("test_numerics_check.cpp:" + std::to_string(line)) &&
                        Catch::Contains("NaN at element 1") && Catch::Contains("operands were finite"));
}

TEST_CASE("check numerics says when an input fed the non-finite value", "[numerics]") {
  NumericsOn on;
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto out = tj::sum(tj::exp(x), {1});
  tj::CpuProgram program(g, {out});
  tj::HostVariables none;
  CHECK_THROWS_WITH(program.run({{"x", row({1, NAN, 2})}}, none),
                    Catch::Contains("input \"x\" fed it") && Catch::Contains("element 1"));
}

TEST_CASE("check numerics stops a tower step at the op that overflowed, and is off by default", "[numerics][towers]") {
  auto build_and_step = [](bool on) {
    std::optional<NumericsOn> knob;
    if (on) knob.emplace();
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 2});
    auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
    auto logits = tj::dense(tj::exp(tj::dense(x, 3, "fc1") * 100.0), 2, "fc2");  // exp overflows
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
    tj::TowerTrainer trainer(g, loss, tj::Towers({tj::cpu(0), tj::cpu(1)}), tj::sgd(0.1));
    tj::HostTensor xs(tj::Shape{4, 2}), ls(tj::Shape{4}, tj::DType::i32);
    for (float& v : xs.f32) v = 5;
    return trainer.step({{"x", xs}, {"labels", ls}}, {.check_loss = false}).loss;
  };
  CHECK_FALSE(std::isfinite(build_and_step(false)));
  CHECK_THROWS_WITH(build_and_step(true), Catch::Contains("TOWERJIT_CHECK_NUMERICS: exp at") &&
                                              Catch::Contains("+inf") && Catch::Contains("operands were finite"));
}

TEST_CASE("TOWERJIT_CHECK_NUMERICS with a value that is not a switch is an error", "[numerics][errors]") {
  ::setenv("TOWERJIT_CHECK_NUMERICS", "maybe", 1);
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {3});
  CHECK_THROWS_WITH(tj::CpuProgram(g, {tj::exp(x)}), Catch::Contains("TOWERJIT_CHECK_NUMERICS=maybe is not a switch"));
  ::unsetenv("TOWERJIT_CHECK_NUMERICS");
}
