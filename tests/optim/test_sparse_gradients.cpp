// Sparse gradients of gathers (dsl/sparse_gradients.h) and the optimisers' sparse apply
// (dsl/optimizers_sparse.cpp): which variables get one, each optimiser against its dense
// form (one step at a time from a shared state: the two CPU JIT results within the sum of
// the two graphs' float32 error bounds, the two exact results equal), SparseAdam against a
// hand computation, the refusals, and the buffer plan's peak at a large vocabulary.
#include <algorithm>
#include <random>

#include "dsl/sparse_gradients.h"
#include "optim_util.h"

namespace {

using namespace optim_test;

// Where the refusals are reported: the line of this file that made them.
const std::string here = "tests/optim/test_sparse_gradients.cpp:";

// loss = sum(0.5 a h^2 + b h), h = embedding(ids) + bias: d loss / d h = a h + b.
struct EmbedModel {
  tj::Graph graph;
  tj::Tensor loss, table;
  std::vector<tj::Tensor> vars, grads;

  // `twice`: the table is also read by a second gather, of ids2 [n / 2 + 1], adding
  // sum(c * rows) to the loss (the two reads make one sparse gradient).
  EmbedModel(int64_t vocab, int64_t dim, int64_t n, bool sparse, bool twice = false) {
    tj::GraphScope use(graph);
    auto ids = tj::input("ids", {n}, tj::DType::i32);
    auto a = tj::input("a", {n, dim}), b = tj::input("b", {n, dim});
    auto h = tj::embedding(ids, vocab, dim, "embed", {.sparse = sparse}) +
             tj::variable("bias", {dim}, {.init = tj::init::uniform(-1, 1)});
    loss = tj::sum(0.5 * a * h * h + b * h);
    if (twice) {
      tj::Tensor embeddings;
      for (const tj::Tensor& v : tj::trainable_variables())
        if (v.node().attrs.name == "embed/embeddings") embeddings = v;
      auto again = tj::gather(embeddings, tj::input("ids2", {n / 2 + 1}, tj::DType::i32), 0, sparse);
      loss = loss + tj::sum(tj::input("c", {n / 2 + 1, dim}) * again);
    }
    vars = tj::trainable_variables();
    std::sort(vars.begin(), vars.end(), [](const tj::Tensor& a, const tj::Tensor& b) {
      return a.node().attrs.name > b.node().attrs.name;  // the table first
    });
    table = vars[0];
    grads = tj::grad(loss, vars);
  }
};

// Step k's ids: random rows of the vocabulary, the first one repeated at the end (a duplicate
// whenever n > 1), so the rows touched change from step to step.
tj::reference::Feeds step_feeds(int64_t vocab, int64_t dim, int64_t n, int k) {
  std::mt19937 rng(100 + k);
  std::uniform_int_distribution<int> row(0, static_cast<int>(vocab) - 1);
  std::uniform_real_distribution<double> pos(0.5, 2.0), any(-1.0, 1.0);
  tj::reference::Array ids(tj::Shape{n}, tj::DType::i32), a(tj::Shape{n, dim}), b(tj::Shape{n, dim});
  for (double& v : ids.data) v = row(rng);
  if (n > 1) ids[n - 1] = ids[0];
  for (double& v : a.data) v = static_cast<float>(pos(rng));
  for (double& v : b.data) v = static_cast<float>(any(rng));
  // For the second gather (unused by a model read once): ids2 repeats ids' first row.
  const int64_t m = n / 2 + 1;
  tj::reference::Array ids2(tj::Shape{m}, tj::DType::i32), c(tj::Shape{m, dim});
  for (double& v : ids2.data) v = row(rng);
  ids2[0] = ids[0];
  for (double& v : c.data) v = static_cast<float>(any(rng));
  return {{"ids", ids}, {"a", a}, {"b", b}, {"ids2", ids2}, {"c", c}};
}

tj::HostFeeds host_feeds(const tj::reference::Feeds& feeds) {
  tj::HostFeeds out;
  for (const auto& [name, a] : feeds) {
    tj::HostTensor t(a.shape, a.dtype);
    for (int64_t i = 0; i < a.size(); ++i) {
      if (a.dtype == tj::DType::i32) t.i32[i] = static_cast<int32_t>(a[i]);
      else t.f32[i] = static_cast<float>(a[i]);
    }
    out[name] = t;
  }
  return out;
}

tj::HostVariables to_host_vars(const tj::reference::Variables& vars) {
  tj::HostVariables out;
  for (const auto& [name, a] : vars) out[name] = to_host(a);
  return out;
}

// `steps` steps of `opt` on the sparse and the dense model of one size, each from the dense
// JIT's state. `bitwise`: the two JIT results must also be equal bit for bit.
void check_against_dense(const tj::Optimizer& opt, int64_t vocab, int64_t dim, int64_t n, bool bitwise,
                         bool twice = false) {
  EmbedModel sp(vocab, dim, n, true, twice), de(vocab, dim, n, false, twice);
  REQUIRE(tj::as_sparse(sp.grads[0]));
  REQUIRE_FALSE(tj::as_sparse(de.grads[0]));
  {
    tj::GraphScope use(sp.graph);
    opt.apply(sp.grads, sp.vars);
  }
  {
    tj::GraphScope use(de.graph);
    opt.apply(de.grads, de.vars);
  }
  tj::CpuProgram psp(sp.graph, {sp.loss}, true), pde(de.graph, {de.loss}, true);
  tj::reference::Variables state = tj::reference::initialize_variables(de.graph, 1);
  for (const auto& [name, a] : tj::reference::initialize_variables(sp.graph, 1)) REQUIRE(state.count(name) == 1);
  for (int k = 0; k < 3; ++k) {
    const tj::reference::Feeds feeds = step_feeds(vocab, dim, n, k);
    const tj::HostFeeds hf = host_feeds(feeds);
    tj::HostVariables hs = to_host_vars(state), hd = to_host_vars(state);
    psp.run(hf, hs, k);
    pde.run(hf, hd, k);
    tj::reference::Variables rs = state, rd = state;
    tj::reference::ErrorBounds bs, bd;
    tj::reference::run(sp.graph, {sp.loss}, feeds, rs, {.step = uint64_t(k), .run_update_ops = true, .bounds = &bs});
    tj::reference::run(de.graph, {de.loss}, feeds, rd, {.step = uint64_t(k), .run_update_ops = true, .bounds = &bd});
    for (const auto& [name, want] : rd) {
      const std::string at = opt.str() + " V=" + std::to_string(vocab) + " N=" + std::to_string(n) + " step " +
                             std::to_string(k + 1) + " \"" + name + "\"";
      INFO(at);
      REQUIRE(rs.count(name) == 1);
      for (int64_t i = 0; i < want.size(); ++i)  // the same arithmetic in exact terms
        REQUIRE(std::abs(rs.at(name)[i] - want[i]) <= 1e-12 * std::max(1.0, std::abs(want[i])));
      tj::reference::Array bound = bd.variables.at(name);
      for (int64_t i = 0; i < bound.size(); ++i) bound[i] += bs.variables.at(name)[i];
      tj::testing::check_within_bounds(tj::testing::to_array(hs.at(name)), tj::testing::to_array(hd.at(name)),
                                       bound, at + ": sparse JIT against dense JIT");
      if (bitwise) CHECK(hs.at(name).f32 == hd.at(name).f32);
    }
    for (auto& [name, a] : state) a = tj::testing::to_array(hd.at(name));
  }
}

struct Size {
  int64_t vocab, dim, n;
};
const Size kSizes[] = {{1, 1, 1}, {7, 5, 7}, {127, 3, 127}, {7, 3, 127}, {127, 5, 7}};

}  // namespace

