// Every op through the CPU JIT equals the reference interpreter (relative error <= 1e-5 of
// max(1, |value|), in f32), at odd sizes and with the batch bound at run time.
#include <functional>

#include "jit_check.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

struct Case {
  const char* name;
  std::function<Tensor(Tensor x, Tensor y)> build;  // x [B,7], y [7] or [B,7] as declared
  bool y_batched = false;
  double lo = -2, hi = 2;
};

void check_case(const Case& c, int64_t batch) {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto y = c.y_batched ? tj::input("y", {kBatch, 7}) : tj::input("y", {7});
  auto out = c.build(x, y);
  tj::reference::Feeds feeds{{"x", random_array({batch, 7}, 1, c.lo, c.hi)},
                             {"y", random_array(c.y_batched ? tj::Shape{batch, 7} : tj::Shape{7}, 2, c.lo, c.hi)}};
  tj::reference::Variables vars;
  auto r = run_both(g, {out}, feeds, vars);
  require_close(r, 1e-5, std::string(c.name) + " at batch " + std::to_string(batch));
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"neg", [](Tensor x, Tensor) { return -x; }},
      {"exp", [](Tensor x, Tensor) { return tj::exp(x); }},
      {"log", [](Tensor x, Tensor) { return tj::log(x); }, false, 0.1, 3},
      {"sqrt", [](Tensor x, Tensor) { return tj::sqrt(x); }, false, 0.1, 3},
      {"rsqrt", [](Tensor x, Tensor) { return tj::rsqrt(x); }, false, 0.1, 3},
      {"abs", [](Tensor x, Tensor) { return tj::abs(x); }},
      {"sign", [](Tensor x, Tensor) { return tj::sign(x); }},
      {"relu", [](Tensor x, Tensor) { return tj::relu(x); }},
      {"sigmoid", [](Tensor x, Tensor) { return tj::sigmoid(x); }},
      {"tanh", [](Tensor x, Tensor) { return tj::tanh(x); }},
      {"erf", [](Tensor x, Tensor) { return tj::erf(x); }},
      {"gelu", [](Tensor x, Tensor) { return tj::gelu(x); }},
      {"softplus", [](Tensor x, Tensor) { return tj::softplus(x * 20); }},
      {"add broadcast", [](Tensor x, Tensor y) { return x + y; }},
      {"sub", [](Tensor x, Tensor y) { return x - y; }, true},
      {"mul", [](Tensor x, Tensor y) { return x * y; }},
      {"div", [](Tensor x, Tensor y) { return x / y; }, false, 0.5, 2},
      {"maximum", [](Tensor x, Tensor y) { return tj::maximum(x, y); }, true},
      {"minimum", [](Tensor x, Tensor y) { return tj::minimum(x, y); }},
      {"pow", [](Tensor x, Tensor y) { return tj::pow(x, y); }, false, 0.5, 2},
      {"comparisons", [](Tensor x, Tensor y) { return (x < y) + 2 * (x <= y) + 4 * (x > y) + 8 * (x >= y) + 16 * (x == x) + 32 * (x != y); }},
      {"where", [](Tensor x, Tensor y) { return tj::where(x > 0, x, y * 3); }},
      {"cast round trip", [](Tensor x, Tensor) { return tj::cast(tj::cast(x * 10, tj::DType::i32), tj::DType::f32); }},
      {"sum all", [](Tensor x, Tensor) { return tj::sum(x); }},
      {"sum rows", [](Tensor x, Tensor) { return tj::sum(x, {1}); }},
      {"sum batch keepdims", [](Tensor x, Tensor) { return tj::sum(x, {0}, true); }},
      {"mean batch", [](Tensor x, Tensor) { return tj::mean(x * x, {0}); }},
      {"mean all", [](Tensor x, Tensor) { return tj::mean(x); }},
      {"max rows", [](Tensor x, Tensor) { return tj::max(x, {-1}, true); }},
      {"max batch", [](Tensor x, Tensor) { return tj::max(x, {0}); }},
      {"transpose", [](Tensor x, Tensor) { return tj::transpose(x) * 2; }},
      {"reshape", [](Tensor x, Tensor) { return tj::reshape(x + 1, {kBatch, 7, 1}); }},
      {"broadcast_to", [](Tensor, Tensor y) { return tj::broadcast_to(y, {3, 7}); }},
      {"slice", [](Tensor x, Tensor) { return tj::slice(x, {0, 2}, {kBatch, 6}) + 1; }},
      {"pad", [](Tensor x, Tensor) { return tj::pad(x, {0, 1}, {0, 2}); }},
      {"concat", [](Tensor x, Tensor y) { return tj::concat({x, y * 2}, 1); }, true},
      {"split", [](Tensor x, Tensor) { auto p = tj::split(x, std::vector<int64_t>{3, 4}, 1); return tj::concat({p[1], p[0]}, 1); }},
      {"matmul", [](Tensor x, Tensor y) { return tj::matmul(x, tj::reshape(y, {7, 1})); }},
      {"matmul transposed", [](Tensor x, Tensor y) { return tj::matmul(tj::transpose(x), y); }, true},
      {"batched matmul", [](Tensor x, Tensor) { auto a = tj::reshape(x, {kBatch, 7, 1}); return tj::matmul(a, tj::transpose(a, {0, 2, 1})); }},
      {"argmax", [](Tensor x, Tensor) { return tj::cast(tj::argmax(x, 1), tj::DType::f32); }},
      {"softmax", [](Tensor x, Tensor) { return tj::softmax(x * 3); }},
      {"log_softmax", [](Tensor x, Tensor) { return tj::log_softmax(x * 3, 0); }},
      {"soft-label cross entropy", [](Tensor x, Tensor y) { return tj::softmax_cross_entropy(x, tj::softmax(y)); }, true},
      {"l2_loss", [](Tensor x, Tensor y) { return tj::l2_loss(std::vector<Tensor>{x, y}); }},
  };
  return all;
}

}  // namespace

