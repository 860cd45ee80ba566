// Collectives as graph nodes: build_tower_program puts an all_reduce on every gradient, the
// tower runtime cuts the graph there, and on one device a collective is its input, so the
// whole graph (forward, backward, collectives, apply) runs as one program equal to one tower.
#include <catch2/catch.hpp>

#include "dsl/tower_program.h"
#include "jit/passes/cut_collectives.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "tower_test_model.h"
#include "towerjit.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/runtime/test_collectives.cpp:";

namespace tj = towerjit;
using tj::kBatch;
using tj::testing::batch_of;
using tj::testing::small_mlp_loss;

namespace {

// Whether `from` reads `target`, directly or through other nodes.
bool reads(const tj::Graph& g, int from, int target) {
  std::vector<int> stack{from};
  std::vector<bool> seen(g.size(), false);
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    if (seen[n]) continue;
    seen[n] = true;
    for (int in : g.node(n).inputs) stack.push_back(in);
  }
  return false;
}

}  // namespace

TEST_CASE("the tower program has an all_reduce on every gradient, and the apply reads them", "[towers][collectives]") {
  tj::Graph g;
  const tj::Tensor loss = small_mlp_loss(g);
  const tj::TowerProgram p = tj::build_tower_program(g, loss, tj::momentum(0.1, 0.9));
  REQUIRE(p.collectives.size() == p.variables.size());
  REQUIRE(tj::collectives_of(g).size() == p.variables.size());
  for (size_t v = 0; v < p.variables.size(); ++v) {
    const tj::Node& c = p.collectives[v].node();
    CHECK(c.op == tj::Op::AllReduce);
    CHECK(c.attrs.name == "tower_gradient/" + p.variables[v].node().attrs.name);
    CHECK(c.inputs[0] == p.gradient(v).id());
    CHECK(p.gradient_inputs[v] == c.attrs.name);
  }
  // The towers' fetches stop before the collectives; every variable's update reads its own.
  for (const tj::Tensor& f : p.tower_fetches)
    for (const tj::Tensor& c : p.collectives) CHECK_FALSE(reads(g, f.id(), c.id()));
  for (size_t v = 0; v < p.variables.size(); ++v) {
    bool updated = false;
    for (const tj::Tensor& u : p.apply_updates)
      if (u.node().inputs[0] == p.variables[v].id()) updated = updated || reads(g, u.id(), p.collectives[v].id());
    CHECK(updated);
  }
}

TEST_CASE("cutting at collectives leaves inputs named by their keys", "[towers][collectives]") {
  tj::Graph g;
  const tj::Tensor loss = small_mlp_loss(g);
  const tj::TowerProgram p = tj::build_tower_program(g, loss, tj::sgd(0.1));
  tj::Rewritten cut = tj::cut_at_collectives(g);
  for (const tj::Node& n : cut.graph.nodes()) CHECK(n.op != tj::Op::AllReduce);
  for (size_t v = 0; v < p.collectives.size(); ++v) {
    const auto id = cut.graph.find_input(p.gradient_inputs[v]);
    REQUIRE(id);
    CHECK(*id == cut.remap[p.collectives[v].id()]);
    CHECK(cut.graph.node(*id).shape == p.variables[v].shape());
  }
  // The apply side compiles without the towers' inputs: it needs only the collectives' values.
  const auto updates = tj::remap_tensors(cut, p.apply_updates);
  tj::CpuProgram apply(cut.graph, std::vector<tj::Tensor>{}, updates);
  tj::HostVariables vars;
  for (auto& [name, value] : tj::reference::initialize_variables(g, 1)) {
    tj::HostTensor t(value.shape);
    for (int64_t k = 0; k < t.size(); ++k) t.f32[k] = static_cast<float>(value[k]);
    vars[name] = t;
  }
  tj::HostFeeds grads;
  for (size_t v = 0; v < p.collectives.size(); ++v) {
    tj::HostTensor one(p.variables[v].shape());
    std::fill(one.f32.begin(), one.f32.end(), 1.0f);
    grads[p.gradient_inputs[v]] = one;
  }
  const tj::HostVariables before = vars;
  apply.run(grads, vars);
  const std::string w = p.variables[0].node().attrs.name;
  CHECK(vars.at(w).f32[0] == Approx(before.at(w).f32[0] - 0.1f));  // SGD: w - lr * 1

  // With a scale, the apply multiplies every collective by one scalar input, in its kernels.
  tj::Rewritten scaled = tj::cut_at_collectives(g, "scale");
  REQUIRE(scaled.graph.find_input("scale"));
  CHECK(scaled.graph.node(*scaled.graph.find_input("scale")).shape == tj::Shape{});
  tj::CpuProgram scaled_apply(scaled.graph, std::vector<tj::Tensor>{}, tj::remap_tensors(scaled, p.apply_updates));
  tj::HostTensor half(tj::Shape{});
  half.f32[0] = 0.5f;
  grads["scale"] = half;
  tj::HostVariables again = before;
  scaled_apply.run(grads, again);
  CHECK(again.at(w).f32[0] == Approx(before.at(w).f32[0] - 0.05f));  // w - lr * 0.5 * 1
  // No pass of its own: as many kernels as the apply without the scale.
  CHECK(scaled_apply.program().kernels.size() == apply.program().kernels.size());
}

