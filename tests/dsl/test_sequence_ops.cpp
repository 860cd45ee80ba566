// The sequence-model ops of dsl/sequence.h: shapes, the layers' variables, each mistake's
// message (what, where, fix), and every gradient against central finite differences (with the
// CPU JIT within its error bounds of the reference: tests/dsl/gradient_check.h).
#include "dsl/sequence.h"
#include "tests/dsl/gradient_check.h"

namespace {

using namespace gradcheck;
using Catch::Contains;
using D = Domain;
using Xs = std::vector<Tensor>;

std::string here(int line) { return "tests/dsl/test_sequence_ops.cpp:" + std::to_string(line); }

}  // namespace

TEST_CASE("gather takes numpy's shape and embedding makes its table in its scope", "[dsl][sequence]") {
  Graph g;
  GraphScope use(g);
  auto table = input("table", {3, 10, 4});
  auto ids = input("ids", {kBatch, 5}, DType::i32);
  CHECK(gather(table, ids, 1).shape() == Shape{3, kBatch, 5, 4});
  CHECK(gather(table, ids, -1).shape() == Shape{3, 10, kBatch, 5});
  CHECK(gather(table, input("one", {}, DType::i32), 0).shape() == Shape{10, 4});
  CHECK(gather(table, ids, 1).node().attrs.name == "ids");
  CHECK(gather(table, reshape(ids, {kBatch, 5, 1}), 1).node().attrs.name == "ids");  // through a reshape
  CHECK(gather(table, ids + 1, 1).node().attrs.name.empty());                          // computed: unnamed
  Tensor e;
  {
    VariableScope scope("model");
    e = embedding(ids, 100, 16, "embed");
  }
  CHECK(e.shape() == Shape{kBatch, 5, 16});
  const VariableInfo* info = g.find_variable("model/embed/embeddings");
  REQUIRE(info != nullptr);
  CHECK(g.node(info->node).shape == Shape{100, 16});
  CHECK(info->trainable);
  {  // built again with reuse, the same table
    VariableScope scope("model", Reuse::yes);
    Tensor again = embedding(input("more", {7}, DType::i32), 100, 16, "embed");
    CHECK(again.shape() == Shape{7, 16});
    CHECK(g.node(again.node().inputs[0]).attrs.name == "model/embed/embeddings");
  }
}