TEST_CASE("a variable read only through gathers gets a sparse gradient", "[optim][sparse]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto ids = tj::input("ids", {4}, tj::DType::i32), more = tj::input("more", {3}, tj::DType::i32);
  auto table = tj::variable("table", {9, 2});
  SECTION("one gather: the pair is the indices and the incoming gradient") {
    auto sg = tj::as_sparse(tj::grad(tj::sum(tj::gather(table, ids)), {table})[0]);
    REQUIRE(sg);
    CHECK(sg->indices.id() == ids.id());
    CHECK(sg->values.shape() == tj::Shape{4, 2});
    CHECK(sg->dense_shape == tj::Shape{9, 2});
    CHECK(sg->source == "ids");
  }
  SECTION("two gathers: their rows and values concatenated") {
    auto loss = tj::sum(tj::gather(table, ids)) + tj::sum(tj::gather(table, more));
    auto sg = tj::as_sparse(tj::grad(loss, {table})[0]);
    REQUIRE(sg);
    CHECK(sg->indices.shape() == tj::Shape{7});
    CHECK(sg->values.shape() == tj::Shape{7, 2});
  }
  SECTION("also read densely, with sparse = false, or along another axis: dense") {
    CHECK_FALSE(tj::as_sparse(tj::grad(tj::sum(tj::gather(table, ids)) + tj::sum(table), {table})[0]));
    CHECK_FALSE(tj::as_sparse(tj::grad(tj::sum(tj::gather(table, ids, 0, false)), {table})[0]));
    auto ids2 = tj::input("ids2", {3}, tj::DType::i32);
    CHECK_FALSE(tj::as_sparse(tj::grad(tj::sum(tj::gather(table, ids2, 1)), {table})[0]));
  }
}

