// Graphs of the sequence-model ops every backend must run as the reference interpreter does:
// gathers and embeddings with their gradients (repeated rows, a gather along an inner axis),
// iota and causal masks, layer_norm, rms_norm and softmax forward and backward, at batches 1,
// 7 and 127 and rows of 1, 7 and 127 features. Run on the CPU JIT by tests/jit/test_sequence_ops.cpp
// and on a GPU by tests_gpu/test_gpu_sequence_ops.cpp; `where` names the backend.
#pragma once

#include <string>

#include "graph_cases.h"
#include "towerjit.h"

namespace towerjit::testing::cases {

// i32 ids [batch, t] below `vocab`, every row visited several times once batch * t > vocab,
// the first and last rows always among them.
inline reference::Array sequence_ids(int64_t batch, int64_t t, int64_t vocab) {
  reference::Array ids({batch, t}, DType::i32);
  for (int64_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<double>((i * 7 + i / 3) % vocab);
  ids[0] = 0;
  ids[ids.size() - 1] = static_cast<double>(vocab - 1);
  return ids;
}

// An embedding plus learned positions (a gather at arange(T)), and a gather along axis 1 of a
// fed table; the loss weighs every output element differently, so each gradient row is checked.
inline void gathers_and_embeddings(const Runner& run, const std::string& where) {
  constexpr int64_t kT = 5, kVocab = 11, kDim = 7;
  Graph g;
  GraphScope use(g);
  auto ids = input("ids", {kBatch, kT}, DType::i32);
  auto picks = input("picks", {kBatch}, DType::i32);
  auto table = input("table", {3, 13, 4});
  auto tokens = embedding(ids, kVocab, kDim, "embed");
  Tensor positions = gather(variable("positions", {kT, kDim}, {.init = init::normal(0, 1)}), arange(kT));
  auto h = tokens + positions;                         // [B, T, D]
  auto side = gather(table, picks, 1);                 // [3, B, 4]
  auto loss = sum(h * input("r", {kBatch, kT, kDim})) + sum(side * side);
  const std::vector<Tensor> vars = trainable_variables();
  std::vector<Tensor> wrt = vars;
  wrt.push_back(table);
  const std::vector<Tensor> grads = grad(loss, wrt);
  for (int64_t batch : {1, 7, 127}) {
    reference::Array p({batch}, DType::i32);
    for (int64_t i = 0; i < batch; ++i) p[i] = static_cast<double>((i * 5) % 13);
    reference::Variables v = reference::initialize_variables(g, 5);
    std::vector<Tensor> fetches{h, side, loss};
    fetches.insert(fetches.end(), grads.begin(), grads.end());
    auto r = run(g, fetches,
                 {{"ids", sequence_ids(batch, kT, kVocab)}, {"picks", p},
                  {"table", random_array({3, 13, 4}, 8)}, {"r", random_array({batch, kT, kDim}, 9)}},
                 v, false, 0);
    require_close(r, "gathers at batch " + std::to_string(batch) + where);
  }
}

// iota along the batch and another axis, arange, causal masks of 1, 7 and 127, tril, and a
// causally masked softmax with its gradient.
inline void iota_and_masks(const Runner& run, const std::string& where) {
  for (int64_t t : {1, 7, 127}) {
    Graph g;
    GraphScope use(g);
    auto x = input("x", {kBatch, t, t});
    auto along_batch = iota({kBatch, 3}, 0, DType::f32);
    auto along_last = iota({kBatch, 3}, -1);
    auto scores = towerjit::where(causal_mask(t) > 0.5, x, Operand(-1e9));
    auto p = softmax(scores);
    auto loss = sum(p * input("r", {kBatch, t, t}));
    auto dx = grad(loss, {x})[0];
    for (int64_t batch : {1, 7}) {
      reference::Variables v;
      auto r = run(g, {along_batch, along_last, arange(t), causal_mask(t), tril(x), p, dx},
                   {{"x", random_array({batch, t, t}, 10, -3, 3)}, {"r", random_array({batch, t, t}, 11)}}, v,
                   false, 0);
      require_close(r, "iota and masks, T = " + std::to_string(t) + " at batch " + std::to_string(batch) + where);
    }
  }
}

// layer_norm, rms_norm and softmax over rows of `width` features, forward and every gradient:
// of x [B, 3, width] (3, 21 and 381 rows) and of z [B, width] (1, 7 and 127 rows). `fused`:
// the normalisations and softmax as the fused ops (their default), or composed of mean, rsqrt,
// log-sum-exp and the rest.
inline void norms_and_softmax(const Runner& run, const std::string& where, bool fused = true) {
  for (int64_t width : {1, 7, 127}) {
    Graph g;
    GraphScope use(g);
    auto x = input("x", {kBatch, 3, width});
    auto z = input("z", {kBatch, width});
    auto ln = layer_norm(x, "ln", {.fused = fused});
    auto rms = rms_norm(x, "rms", {.fused = fused});
    auto sm = softmax(x, {.fused = fused});
    auto sm_z = softmax(z * 3.0f, {.fused = fused});
    auto ln_z = layer_norm(z, "ln_z", {.epsilon = 1e-3, .fused = fused});
    auto rms_z = rms_norm(z, "rms_z", {.fused = fused});
    auto loss = sum(ln * input("r1", {kBatch, 3, width})) + sum(rms * input("r2", {kBatch, 3, width})) +
                sum(sm * input("r3", {kBatch, 3, width})) + sum((ln_z + 2.0f * rms_z + sm_z) * input("r4", {kBatch, width}));
    std::vector<Tensor> wrt = trainable_variables();
    wrt.push_back(x);
    wrt.push_back(z);
    const std::vector<Tensor> grads = grad(loss, wrt);
    for (int64_t batch : {1, 7, 127}) {
      reference::Variables v = reference::initialize_variables(g, 3);
      // Gains and biases away from their initial ones and zeros, so a wrong broadcast shows.
      for (auto& [name, a] : v) a = random_array(a.shape, 20 + static_cast<uint32_t>(name.size()), 0.5, 1.5);
      std::vector<Tensor> fetches{ln, rms, sm, ln_z, rms_z, sm_z, loss};
      fetches.insert(fetches.end(), grads.begin(), grads.end());
      const Shape s{batch, 3, width}, s2{batch, width};
      auto r = run(g, fetches,
                   {{"x", random_array(s, 12, -2, 2)}, {"z", random_array(s2, 16, -2, 2)}, {"r1", random_array(s, 13)},
                    {"r2", random_array(s, 14)}, {"r3", random_array(s, 15)}, {"r4", random_array(s2, 17)}},
                   v, false, 0);
      require_close(r, std::string(fused ? "fused" : "composed") + " norms and softmax, width " +
                           std::to_string(width) + " at batch " + std::to_string(batch) + where);
    }
  }
}

// scaled_dot_product_attention, causal and not, forward and every gradient, at sequence
// lengths 1, 7 and 127: unfused (composed of matmul, the mask and softmax; head dimension 4)
// or fused (one Attention op and its two gradient ops; an odd head dimension, 5).
inline void attention(const Runner& run, const std::string& where, bool fused = false) {
  const int64_t d = fused ? 5 : 4;
  for (int64_t t : {1, 7, 127}) {
    Graph g;
    GraphScope use(g);
    auto q = input("q", {kBatch, 2, t, d}), k = input("k", {kBatch, 2, t, d}), v = input("v", {kBatch, 2, t, 3});
    auto plain = scaled_dot_product_attention(q, k, v, {.fused = fused});
    auto causal = scaled_dot_product_attention(q, k, v, {.causal = true, .fused = fused});
    auto loss = sum((plain + causal) * input("r", {kBatch, 2, t, 3}));
    const std::vector<Tensor> grads = grad(loss, {q, k, v});
    for (int64_t batch : {1, 3}) {
      reference::Variables none;
      auto r = run(g, {plain, causal, grads[0], grads[1], grads[2]},
                   {{"q", random_array({batch, 2, t, d}, 16, -2, 2)}, {"k", random_array({batch, 2, t, d}, 17, -2, 2)},
                    {"v", random_array({batch, 2, t, 3}, 18)}, {"r", random_array({batch, 2, t, 3}, 19)}},
                   none, false, 0);
      require_close(r, std::string(fused ? "fused" : "unfused") + " attention, T = " + std::to_string(t) + " at batch " +
                           std::to_string(batch) + where);
    }
  }
}

// The fused attention where the shapes differ: fewer queries than keys and more (causal and
// not), keys and values shared by two heads (broadcast first), a head dimension of 1 and a
// row of 70 keys (two tiles of 64 on the CPU, a partial second one).
inline void attention_shapes(const Runner& run, const std::string& where) {
  struct Case { int64_t tq, tk, d, dv; };
  for (const Case c : {Case{5, 9, 3, 4}, Case{9, 5, 1, 2}, Case{3, 70, 6, 1}}) {
    Graph g;
    GraphScope use(g);
    auto q = input("q", {kBatch, 2, c.tq, c.d}), k = input("k", {kBatch, 1, c.tk, c.d}), v = input("v", {kBatch, 1, c.tk, c.dv});
    auto plain = scaled_dot_product_attention(q, k, v, {.scale = 0.8});
    auto causal = scaled_dot_product_attention(q, k, v, {.causal = true});
    auto loss = sum((plain + causal) * input("r", {kBatch, 2, c.tq, c.dv}));
    const std::vector<Tensor> grads = grad(loss, {q, k, v});
    reference::Variables none;
    auto r = run(g, {plain, causal, grads[0], grads[1], grads[2]},
                 {{"q", random_array({2, 2, c.tq, c.d}, 21, -2, 2)}, {"k", random_array({2, 1, c.tk, c.d}, 22, -2, 2)},
                  {"v", random_array({2, 1, c.tk, c.dv}, 23)}, {"r", random_array({2, 2, c.tq, c.dv}, 24)}},
                 none, false, 0);
    require_close(r, "fused attention, " + std::to_string(c.tq) + " queries, " + std::to_string(c.tk) + " keys, d = " +
                         std::to_string(c.d) + where);
  }
}

// The fused attention at head dimensions of 16 and more, where the CPU's routines work a group
// of up to 6 rows by 16 columns at a time: 16 and 17 (a block of 16 and one column past it) and
// 33 and 16, 127 positions (two key tiles; groups of 6 rows end 1 row short of a block), causal
// and not, at batch 1 and 3.
inline void attention_wide_heads(const Runner& run, const std::string& where) {
  struct Case { int64_t d, dv; };
  for (const Case c : {Case{16, 17}, Case{33, 16}}) {
    constexpr int64_t t = 127;
    Graph g;
    GraphScope use(g);
    auto q = input("q", {kBatch, 2, t, c.d}), k = input("k", {kBatch, 2, t, c.d}), v = input("v", {kBatch, 2, t, c.dv});
    auto plain = scaled_dot_product_attention(q, k, v);
    auto causal = scaled_dot_product_attention(q, k, v, {.causal = true});
    auto loss = sum((plain + causal) * input("r", {kBatch, 2, t, c.dv}));
    const std::vector<Tensor> grads = grad(loss, {q, k, v});
    for (int64_t batch : {1, 3}) {
      reference::Variables none;
      auto r = run(g, {plain, causal, grads[0], grads[1], grads[2]},
                   {{"q", random_array({batch, 2, t, c.d}, 31, -1, 1)}, {"k", random_array({batch, 2, t, c.d}, 32, -1, 1)},
                    {"v", random_array({batch, 2, t, c.dv}, 33)}, {"r", random_array({batch, 2, t, c.dv}, 34)}},
                   none, false, 0);
      require_close(r, "fused attention, d = " + std::to_string(c.d) + ", dv = " + std::to_string(c.dv) + " at batch " +
                           std::to_string(batch) + where);
    }
  }
}

}  // namespace towerjit::testing::cases
