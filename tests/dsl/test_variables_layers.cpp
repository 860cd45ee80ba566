// Variables (TF get_variable semantics), collections and layers: naming, sharing under reuse,
// and the error messages (what, where, values, fix) a user sees for each mistake.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "towerjit.h"

using namespace towerjit;

namespace {

// "tests/dsl/test_variables_layers.cpp:<line>": where the errors must point. Each check below
// writes here(__LINE__) on the line of the call, so the message must name the caller's line.
std::string here(int line) { return "tests/dsl/test_variables_layers.cpp:" + std::to_string(line); }

// Matches a message that contains every one of `parts`.
class ContainsAll : public Catch::MatcherBase<std::string> {
 public:
  explicit ContainsAll(std::vector<std::string> parts) : parts_(std::move(parts)) {}
  bool match(const std::string& s) const override {
    for (const auto& p : parts_)
      if (s.find(p) == std::string::npos) return false;
    return true;
  }
  std::string describe() const override {
    std::string d = "contains all of:";
    for (const auto& p : parts_) d += " \"" + p + "\"";
    return d;
  }

 private:
  std::vector<std::string> parts_;
};

ContainsAll mentions(std::vector<std::string> parts) { return ContainsAll(std::move(parts)); }

int count_ops(const Graph& g, Op op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

}  // namespace

TEST_CASE("variable creates a Variable node and registers it", "[dsl]") {
  Graph g;
  GraphScope use(g);
  const int line = __LINE__ + 1;
  Tensor w = variable("w", {3, 4}, {.init = init::normal(0, 0.1)});
  REQUIRE(w.node().op == Op::Variable);
  CHECK(w.node().attrs.name == "w");
  CHECK(w.shape() == Shape{3, 4});
  CHECK(w.dtype() == DType::f32);
  const VariableInfo* info = g.find_variable("w");
  REQUIRE(info != nullptr);
  CHECK(info->node == w.id());
  CHECK(info->trainable);
  CHECK(info->init.kind == Initializer::Kind::normal);
  CHECK(int(info->loc.line()) == line);
  CHECK(g.variable_of_node(w.id()) == info);
}

TEST_CASE("variables are named by their scope path", "[dsl]") {
  Graph g;
  GraphScope use(g);
  VariableScope encoder("encoder");
  {
    VariableScope fc1("fc1");
    CHECK(variable("kernel", {2, 2}).node().attrs.name == "encoder/fc1/kernel");
  }
  CHECK(variable("scale", {1}).node().attrs.name == "encoder/scale");
  CHECK(g.find_variable("encoder/fc1/kernel") != nullptr);
  CHECK(g.find_variable("fc1/kernel") == nullptr);
}

TEST_CASE("reuse returns the existing variable, auto_reuse gets or creates", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor a;
  { VariableScope s("fc"); a = variable("kernel", {4, 3}); }
  {
    VariableScope s("fc", Reuse::yes);
    CHECK(variable("kernel", {4, 3}).id() == a.id());
  }
  {
    VariableScope s("fc", Reuse::auto_reuse);
    CHECK(variable("kernel", {4, 3}).id() == a.id());
    Tensor b = variable("bias", {3});
    CHECK(b.node().attrs.name == "fc/bias");
    CHECK(variable("bias", {3}).id() == b.id());
  }
  CHECK(g.variables().size() == 2);
  {  // Reuse::inherit inside a reusing scope reuses too.
    VariableScope outer("", Reuse::yes);
    VariableScope s("fc");
    CHECK(variable("kernel", {4, 3}).id() == a.id());
  }
}

TEST_CASE("variable errors name the variable, the shapes and both locations", "[dsl]") {
  Graph g;
  GraphScope use(g);
  const int first = __LINE__ + 1;
  variable("w", {3, 4});
  SECTION("exists and reuse is off") {
    REQUIRE_THROWS_WITH(variable("w", {3, 4}), mentions({here(__LINE__), here(first),
                        "\"w\" already exists", "f32[3,4]", "Reuse::yes"}));
  }
  SECTION("reuse is on and it does not exist") {
    VariableScope s("", Reuse::yes);
    REQUIRE_THROWS_WITH(variable("v", {3}), mentions({here(__LINE__), "\"v\" does not exist",
                                                      "Reuse::yes", "Reuse::auto_reuse"}));
  }
  SECTION("reused with another shape") {
    VariableScope s("", Reuse::yes);
    REQUIRE_THROWS_WITH(variable("w", {4, 3}), mentions({here(__LINE__), here(first),
                        "variable name reused with another shape", "\"w\"", "[3,4]", "[4,3]"}));
  }
  SECTION("reused with another dtype") {
    VariableScope s("", Reuse::auto_reuse);
    REQUIRE_THROWS_WITH(variable("w", {3, 4}, {.dtype = DType::i32}), mentions({here(__LINE__),
                        "another dtype", "f32[3,4]", "i32[3,4]"}));
  }
  SECTION("the batch dimension or a non-positive size") {
    REQUIRE_THROWS_WITH(variable("b", {kBatch, 3}), mentions({here(__LINE__), "\"b\"", "[B,3]"}));
    REQUIRE_THROWS_WITH(variable("z", {0, 3}), mentions({here(__LINE__), "\"z\"", "[0,3]"}));
    REQUIRE_THROWS_WITH(variable("", {3}), mentions({here(__LINE__), "name is empty"}));
  }
  CHECK(g.variables().size() == 1);
}

TEST_CASE("collections: trainable, global, regularisation losses", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor w = variable("w", {2, 2});
  Tensor s = variable("step", {}, {.init = init::zeros(), .trainable = false});
  REQUIRE(trainable_variables().size() == 1);
  CHECK(trainable_variables()[0].id() == w.id());
  REQUIRE(global_variables().size() == 2);
  CHECK(global_variables()[1].id() == s.id());
  CHECK(update_ops().empty());
  add_regularization_loss(s);
  REQUIRE(regularization_losses().size() == 1);
  CHECK(regularization_losses()[0].id() == s.id());
  REQUIRE_THROWS_WITH(add_regularization_loss(w), mentions({here(__LINE__),
                      "f32 scalar", "f32[2,2]"}));
}

TEST_CASE("dense creates kernel in x units and bias units under its scope", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 784});
  VariableScope enc("encoder");
  Tensor y = dense(x, 512, "fc1");
  CHECK(y.shape() == Shape{kBatch, 512});
  const VariableInfo* k = g.find_variable("encoder/fc1/kernel");
  const VariableInfo* b = g.find_variable("encoder/fc1/bias");
  REQUIRE(k != nullptr);
  REQUIRE(b != nullptr);
  CHECK(k->shape == Shape{784, 512});
  CHECK(k->init.kind == Initializer::Kind::glorot_uniform);
  CHECK(b->shape == Shape{512});
  CHECK(b->init.kind == Initializer::Kind::zeros);
  CHECK(y.node().scope == "encoder/fc1");
  CHECK(dense(input("seq", {kBatch, 5, 16}), 8, "fc2").shape() == Shape{kBatch, 5, 8});
  CHECK(dense(input("v", {16}), 4, "fc3").shape() == Shape{4});
  CHECK(dense(x, 3, "nobias", {.use_bias = false, .weight_decay = {}}).node().op == Op::MatMul);
}

