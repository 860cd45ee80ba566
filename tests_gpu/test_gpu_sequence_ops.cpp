// The sequence-model ops through CudaProgram equal the reference interpreter within their
// error bounds, as the CPU JIT's tests run them (tests/jit/sequence_cases.h): gathers and
// embeddings with their gradients, iota and causal masks, layer_norm, rms_norm and softmax
// forward and backward, at batches and widths of 1, 7 and 127. An index out of range raises
// the CPU backend's error, word for word.
#include "dsl/sparse_gradients.h"
#include "gpu_check.h"
#include "tests/jit/sequence_cases.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Tensor;
using namespace tj::testing;

namespace {

cases::Runner on_gpu() {
  return [](const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::reference::Feeds& feeds,
            tj::reference::Variables& vars, bool updates, uint64_t step) {
    return run_gpu_and_reference(g, fetches, feeds, vars, updates, step);
  };
}

}  // namespace

TEST_CASE("GPU: gathers and embeddings match the reference, gradients included", "[gpu]") {
  cases::gathers_and_embeddings(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: iota, causal masks and a masked softmax match the reference", "[gpu]") {
  cases::iota_and_masks(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: layer_norm, rms_norm and softmax match the reference forward and backward", "[gpu]") {
  cases::norms_and_softmax(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: composed layer_norm and rms_norm match the reference forward and backward", "[gpu]") {
  cases::norms_and_softmax(on_gpu(), " (GPU)", false);
}

TEST_CASE("GPU: unfused attention matches the reference, causal and not, gradients included", "[gpu]") {
  cases::attention(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: a gather's gradient is bitwise the CPU backend's", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto ids = tj::input("ids", {kBatch, 9}, tj::DType::i32);
  auto table = tj::input("table", {6, 5});
  auto loss = tj::sum(tj::gather(table, ids) * tj::input("r", {kBatch, 9, 5}));
  auto dtable = tj::grad(loss, {table})[0];
  tj::HostFeeds feeds{{"ids", to_host(cases::sequence_ids(13, 9, 6))},
                      {"table", to_host(random_array({6, 5}, 1))},
                      {"r", to_host(random_array({13, 9, 5}, 2))}};
  tj::HostVariables vars;
  const auto cpu = tj::CpuProgram(g, {dtable}).run(feeds, vars);
  const auto gpu = tj::CudaProgram(g, {dtable}).run(feeds, vars);
  CHECK(cpu[0].f32 == gpu[0].f32);  // the same additions in the same order
}

TEST_CASE("GPU: an index out of range raises the CPU backend's error", "[gpu]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto ids = tj::input("ids", {kBatch, 3}, tj::DType::i32);
  auto e = tj::embedding(ids, 10, 4, "embed");
  tj::HostTensor l(tj::Shape{2, 3}, tj::DType::i32);
  l.i32 = {1, 2, 3, 4, 12, -1};
  tj::HostFeeds feeds{{"ids", l}};
  tj::HostVariables vars{{"embed/embeddings", to_host(random_array({10, 4}, 3))}};
  std::string cpu_message, gpu_message;
  try { tj::CpuProgram(g, {e}).run(feeds, vars); } catch (const tj::Error& err) { cpu_message = err.what(); }
  try { tj::CudaProgram(g, {e}).run(feeds, vars); } catch (const tj::Error& err) { gpu_message = err.what(); }
  CHECK_THAT(gpu_message, Catch::Contains("gather: index 12 at [1,1] of input \"ids\" is out of range [0, 10)"));
  CHECK(gpu_message == cpu_message);
}

// The sparse apply (combine_rows and scatter_rows: tj_combine_rows_* and tj_scatter_rows) of
// each optimiser that has one, two steps from the reference's initial state, every variable
// and slot within the reference's bounds; V = 1, 7, 127 with N = 1, 7, 127 reads, the first
// row read again last, so rows repeat and, at V = 127, most rows go untouched by a step.
TEST_CASE("GPU: the sparse apply of sgd, momentum, adagrad and adam matches the reference, duplicates and odd sizes",
          "[gpu]") {
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {7, 7}, {127, 7}, {7, 127}};
  const tj::Optimizer optimizers[] = {tj::sgd(0.1), tj::momentum(0.1, 0.9), tj::adagrad(0.1), tj::adam(0.1)};
  for (const auto& [vocab, n] : sizes)
    for (const tj::Optimizer& opt : optimizers) {
      tj::Graph g;
      tj::GraphScope use(g);
      auto ids = tj::input("ids", {kBatch}, tj::DType::i32);
      auto a = tj::input("a", {kBatch, 3});
      auto h = tj::embedding(ids, vocab, 3, "embed");
      auto loss = tj::sum(a * h + 0.5 * h * h);
      auto table = tj::trainable_variables();
      opt.apply(tj::grad(loss, table), table);
      REQUIRE(tj::as_sparse(tj::grad(loss, table)[0]));
      tj::reference::Variables vars = tj::reference::initialize_variables(g, 1);
      for (int step = 0; step < 2; ++step) {
        tj::reference::Array index(tj::Shape{n}, tj::DType::i32);
        for (int64_t i = 0; i < n; ++i) index[i] = static_cast<double>((i * 37 + step * 11) % vocab);
        index[n - 1] = index[0];
        auto r = run_gpu_and_reference(g, {loss}, {{"ids", index}, {"a", random_array({n, 3}, 5 + step)}}, vars,
                                       true, step);
        require_close(r, opt.str() + " V=" + std::to_string(vocab) + " N=" + std::to_string(n) + " step " +
                             std::to_string(step + 1) + " (GPU)");
      }
    }
}

TEST_CASE("GPU: fused attention matches the reference, causal and not, gradients included", "[gpu]") {
  cases::attention(on_gpu(), " (GPU)", true);
}

TEST_CASE("GPU: fused attention of unequal queries and keys, shared heads and a second key tile matches the reference", "[gpu]") {
  cases::attention_shapes(on_gpu(), " (GPU)");
}

TEST_CASE("GPU: fused attention at head dimensions of 16 and more matches the reference", "[gpu]") {
  cases::attention_wide_heads(on_gpu(), " (GPU)");
}

// A dense layer over [B,T,D]: its products share the weight (one product of stacked rows) and
// the weight's gradient sums the batch's products (one product, batches along k).
TEST_CASE("GPU: a dense layer over B x T x D and its weight gradient (folded products) match the reference", "[gpu]") {
  for (int64_t batch : {1, 7}) {
    tj::Graph g;
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, 7, 9});
    auto w = tj::input("w", {9, 5});
    auto y = tj::matmul(x, w);
    auto dw = tj::grad(tj::sum(y * y), {w})[0];
    tj::reference::Variables vars;
    auto r = run_gpu_and_reference(g, {y, dw},
                                   {{"x", random_array({batch, 7, 9}, 3, -2, 2)}, {"w", random_array({9, 5}, 4, -2, 2)}},
                                   vars, false, 0);
    require_close(r, "dense over [B,T,D], batch " + std::to_string(batch) + " (GPU)");
  }
}