TEST_CASE("sparse sgd equals the dense path bit for bit, duplicates and odd sizes", "[optim][sparse]") {
  for (const Size& s : kSizes) check_against_dense(tj::sgd(0.1), s.vocab, s.dim, s.n, /*bitwise=*/true);
}

// Two gathers of one table: one sparse gradient, its rows the two reads' in turn. The dense
// path sums the two parts' dense gradients, so a row read by both rounds in another order:
// within the bounds, not bit for bit.
TEST_CASE("a table read by two gathers is applied sparsely as the sum of both reads", "[optim][sparse]") {
  for (const Size& s : kSizes) {
    check_against_dense(tj::sgd(0.1), s.vocab, s.dim, s.n, /*bitwise=*/false, /*twice=*/true);
    check_against_dense(tj::momentum(0.1, 0.9), s.vocab, s.dim, s.n, /*bitwise=*/false, /*twice=*/true);
  }
}

TEST_CASE("sparse momentum decays every row's velocity as dense momentum does", "[optim][sparse]") {
  for (const Size& s : kSizes) {
    check_against_dense(tj::momentum(0.1, 0.9), s.vocab, s.dim, s.n, /*bitwise=*/true);
    check_against_dense(tj::momentum(0.1, 0.9, {.nesterov = true}), s.vocab, s.dim, s.n, /*bitwise=*/true);
  }
}

// Within the bounds, not bit for bit: the dense apply's fused kernel recomputes its shared
// values in each reader (jit/passes/fusion_plan.cpp), so its square root and division may be
// contracted differently from the row-wise apply's.
TEST_CASE("sparse adagrad equals the dense path within the error bound", "[optim][sparse]") {
  for (const Size& s : kSizes)
    check_against_dense(tj::adagrad(0.1, {.lr_decay = 0.01, .initial_accumulator = 0.1}), s.vocab, s.dim, s.n,
                        /*bitwise=*/false);
}

// loss = sum(b * embedding(ids)): the gradient of row r is the sum of b over the positions
// naming r. Step 1 reads rows {3, 1, 3}, step 2 rows {0, 0, 2}.
TEST_CASE("sparse adam is PyTorch's SparseAdam: only the touched rows and their moments move", "[optim][sparse]") {
  const int64_t vocab = 5, dim = 2;
  tj::Graph g;
  tj::Tensor loss, table;
  {
    tj::GraphScope use(g);
    auto ids = tj::input("ids", {3}, tj::DType::i32);
    auto b = tj::input("b", {3, dim});
    loss = tj::sum(b * tj::embedding(ids, vocab, dim, "embed"));
    table = tj::trainable_variables()[0];
    tj::adam(0.1, {.beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3}).apply(tj::grad(loss, {table}), {table});
  }
  const double lr = 0.1, b1 = 0.8, b2 = 0.9, eps = 1e-3;
  const std::vector<std::vector<int>> ids = {{3, 1, 3}, {0, 0, 2}};
  const std::vector<std::vector<double>> bs = {{0.5, -1.0, 0.25, 2.0, -0.75, 0.125},
                                              {1.5, 0.5, -0.5, -1.25, 0.75, 1.0}};
  tj::reference::Variables ref = tj::reference::initialize_variables(g, 1);
  tj::HostVariables jit = to_host_vars(ref);
  tj::CpuProgram program(g, {loss}, true);
  std::vector<double> w = ref.at("embed/embeddings").data, m(vocab * dim, 0), v(vocab * dim, 0);
  for (int k = 0; k < 2; ++k) {
    tj::reference::Feeds feeds{{"ids", tj::reference::Array(tj::Shape{3}, {double(ids[k][0]), double(ids[k][1]), double(ids[k][2])}, tj::DType::i32)},
                               {"b", tj::reference::Array(tj::Shape{3, dim}, bs[k])}};
    // By hand: each touched row's summed gradient, then SparseAdam's update of that row alone.
    std::vector<double> grad(vocab * dim, 0);
    std::vector<bool> touched(vocab, false);
    for (int i = 0; i < 3; ++i) {
      touched[ids[k][i]] = true;
      for (int d = 0; d < dim; ++d) grad[ids[k][i] * dim + d] += bs[k][i * dim + d];
    }
    const double t = k + 1, step_size = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (int r = 0; r < vocab; ++r)
      for (int d = 0; d < dim && touched[r]; ++d) {
        const int i = r * dim + d;
        m[i] += (1 - b1) * (grad[i] - m[i]);
        v[i] += (1 - b2) * (grad[i] * grad[i] - v[i]);
        w[i] -= step_size * m[i] / (std::sqrt(v[i]) + eps);
      }
    tj::reference::run(g, {loss}, feeds, ref, {.step = uint64_t(k), .run_update_ops = true});
    const std::string at = "after step " + std::to_string(k + 1);
    require_state(to_state(ref), {{"embed/embeddings", w}, {"embed/embeddings/adam_m", m}, {"embed/embeddings/adam_v", v}},
                  1e-12, 1e-9, at + " (reference interpreter against the hand computation)");
    // The JIT within its bounds of the reference run from the JIT's own state.
    tj::reference::Variables from_jit;
    for (const auto& [name, t] : jit) from_jit[name] = tj::testing::to_array(t);
    const tj::HostVariables before = jit;
    tj::reference::ErrorBounds bounds;
    tj::reference::run(g, {loss}, feeds, from_jit, {.step = uint64_t(k), .run_update_ops = true, .bounds = &bounds});
    program.run(host_feeds(feeds), jit, k);
    for (const auto& [name, want] : from_jit)
      tj::testing::check_within_bounds(tj::testing::to_array(jit.at(name)), want, bounds.variables.at(name),
                                       at + ", \"" + name + "\" (CPU JIT)");
    // Lazy: the rows step 2 does not read keep their weights and moments bit for bit, where
    // dense Adam would move rows 1 and 3 again on their first-moment momentum.
    if (k == 1)
      for (int r : {1, 3, 4})
        for (int d = 0; d < dim; ++d)
          for (const char* name : {"embed/embeddings", "embed/embeddings/adam_m", "embed/embeddings/adam_v"})
            CHECK(jit.at(name).f32[r * dim + d] == before.at(name).f32[r * dim + d]);
  }
}