TEST_CASE("dense built twice under Reuse::yes shares its variables", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 4});
  Tensor y0, y1;
  { VariableScope tower("", Reuse::no); y0 = dense(x, 3, "fc", {.weight_decay = 1e-4}); }
  { VariableScope tower("", Reuse::yes); y1 = dense(x, 3, "fc", {.weight_decay = 1e-4}); }
  CHECK(trainable_variables().size() == 2);
  CHECK(y0.id() != y1.id());
  // y = add(matmul(x, kernel), bias): the same kernel and bias nodes in both builds.
  const Node& add0 = y0.node();
  const Node& add1 = y1.node();
  CHECK(add0.inputs[1] == add1.inputs[1]);
  CHECK(g.node(add0.inputs[0]).inputs[1] == g.node(add1.inputs[0]).inputs[1]);
  CHECK(g.node(add0.inputs[0]).inputs[1] == g.find_variable("fc/kernel")->node);
  // Weight decay joins the regularisation losses once, not once per tower.
  CHECK(regularization_losses().size() == 1);
}

TEST_CASE("dense reports a batch feature axis and a shape clash under reuse", "[dsl]") {
  Graph g;
  GraphScope use(g);
  REQUIRE_THROWS_WITH(dense(input("t", {4, kBatch}), 3, "fc"), mentions({here(__LINE__),
                      "dense \"fc\"", "f32[4,B]"}));
  dense(input("x", {kBatch, 4}), 3, "fc");
  VariableScope s("", Reuse::yes);
  REQUIRE_THROWS_WITH(dense(input("y", {kBatch, 5}), 3, "fc"), mentions({here(__LINE__),
                      "variable name reused with another shape", "\"fc/kernel\"",
                      "[4,3]", "[5,3]"}));
}