TEST_CASE("gather and embedding: mistakes are named at the user's line", "[dsl][sequence]") {
  Graph g;
  GraphScope use(g);
  auto table = input("table", {10, 4});
  auto f = input("f", {kBatch, 5});
  auto ids = input("ids", {kBatch, 5}, DType::i32);
  REQUIRE_THROWS_WITH(gather(table, f), Contains("gather: expects i32 indices but got f32[B,5] (input)") && Contains("cast(x, DType::i32)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(gather(table, ids, 2), Contains("gather: axis 2 is out of range") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(gather(input("batched", {kBatch, 4}), ids, 0), Contains("axis 0 of the table f32[B,4] (input) is the batch dimension B") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(gather(input("batched2", {3, kBatch}), ids, 0), Contains("gather: the result [B,5,B]") && Contains("holds the batch dimension B twice"));
  REQUIRE_THROWS_WITH(embedding(f, 10, 4, "embed"), Contains("embedding \"embed\": expects i32 ids but got f32[B,5] (input)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(embedding(ids, 0, 4, "embed"), Contains("embedding \"embed\": vocab (0) and dim (4) must be positive") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(embedding(ids, 10, 4, ""), Contains("embedding: the name is empty") && Contains(here(__LINE__)));
}

TEST_CASE("iota arange causal_mask and tril: shapes and mistakes", "[dsl][sequence]") {
  Graph g;
  GraphScope use(g);
  CHECK(iota({kBatch, 3}, 1).shape() == Shape{kBatch, 3});
  CHECK(iota({kBatch, 3}, 1).dtype() == DType::i32);
  CHECK(arange(5, DType::f32).shape() == Shape{5});
  CHECK(causal_mask(4).shape() == Shape{4, 4});
  CHECK(causal_mask(4).dtype() == DType::f32);
  CHECK(tril(input("x", {kBatch, 3, 5})).shape() == Shape{kBatch, 3, 5});
  REQUIRE_THROWS_WITH(iota({2, 3}, 2), Contains("iota: axis 2 is out of range for shape [2,3]") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(iota({0, 3}, 0), Contains("iota: dimension 0 in [0,3] must be positive or kBatch") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(causal_mask(0), Contains("causal_mask: the sequence length 0") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(tril(input("v", {4})), Contains("tril: expects a matrix or a batch of them but got f32[4] (input)") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(tril(input("b", {3, kBatch})), Contains("tril: the last two axes of f32[3,B] (input)") && Contains(here(__LINE__)));
}

TEST_CASE("layer_norm and rms_norm: variables and mistakes", "[dsl][sequence]") {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, 5, 8});
  CHECK(layer_norm(x, "ln").shape() == Shape{kBatch, 5, 8});
  CHECK(rms_norm(x, "rms").shape() == Shape{kBatch, 5, 8});
  REQUIRE(g.find_variable("ln/gain") != nullptr);
  REQUIRE(g.find_variable("ln/bias") != nullptr);
  REQUIRE(g.find_variable("rms/gain") != nullptr);
  CHECK(g.find_variable("rms/bias") == nullptr);
  CHECK(g.find_variable("ln/gain")->init.kind == Initializer::Kind::constant);
  CHECK(g.node(g.find_variable("ln/gain")->node).shape == Shape{8});
  REQUIRE_THROWS_WITH(layer_norm(input("t", {8, kBatch}), "ln2"), Contains("layer_norm \"ln2\": normalises over the last axis, but f32[8,B] (input) has the batch dimension B there") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(rms_norm(input("i", {3, 4}, DType::i32), "rms2"), Contains("rms_norm: expects f32") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(layer_norm(x, "ln3", {.epsilon = 0}), Contains("layer_norm \"ln3\": epsilon 0 must be positive") && Contains(here(__LINE__)));
}

TEST_CASE("gradients of gather match finite differences", "[grad][sequence]") {
  // Rows read several times (indices drawn from 3 rows for 7 examples), along axes 0, 1 and -1.
  Arg ids{Shape{kBatch, 2}, D::labels, false, 3};
  check_op("gather [3,4] rows at [B,2]", {{Shape{3, 4}}, ids}, [](const Xs& x) { return gather(x[0], x[1]); });
  Arg picks{Shape{kBatch}, D::labels, false, 5};
  check_op("gather [2,5,3] axis 1 at [B]", {{Shape{2, 5, 3}}, picks},
           [](const Xs& x) { return gather(x[0], x[1], 1); });
  check_op("gather [1,5] axis -1 at [B]", {{Shape{1, 5}}, picks}, [](const Xs& x) { return gather(x[0], x[1], -1); });
  Arg one{Shape{kBatch}, D::labels, false, 1};
  check_op("gather of a one-row table [1,7]", {{Shape{1, 7}}, one}, [](const Xs& x) { return gather(x[0], x[1]); });
  Arg wide{Shape{kBatch}, D::labels, false, 127};
  check_op("gather [127,3]", {{Shape{127, 3}}, wide}, [](const Xs& x) { return gather(x[0], x[1]); });
  // The gradient's own gradient: the dense scatter-add is linear in dy, and gathers back.
  check_op("gather's gradient, differentiated again", {{Shape{4, 3}}, Arg{Shape{kBatch}, D::labels, false, 4}},
           [](const Xs& x) {
             Tensor y = gather(x[0], x[1]);
             Tensor dtable = grad(sum(y * y * y), {x[0]})[0];  // 3 y^2 scattered: depends on the table
             return dtable * dtable;
           });
}

TEST_CASE("gradients of embedding with positions match finite differences", "[grad][sequence]") {
  Graph g;
  GraphScope use(g);
  auto ids = input("ids", {kBatch, 3}, DType::i32);
  auto h = embedding(ids, 5, 4, "embed") + gather(variable("pos", {3, 4}, {.init = init::normal()}), arange(3));
  auto loss = sum(h * h * input("r", {kBatch, 3, 4}));
  reference::Variables vars = reference::initialize_variables(g, 7);
  reference::Array idv({7, 3}, DType::i32);
  for (int64_t i = 0; i < idv.size(); ++i) idv[i] = static_cast<double>(i % 5);
  std::mt19937 rng(3);
  reference::Feeds feeds{{"ids", idv}, {"r", draw(Arg{Shape{7, 3, 4}}, rng)}};
  check_variables("embedding [B,3] of 5 x 4 plus positions", g, loss, trainable_variables(), feeds, vars);
}

TEST_CASE("gradients of causally masked softmax and tril match finite differences", "[grad][sequence]") {
  for (int64_t t : {1, 7}) {
    const std::string n = std::to_string(t);
    check_op("masked softmax T = " + n, {{Shape{kBatch, t, t}}},
             [t](const Xs& x) { return softmax(where(causal_mask(t) > 0.5, x[0], Operand(-1e9))); });
    check_op("tril T = " + n, {{Shape{kBatch, t, t}}}, [](const Xs& x) { return tril(x[0]) * x[0]; });
  }
  check_op("softmax [B,127]", {{Shape{kBatch, 127}}}, [](const Xs& x) { return softmax(x[0]); });
  check_op("softmax [B,1]", {{Shape{kBatch, 1}}}, [](const Xs& x) { return softmax(x[0]); });
}

TEST_CASE("gradients of layer_norm and rms_norm match finite differences", "[grad][sequence]") {
  for (int64_t width : {1, 7, 127}) {
    Graph g;
    GraphScope use(g);
    auto x = input("x", {kBatch, width});
    auto loss = sum(layer_norm(x, "ln") * input("r1", {kBatch, width})) +
                sum(rms_norm(x, "rms") * input("r2", {kBatch, width}));
    reference::Variables vars = reference::initialize_variables(g, 7);
    std::mt19937 rng(static_cast<unsigned>(width));
    for (auto& [name, a] : vars) a = draw(Arg{a.shape, D::positive}, rng);
    reference::Feeds feeds{{"x", draw(Arg{Shape{7, width}}, rng)},
                           {"r1", draw(Arg{Shape{7, width}}, rng)},
                           {"r2", draw(Arg{Shape{7, width}}, rng)}};
    std::vector<Tensor> wrt = trainable_variables();
    check_variables("layer_norm and rms_norm, width " + std::to_string(width), g, loss, wrt, feeds, vars);
  }
  // W.r.t. the input: the normalisations as functions of x, gains at their initial ones.
  for (int64_t width : {1, 7, 127}) {
    const std::string n = std::to_string(width);
    check_op("layer_norm of [B,3," + n + "]", {{Shape{kBatch, 3, width}}},
             [](const Xs& x) { return layer_norm(x[0], "ln"); });
    check_op("rms_norm of [B," + n + "]", {{Shape{kBatch, width}}}, [](const Xs& x) { return rms_norm(x[0], "rms"); });
  }
}

namespace {

// The fused normalisations at `rows` rows of `width`: the gradients w.r.t. x, the gains and
// the bias against central differences through the reference, on every element of a tensor
// of up to 64 and on about 32 spread over a larger one (the first and last included; every
// element of a 127 x 127 input would take 32,000 runs of the graph); and the CPU JIT within
// its error bounds of the reference.
void check_fused_norms(int64_t rows, int64_t width, bool fused) {
  Graph g;
  GraphScope use(g);
  auto x = input("x", {kBatch, width});
  auto loss = sum(layer_norm(x, "ln", {.fused = fused}) * input("r1", {kBatch, width})) +
              sum(rms_norm(x, "rms", {.epsilon = 1e-3, .fused = fused}) * input("r2", {kBatch, width}));
  std::vector<Tensor> wrt = trainable_variables();
  wrt.push_back(x);
  std::vector<Tensor> fetches = grad(loss, wrt);
  fetches.push_back(loss);
  reference::Variables vars = reference::initialize_variables(g, 7);
  std::mt19937 rng(static_cast<unsigned>(rows * 1000 + width));
  for (auto& [name, a] : vars) a = draw(Arg{a.shape, D::positive}, rng);
  reference::Feeds feeds{{"x", draw(Arg{Shape{rows, width}}, rng)},
                         {"r1", draw(Arg{Shape{rows, width}}, rng)},
                         {"r2", draw(Arg{Shape{rows, width}}, rng)}};
  const std::string what = std::string(fused ? "fused" : "composed") + " norms, " + std::to_string(rows) +
                           " rows of " + std::to_string(width);
  const std::vector<Array> analytic = reference::run(g, fetches, feeds, vars);
  towerjit::testing::require_jit_matches(g, fetches, feeds, vars, what);
  for (size_t w = 0; w < wrt.size(); ++w) {
    const bool is_x = w + 1 == wrt.size();
    Array& value = is_x ? feeds.at("x") : vars.at(wrt[w].node().attrs.name);
    std::vector<int64_t> picks;
    for (int64_t j = 0; j < value.size(); j += value.size() > 64 ? value.size() / 31 : 1) picks.push_back(j);
    if (picks.back() != value.size() - 1) picks.push_back(value.size() - 1);
    Worst worst;
    for (int64_t j : picks) {
      const double saved = value[j];
      value[j] = saved + kEps;
      const double up = reference::run(g, {loss}, feeds, vars)[0].item();
      value[j] = saved - kEps;
      const double down = reference::run(g, {loss}, feeds, vars)[0].item();
      value[j] = saved;
      note(worst, j, analytic[w][j], (up - down) / (2 * kEps));
    }
    INFO(report(what, is_x ? "x" : wrt[w].node().attrs.name, value.shape, worst));
    CHECK(worst.error <= kTolerance);
  }
}

}  // namespace

TEST_CASE("gradients of the fused layer_norm and rms_norm match finite differences at 1, 7 and 127 rows", "[grad][sequence]") {
  for (int64_t rows : {1, 7, 127})
    for (int64_t width : {1, 7, 127}) check_fused_norms(rows, width, true);
  check_fused_norms(7, 7, false);  // the composed form, the same way
}

namespace {

// softmax(q k^T * scale, masked) v, written out in double: q [n, tq, d], k [n, tk, d], v [n, tk, dv].
reference::Array attention_by_hand(const reference::Array& q, const reference::Array& k, const reference::Array& v,
                                   bool causal, double scale) {
  const int64_t n = q.shape[0], tq = q.shape[1], d = q.shape[2], tk = k.shape[1], dv = v.shape[2];
  reference::Array out({n, tq, dv});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < tq; ++i) {
      std::vector<double> s(tk);
      double top = -1e300;
      for (int64_t j = 0; j < tk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += q[(b * tq + i) * d + c] * k[(b * tk + j) * d + c];
        s[j] = causal && j > i ? -1e300 : dot * scale;
        top = std::max(top, s[j]);
      }
      double total = 0;
      for (double& e : s) total += (e = e <= -1e300 ? 0 : std::exp(e - top));
      for (int64_t j = 0; j < tk; ++j)
        for (int64_t c = 0; c < dv; ++c) out[(b * tq + i) * dv + c] += s[j] / total * v[(b * tk + j) * dv + c];
    }
  return out;
}

}  // namespace

TEST_CASE("scaled_dot_product_attention equals its closed form whether causal or not", "[dsl][sequence]") {
  for (int64_t t : {1, 7, 127})
    for (bool causal : {false, true}) {
      Graph g;
      GraphScope use(g);
      auto q = input("q", {2, t, 4}), k = input("k", {2, t, 4}), v = input("v", {2, t, 3});
      auto y = scaled_dot_product_attention(q, k, v, {.causal = causal});
      CHECK(y.shape() == Shape{2, t, 3});
      std::mt19937 rng(static_cast<unsigned>(t));
      reference::Feeds feeds{{"q", draw(Arg{Shape{2, t, 4}}, rng)}, {"k", draw(Arg{Shape{2, t, 4}}, rng)},
                             {"v", draw(Arg{Shape{2, t, 3}}, rng)}};
      reference::Variables none;
      const Array got = reference::run(g, {y}, feeds, none)[0];
      const Array want = attention_by_hand(feeds["q"], feeds["k"], feeds["v"], causal, 0.5);
      double worst = 0;
      for (int64_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      INFO("T = " << t << (causal ? " causal" : "") << ": largest difference " << worst);
      CHECK(worst <= 1e-12);
    }
  Graph g;
  GraphScope use(g);
  auto q = input("q", {2, 5, 4}), k = input("k", {2, 6, 4}), v = input("v", {2, 6, 3});
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, input("k8", {2, 6, 8}), v), Contains("differ in the head dimension") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, k, input("v5", {2, 5, 3})), Contains("differ in the number of keys") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, k, v, {.scale = -1}), Contains("scale -1") && Contains(here(__LINE__)));
}

TEST_CASE("gradients of scaled_dot_product_attention match finite differences", "[grad][sequence]") {
  for (int64_t t : {1, 7})
    for (bool causal : {false, true})
      check_op("attention T = " + std::to_string(t) + (causal ? " causal" : ""),
               {{Shape{kBatch, t, 3}}, {Shape{kBatch, t, 3}}, {Shape{kBatch, t, 2}}},
               [causal](const Xs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = causal, .scale = 0.7}); });
  check_op("attention over heads [B,2,5,3], 4 keys", {{Shape{kBatch, 2, 5, 3}}, {Shape{kBatch, 2, 4, 3}}, {Shape{kBatch, 2, 4, 2}}},
           [](const Xs& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); });
  // The composed form keeps its own gradients.
  check_op("unfused attention T = 7 causal", {{Shape{kBatch, 7, 3}}, {Shape{kBatch, 7, 3}}, {Shape{kBatch, 7, 2}}},
           [](const Xs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = true, .fused = false}); });
  // Fused, causal with fewer queries than keys and more, and keys broadcast over the heads.
  check_op("fused attention causal, 5 queries, 3 keys", {{Shape{kBatch, 5, 3}}, {Shape{kBatch, 3, 3}}, {Shape{kBatch, 3, 1}}},
           [](const Xs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = true}); });
  check_op("fused attention causal, 3 queries, 6 keys, shared over 2 heads",
           {{Shape{kBatch, 2, 3, 5}}, {Shape{kBatch, 1, 6, 5}}, {Shape{kBatch, 1, 6, 3}}},
           [](const Xs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = true}); });
}

