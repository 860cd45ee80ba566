// The CPU's fused attention routines (runtime/cpu/attention.h) give the same bits on one thread
// and on a pool of two, at head dimensions on either side of their 16-column blocks. Their values
// against the reference: tests/jit/sequence_cases.h.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/attention.h"
#include "runtime/thread_pool.h"

namespace cpujit = towerjit::cpujit;
using towerjit::Shape;

namespace {

// The three routines' results for one shape, on `pool` (null: the calling thread).
struct Results {
  std::vector<float> out, dq, dkv;
};

Results run_all(int64_t batch, int64_t t, int64_t d, int64_t dv, bool causal, towerjit::ThreadPool* pool) {
  const Shape qs{batch, 1, t, d}, vs{batch, 1, t, dv}, os{batch, 1, t, dv + 1};
  std::vector<float> q(batch * t * d), k(q.size()), v(batch * t * dv), dout(batch * t * (dv + 1));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::vector<float>* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = u(rng);
  Results r{std::vector<float>(batch * t * (dv + 1)), std::vector<float>(batch * t * d),
            std::vector<float>(batch * t * (d + dv))};
  towerjit::Attrs at;
  at.causal = causal;
  at.value = 1.0 / std::sqrt(static_cast<double>(d));
  cpujit::attention(at, {{qs, q.data()}, {qs, k.data()}, {vs, v.data()}}, {os, r.out.data()}, pool);
  const std::vector<cpujit::View> in{{qs, q.data()}, {qs, k.data()}, {vs, v.data()}, {os, r.out.data()}, {os, dout.data()}};
  cpujit::attention_grad_q(at, in, {qs, r.dq.data()}, pool);
  cpujit::attention_grad_kv(at, in, {Shape{batch, 1, t, d + dv}, r.dkv.data()}, pool);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("fused attention routines: the same bits on one thread and on two", "[cpu][attention][isa]") {
  towerjit::ThreadPool two(2);
  for (bool causal : {false, true})
    for (const auto& [d, dv] : {std::pair<int64_t, int64_t>{16, 16}, {33, 17}, {5, 3}}) {
      INFO("d = " << d << ", dv = " << dv << (causal ? ", causal" : ""));
      const Results one = run_all(3, 127, d, dv, causal, nullptr), pooled = run_all(3, 127, d, dv, causal, &two);
      REQUIRE(same_bits(one.out, pooled.out));
      REQUIRE(same_bits(one.dq, pooled.dq));
      REQUIRE(same_bits(one.dkv, pooled.dkv));
    }
}