TEST_CASE("an optimiser without a sparse apply names the variable and sparse = false", "[optim][sparse][errors]") {
  EmbedModel m(7, 3, 5, true);
  tj::GraphScope use(m.graph);
  using Catch::Contains;
  const std::string var = "variable \"embed/embeddings\"", fix = "sparse = false";
  CHECK_THROWS_WITH(tj::rmsprop(0.01).apply(m.grads, m.vars),
                    Contains(var) && Contains("rmsprop decays every row") && Contains(fix) && Contains(here));
  CHECK_THROWS_WITH(tj::adamw(0.01).apply(m.grads, m.vars),
                    Contains(var) && Contains("weight decay reads every row") && Contains(fix) && Contains(here));
  CHECK_THROWS_WITH(tj::sgd(0.1).with_clip_by_global_norm(1).apply(m.grads, m.vars),
                    Contains(var) && Contains("clipping by global norm") && Contains(fix) && Contains(here));
}

namespace {

// Bytes of temporaries (the buffer plan's arena: variables and optimiser slots are not in it)
// of one training step of an embedding [vocab, 128] read by ids [B, 16] at B = 128, so
// B T = 2048 rows read: loss = mean((embedding + bias - target)^2).
int64_t embedding_step_peak(int64_t vocab, const tj::Optimizer& opt, bool sparse) {
  tj::Graph g;
  tj::GraphScope use(g);
  auto ids = tj::input("ids", {tj::kBatch, 16}, tj::DType::i32);
  auto target = tj::input("target", {tj::kBatch, 16, 128});
  auto h = tj::embedding(ids, vocab, 128, "embed", {.sparse = sparse}) + tj::variable("bias", {128});
  auto diff = h - target;
  auto loss = tj::mean(diff * diff);
  auto vars = tj::trainable_variables();
  opt.apply(tj::grad(loss, vars), vars);
  return tj::CpuProgram(g, {loss}, true).peak_bytes(128);
}

}  // namespace

// The bar: at V = 32768, D = 128, B T = 2048 the step's peak is within 2x of the
// V = 256 case, apart from the table and its slots. The dense path's peak, for contrast,
// grows by the [V, 128] gradient (16 MB at V = 32768).
TEST_CASE("embedding memory scales with the rows touched, not the vocabulary", "[optim][sparse]") {
  for (const tj::Optimizer& opt : {tj::sgd(0.1), tj::momentum(0.1, 0.9), tj::momentum(0.1, 0.9, {.nesterov = true}),
                                   tj::adam(1e-3), tj::adagrad(0.1)}) {
    const int64_t small = embedding_step_peak(256, opt, true), large = embedding_step_peak(32768, opt, true);
    const int64_t dense = embedding_step_peak(32768, opt, false);
    INFO(opt.str() << ": peak " << small << " bytes at V = 256, " << large << " at V = 32768 (dense path: " << dense
                   << ")");
    CHECK(large <= 2 * small);
    CHECK(dense >= int64_t{32768} * 128 * 4);  // the dense path holds the [V, 128] gradient
  }
}
