// Every op through CudaProgram equals the reference interpreter (relative error <= 1e-5 of
// max(1, |value|), in f32, as the CPU JIT's tests), at odd sizes and with the batch bound at
// run time: the op set of tests/jit/op_cases.h and the graphs of tests/jit/graph_cases.h
// (integer labels, convolutions and pools with their gradients, random numbers, update ops),
// as the CPU JIT's tests run them.
#include "gpu_check.h"
#include "jit/reference/interpreter.h"
#include "runtime/cpu/cpu_program.h"
#include "tests/jit/graph_cases.h"
#include "tests/jit/nan_cases.h"
#include "tests/jit/op_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

// A GPU as tests/jit/graph_cases.h runs it.
cases::Runner on_gpu() {
  return [](const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::reference::Feeds& feeds,
            tj::reference::Variables& vars, bool updates, uint64_t step) {
    return run_gpu_and_reference(g, fetches, feeds, vars, updates, step);
  };
}

}  // namespace

TEST_CASE("GPU: every elementwise, reduction and layout op matches the reference", "[gpu]") {
  for (const Case& c : op_cases())
    for (int64_t batch : {1, 7, 127}) cases::one_op(on_gpu(), c, batch, " (GPU)");
}

TEST_CASE("GPU: large batches take the vector and multi-block paths and match the reference", "[gpu]") {
  // 4099 rows: grid-stride loops that wrap, float4 paths, block-per-row reductions.
  for (const char* name : {"add broadcast", "sum batch keepdims", "mean batch", "softmax", "matmul transposed"})
    for (const Case& c : op_cases())
      if (std::string(c.name) == name) cases::one_op(on_gpu(), c, 4099, " (GPU)");
}

TEST_CASE("GPU: integer labels, one_hot and cross entropy match the reference", "[gpu]") {
  cases::cross_entropy_and_one_hot(on_gpu(), " (GPU)");
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
  CHECK_THAT(gpu_message, Catch::Contains("label 12 at flat index 2 of input \"labels\" is out of range [0, 10)"));
  CHECK(gpu_message == cpu_message);
}

TEST_CASE("GPU: convolution and pools match the reference, gradients included", "[gpu]") {
  cases::convolutions_and_pools(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: max pools after a ReLU, its mask in the pool gradient, match the reference", "[gpu]") {
  cases::relu_then_pools(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: max pools computed where their input is made, gradients routed by the winner, match the reference", "[gpu]") {
  cases::max_pools_in_their_producers(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: dropout's mask, drawn again by each kernel that reads it, is the reference's", "[gpu]") {
  cases::dropout_drawn_by_each_reader(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: random_uniform draws the reference's numbers, fresh each step", "[gpu]") {
  cases::random_uniform_steps(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: relu keeps a NaN, and its gradient there is 0", "[gpu]") {
  cases::relu_keeps_nan(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: max, max reductions and max pools keep a NaN, and their gradients go to it", "[gpu]") {
  nan_cases::max_keeps_nan(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: Adam's bias corrections 1 - beta^t are within 10 roundings of the exact value", "[gpu]") {
  cases::bias_corrections(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: pow's gradient where the base or the exponent is 0 is PyTorch's", "[gpu]") {
  cases::pow_gradient_at_zero(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: update ops write the variables after every read of the old values", "[gpu]") {
  cases::batch_norm_updates(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: an SGD momentum step updates weights and momenta in place, as the reference does", "[gpu]") {
  cases::momentum_step(on_gpu(), " (GPU)");
}
