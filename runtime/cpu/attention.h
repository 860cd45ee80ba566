// The fused attention ops (ops.def: Attention, AttentionGradQ, AttentionGradKV) on the CPU:
// tiles of queries against tiles of keys, an online softmax, and a backward that recomputes
// the probabilities from q, k and the saved log-sum-exp. No [Tq, Tk] buffer: each thread holds
// one tile of scores. Split over the pool by (problem, query block) or (problem, key block);
// each output row is written by one task in a fixed order, so results are the same run to run
// and at any thread count.
#pragma once

#include <vector>

#include "dsl/node.h"
#include "runtime/cpu/library.h"
#include "runtime/thread_pool.h"

namespace towerjit::cpujit {

// in: q, k, v -> out [..., Tq, dv + 1].
void attention(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);
// in: q, k, v, out, d out -> dq [..., Tq, d].
void attention_grad_q(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);
// in: q, k, v, out, d out -> [..., Tk, d + dv] (dk, dv).
void attention_grad_kv(const Attrs& at, const std::vector<View>& in, const View& out, ThreadPool* pool);

}  // namespace towerjit::cpujit