TEST_CASE("on one device the whole tower graph is one training step, equal to one tower", "[towers][collectives]") {
  // The trainer with one tower (collectives run by the runtime) ...
  tj::Graph g1;
  const tj::Tensor loss1 = small_mlp_loss(g1);
  tj::TowerTrainer trainer(g1, loss1, tj::Towers({tj::cpu(0)}), tj::momentum(0.1, 0.9));
  // ... and one program of the whole graph, where each collective is its input.
  tj::Graph g2;
  const tj::Tensor loss2 = small_mlp_loss(g2);
  const tj::TowerProgram p = tj::build_tower_program(g2, loss2, tj::momentum(0.1, 0.9));
  tj::CpuProgram whole(g2, std::vector<tj::Tensor>{loss2}, p.apply_updates);
  tj::HostVariables vars = trainer.variables();
  for (int step = 0; step < 5; ++step) {
    const tj::HostFeeds batch = batch_of(9, 40 + step);
    const double loss_towers = trainer.step(batch).loss;
    const double loss_whole = whole.run(batch, vars)[0].f32[0];
    CHECK(loss_whole == Approx(loss_towers).epsilon(1e-6));
  }
  for (const auto& [name, t] : trainer.variables())
    for (int64_t k = 0; k < t.size(); ++k) CHECK(vars.at(name).f32[k] == Approx(t.f32[k]).epsilon(1e-5).margin(1e-7));
  // The reference interpreter reads a collective as its input too.
  tj::reference::Feeds feeds;
  const tj::HostFeeds batch = batch_of(4, 7);
  tj::reference::Array x(batch.at("x").shape), labels(batch.at("labels").shape, tj::DType::i32);
  for (int64_t k = 0; k < x.size(); ++k) x[k] = batch.at("x").f32[k];
  for (int64_t k = 0; k < labels.size(); ++k) labels[k] = batch.at("labels").i32[k];
  tj::reference::Variables rvars = tj::reference::initialize_variables(g2, 1);
  const auto out = tj::reference::run(g2, {p.collectives[0], p.gradient(0)}, {{"x", x}, {"labels", labels}}, rvars);
  CHECK(out[0].data == out[1].data);
}

TEST_CASE("all_reduce rejects an empty or repeated key and integer values", "[towers][collectives]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3});
  auto i = tj::input("i", {kBatch}, tj::DType::i32);
  CHECK_THROWS_WITH(tj::all_reduce(x, ""), Catch::Contains("the key is empty") && Catch::Contains(here));
  tj::all_reduce(x, "g");
  CHECK_THROWS_WITH(tj::all_reduce(x * 2, "g"), Catch::Contains("the key \"g\" is already used") &&
                                                    Catch::Contains("test_collectives.cpp"));
  CHECK_THROWS_WITH(tj::all_reduce(i, "labels"), Catch::Contains("the value is i32") && Catch::Contains(here));
  // A collective whose key (or the scale) is already an input's name cannot be cut.
  CHECK_THROWS_WITH(tj::cut_at_collectives(g, "x"), Catch::Contains("needs an input named \"x\"") && Catch::Contains(here));
  tj::all_reduce(x + 1, "x");
  CHECK_THROWS_WITH(tj::cut_at_collectives(g), Catch::Contains("needs an input named \"x\"") && Catch::Contains(here));
}