// In the reference interpreter's double precision the fused op and its gradient ops are the
// composed form's function: equal to rounding, forward and all three gradients.
TEST_CASE("fused attention equals the composed form, values and gradients", "[dsl][sequence][attention]") {
  for (int64_t t : {1, 7, 127})
    for (bool causal : {false, true}) {
      Graph g;
      GraphScope use(g);
      const int64_t d = 5, dv = 3;
      auto q = input("q", {2, 2, t, d}), k = input("k", {2, 2, t, d}), v = input("v", {2, 2, t, dv});
      auto r = input("r", {2, 2, t, dv});
      auto fused = scaled_dot_product_attention(q, k, v, {.causal = causal});
      auto composed = scaled_dot_product_attention(q, k, v, {.causal = causal, .fused = false});
      const std::vector<Tensor> gf = grad(sum(fused * r), {q, k, v}), gc = grad(sum(composed * r), {q, k, v});
      std::mt19937 rng(static_cast<unsigned>(t) + 100);
      reference::Feeds feeds{{"q", draw(Arg{Shape{2, 2, t, d}}, rng)}, {"k", draw(Arg{Shape{2, 2, t, d}}, rng)},
                             {"v", draw(Arg{Shape{2, 2, t, dv}}, rng)}, {"r", draw(Arg{Shape{2, 2, t, dv}}, rng)}};
      reference::Variables none;
      const auto got = reference::run(g, {fused, gf[0], gf[1], gf[2]}, feeds, none);
      const auto want = reference::run(g, {composed, gc[0], gc[1], gc[2]}, feeds, none);
      for (size_t n = 0; n < got.size(); ++n) {
        double worst = 0, scale = 0;
        for (int64_t i = 0; i < got[n].size(); ++i) {
          worst = std::max(worst, std::abs(got[n][i] - want[n][i]));
          scale = std::max(scale, std::abs(want[n][i]));
        }
        INFO("T = " << t << (causal ? " causal" : "") << ", output " << n << ": largest difference " << worst);
        CHECK(worst <= 1e-12 * std::max(1.0, scale));  // double rounding of sums of at most 127 terms
      }
    }
}
