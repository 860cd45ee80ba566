// Every op through CudaProgram equals the reference interpreter (relative error <= 1e-5 of
// max(1, |value|), in f32, as the CPU JIT's tests), at odd sizes and with the batch bound at
// run time: the op set of tests/jit/op_cases.h, integer labels, convolutions and pools with
// their gradients, random numbers, and update ops.
#include "gpu_check.h"
#include "tests/jit/op_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

void check_case(const Case& c, int64_t batch) {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto y = c.y_batched ? tj::input("y", {kBatch, 7}) : tj::input("y", {7});
  auto out = c.build(x, y);
  tj::reference::Feeds feeds{{"x", random_array({batch, 7}, 1, c.lo, c.hi)},
                             {"y", random_array(c.y_batched ? tj::Shape{batch, 7} : tj::Shape{7}, 2, c.lo, c.hi)}};
  tj::reference::Variables vars;
  auto r = run_gpu_and_reference(g, {out}, feeds, vars);
  require_close(r, 1e-5, std::string(c.name) + " at batch " + std::to_string(batch) + " (GPU)");
}

}  // namespace

TEST_CASE("GPU: every elementwise, reduction and layout op matches the reference", "[gpu]") {
  for (const Case& c : op_cases())
    for (int64_t batch : {1, 7, 127}) check_case(c, batch);
}

TEST_CASE("GPU: large batches take the vector and multi-block paths and match the reference", "[gpu]") {
  // 4099 rows: grid-stride loops that wrap, float4 paths, block-per-row reductions.
  for (const char* name : {"add broadcast", "sum batch keepdims", "mean batch", "softmax", "matmul transposed"})
    for (const Case& c : op_cases())
      if (std::string(c.name) == name) check_case(c, 4099);
}

TEST_CASE("GPU: integer labels, one_hot and cross entropy match the reference", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::input("logits", {kBatch, 10});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  for (int64_t batch : {1, 7, 127}) {
    tj::reference::Array l({batch}, tj::DType::i32);
    for (int64_t i = 0; i < batch; ++i) l[i] = (i * 7) % 10;
    tj::reference::Variables vars;
    auto r = run_gpu_and_reference(g, {loss, tj::one_hot(labels, 10)},
                                   {{"logits", random_array({batch, 10}, 3, -4, 4)}, {"labels", l}}, vars);
    require_close(r, 1e-5, "cross entropy at batch " + std::to_string(batch) + " (GPU)");
  }
}

TEST_CASE("GPU: a label out of range raises the CPU backend's error", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto hot = tj::one_hot(labels, 10);
  tj::HostTensor l(tj::Shape{4}, tj::DType::i32);
  l.i32 = {1, 2, 12, -1};
  tj::HostFeeds feeds{{"labels", l}};
  tj::HostVariables vars;
  std::string cpu_message, gpu_message;
  try { tj::CpuProgram(g, {hot}).run(feeds, vars); } catch (const tj::Error& e) { cpu_message = e.what(); }
  try { tj::CudaProgram(g, {hot}).run(feeds, vars); } catch (const tj::Error& e) { gpu_message = e.what(); }
  CHECK_THAT(gpu_message, Catch::Contains("label 12 at flat index 2 is out of range [0, 10)"));
  CHECK(gpu_message == cpu_message);
}

TEST_CASE("GPU: convolution and pools match the reference, gradients included", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 3, 7, 9});
  auto w = tj::input("w", {5, 3, 3, 3});
  auto conv = tj::conv2d(x, w, {.stride = 2, .pad = 1});
  auto maxp = tj::max_pool2d(x, {.kernel = 3, .stride = 2, .pad = 1});
  auto avgp = tj::avg_pool2d(x, {.kernel = 2});
  auto loss = tj::sum(conv * conv) + tj::sum(maxp * maxp) + tj::sum(avgp * avgp * avgp);
  auto grads = tj::grad(loss, {x, w});
  for (int64_t batch : {1, 2, 5}) {
    tj::reference::Variables vars;
    auto r = run_gpu_and_reference(g, {conv, maxp, avgp, grads[0], grads[1]},
                                   {{"x", random_array({batch, 3, 7, 9}, 4)}, {"w", random_array({5, 3, 3, 3}, 5)}},
                                   vars);
    require_close(r, 1e-5, "conv/pool at batch " + std::to_string(batch) + " (GPU)");
  }
}

TEST_CASE("GPU: random_uniform draws the reference's numbers, fresh each step", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto u = tj::random_uniform_like(x, 42);
  for (uint64_t step : {0ull, 3ull}) {
    tj::reference::Variables vars;
    auto r = run_gpu_and_reference(g, {u}, {{"x", random_array({5, 7}, 6)}}, vars, false, step);
    require_close(r, 1e-7, "random_uniform at step " + std::to_string(step) + " (GPU)");
  }
}

TEST_CASE("GPU: update ops write the variables after every read of the old values", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 4});
  auto y = tj::batch_norm(x, /*training=*/true, "bn", {.axis = 1});
  auto loss = tj::sum(y * y);
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 3);
  auto r = run_gpu_and_reference(g, {loss, y}, {{"x", random_array({9, 4}, 7)}}, vars, /*updates=*/true);
  require_close(r, 1e-5, "batch_norm with moving-average updates (GPU)");
}

TEST_CASE("GPU: an SGD momentum step updates weights and momenta in place, as the reference does", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 6});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto logits = tj::dense(tj::relu(tj::dense(x, 5, "fc1")), 3, "fc2");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  tj::momentum(0.05, 0.9).apply(tj::grad(loss, tj::trainable_variables()), tj::trainable_variables());
  tj::reference::Array l({7}, tj::DType::i32);
  for (int i = 0; i < 7; ++i) l[i] = i % 3;
  auto vars = tj::reference::initialize_variables(g, 11);
  auto r = run_gpu_and_reference(g, {loss}, {{"x", random_array({7, 6}, 8)}, {"labels", l}}, vars, /*updates=*/true);
  require_close(r, 1e-5, "momentum step (GPU)");
}