TEST_CASE("conv2d layer: kernel filters x C x k x k and a broadcast bias", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("image", {kBatch, 3, 28, 28});
  Tensor y = conv2d(x, 8, 3, "conv1", {.pad = 1, .weight_decay = 5e-4});
  CHECK(y.shape() == Shape{kBatch, 8, 28, 28});
  CHECK(g.find_variable("conv1/kernel")->shape == Shape{8, 3, 3, 3});
  CHECK(g.find_variable("conv1/kernel")->init.kind == Initializer::Kind::he_normal);
  CHECK(g.find_variable("conv1/bias")->shape == Shape{8});
  CHECK(regularization_losses().size() == 1);
  CHECK(conv2d(x, 4, 5, "conv2").shape() == Shape{kBatch, 4, 24, 24});
  REQUIRE_THROWS_WITH(conv2d(input("flat", {kBatch, 784}), 8, 3, "conv3"), mentions({here(__LINE__),
                      "[N, C, H, W]", "f32[B,784]"}));
}

TEST_CASE("batch_norm registers 2 update ops and 2 non-trainable variables", "[dsl]") {
  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 16, 8, 8});
  Tensor y = batch_norm(x, true, "bn1");
  CHECK(y.shape() == x.shape());
  CHECK(g.variables().size() == 4);
  CHECK(trainable_variables().size() == 2);
  CHECK(g.find_variable("bn1/gamma")->trainable);
  CHECK(g.find_variable("bn1/beta")->trainable);
  const VariableInfo* mm = g.find_variable("bn1/moving_mean");
  const VariableInfo* mv = g.find_variable("bn1/moving_variance");
  REQUIRE(mm != nullptr);
  REQUIRE(mv != nullptr);
  CHECK_FALSE(mm->trainable);
  CHECK_FALSE(mv->trainable);
  CHECK(mm->shape == Shape{16});
  CHECK(mm->init.kind == Initializer::Kind::zeros);
  CHECK(mv->init.kind == Initializer::Kind::constant);
  CHECK(mv->init.a == 1.0);
  const auto ops = update_ops();
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].node().op == Op::Assign);
  CHECK(ops[0].node().inputs[0] == mm->node);
  CHECK(ops[1].node().inputs[0] == mv->node);
  CHECK(count_ops(g, Op::Count) == 1);  // n for the unbiased moving variance
  // The two moving statistics' inputs, and the shift of the one-pass statistics (each
  // channel's first element).
  CHECK(count_ops(g, Op::StopGradient) == 3);

  SECTION("inference uses the moving statistics and adds no update ops") {
    VariableScope s("", Reuse::yes);
    Tensor z = batch_norm(x, false, "bn1");
    CHECK(z.shape() == x.shape());
    CHECK(update_ops().size() == 2);
    CHECK(g.variables().size() == 4);
  }
  SECTION("features [B, C] with the default axis") {
    Tensor f = batch_norm(input("f", {kBatch, 10}), true, "bn2");
    CHECK(f.shape() == Shape{kBatch, 10});
    CHECK(g.find_variable("bn2/gamma")->shape == Shape{10});
    CHECK(update_ops().size() == 4);
  }
  SECTION("a batch channel axis is an error") {
    REQUIRE_THROWS_WITH(batch_norm(x, true, "bn3", {.axis = 0}), mentions({here(__LINE__),
                        "batch_norm \"bn3\"", "f32[B,16,8,8]"}));
  }
}

TEST_CASE("dropout: rate checks, identity at inference, distinct reproducible seeds", "[dsl]") {
  auto seeds = [](uint64_t user_seed) {
    Graph g;
    GraphScope use(g);
    Tensor x = input("x", {kBatch, 32});
    Tensor h = dropout(dense(x, 32, "fc1"), 0.5, true, user_seed);
    dropout(dense(h, 32, "fc2"), 0.5, true, user_seed);
    std::vector<uint64_t> out;
    for (const Node& n : g.nodes())
      if (n.op == Op::RandomUniform) out.push_back(n.attrs.seed);
    return out;
  };
  const auto a = seeds(7);
  REQUIRE(a.size() == 2);
  CHECK(a[0] != a[1]);
  CHECK(seeds(7) == a);
  CHECK(seeds(8) != a);

  Graph g;
  GraphScope use(g);
  Tensor x = input("x", {kBatch, 32});
  CHECK(dropout(x, 0.5, false).id() == x.id());
  Tensor y = dropout(x, 0.25, true);
  CHECK(y.shape() == x.shape());
  CHECK(count_ops(g, Op::RandomUniform) == 1);
  dropout(x, 0.25, true);  // a second layer in the same scope draws another mask
  std::vector<uint64_t> keys;
  for (const Node& n : g.nodes())
    if (n.op == Op::RandomUniform) keys.push_back(n.attrs.seed);
  REQUIRE(keys.size() == 2);
  CHECK(keys[0] != keys[1]);
  REQUIRE_THROWS_WITH(dropout(x, 1.0, true), mentions({here(__LINE__),
                      "rate 1 is outside [0, 1)", "e.g. 0.1"}));
  REQUIRE_THROWS_WITH(dropout(x, -0.1, false), mentions({here(__LINE__), "rate -0.1"}));
}