TEST_CASE("every elementwise, reduction and layout op matches the reference", "[cpu][jit]") {
  for (const Case& c : cases())
    for (int64_t batch : {1, 7, 127}) check_case(c, batch);
}

TEST_CASE("integer labels: one_hot and cross entropy match the reference", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::input("logits", {kBatch, 10});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  for (int64_t batch : {1, 7, 127}) {
    tj::reference::Array l({batch}, tj::DType::i32);
    for (int64_t i = 0; i < batch; ++i) l[i] = (i * 7) % 10;
    tj::reference::Variables vars;
    auto r = run_both(g, {loss, tj::one_hot(labels, 10)}, {{"logits", random_array({batch, 10}, 3, -4, 4)}, {"labels", l}}, vars);
    require_close(r, 1e-5, "cross entropy at batch " + std::to_string(batch));
  }
}

TEST_CASE("convolution and pools match the reference", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3, 7, 9});
  auto w = tj::input("w", {5, 3, 3, 3});
  auto conv = tj::conv2d(x, w, {.stride = 2, .pad = 1});
  auto maxp = tj::max_pool2d(x, {.kernel = 3, .stride = 2, .pad = 1});
  auto avgp = tj::avg_pool2d(x, {.kernel = 2});
  auto loss = tj::sum(conv * conv) + tj::sum(maxp * maxp) + tj::sum(avgp * avgp * avgp);
  auto grads = tj::grad(loss, {x, w});
  tj::ThreadPool threads(2);  // the batched im2col and the pools split over threads too
  for (tj::ThreadPool* pool : {static_cast<tj::ThreadPool*>(nullptr), &threads})
    for (int64_t batch : {1, 2, 5}) {
      tj::reference::Variables vars;
      auto r = run_both(g, {conv, maxp, avgp, grads[0], grads[1]},
                        {{"x", random_array({batch, 3, 7, 9}, 4)}, {"w", random_array({5, 3, 3, 3}, 5)}},
                        vars, false, pool);
      require_close(r, 1e-5, "conv/pool at batch " + std::to_string(batch));
    }
}

TEST_CASE("random_uniform draws the reference's numbers, fresh each step", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto u = tj::random_uniform_like(x, 42);
  tj::reference::Variables vars;
  auto r = run_both(g, {u}, {{"x", random_array({5, 7}, 6)}}, vars);
  require_close(r, 1e-7, "random_uniform");
}

TEST_CASE("update ops write the variables after every read of the old values", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 4});
  auto y = tj::batch_norm(x, /*training=*/true, "bn", {.axis = 1});
  auto loss = tj::sum(y * y);
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 3);
  auto r = run_both(g, {loss, y}, {{"x", random_array({9, 4}, 7)}}, vars, /*updates=*/true);
  require_close(r, 1e-5, "batch_norm with moving-average updates");
}

TEST_CASE("an SGD momentum step updates weights and momenta in place, as the reference does", "[cpu][jit]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 6});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto logits = tj::dense(tj::relu(tj::dense(x, 5, "fc1")), 3, "fc2");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  auto vars = tj::trainable_variables();
  auto grads = tj::grad(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string name = vars[i].node().attrs.name + "/momentum";
    auto m = tj::variable(name, vars[i].shape(), {.init = tj::init::zeros(), .trainable = false});
    auto m_next = 0.9 * m + grads[i];
    tj::assign(m, m_next);
    tj::assign(vars[i], vars[i] - 0.05 * m_next);
  }
  tj::reference::Array l({7}, tj::DType::i32);
  for (int i = 0; i < 7; ++i) l[i] = i % 3;
  auto vars_ref = tj::reference::initialize_variables(g, 11);
  auto r = run_both(g, {loss}, {{"x", random_array({7, 6}, 8)}, {"labels", l}}, vars_ref, /*updates=*/true);
  require_close(r, 1e-5, "momentum step");
  // Every update wrote its variable directly: no temporaries copied over at the end.
  CHECK(r.program->program().copies.empty());
}
