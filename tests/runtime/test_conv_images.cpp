// 16-bit convolutions on the direct kernels, which widen and round an image at a time
// (runtime/cpu/conv_images.h), against the f32 convolution of the widened operands rounded
// once: bitwise, for bf16 and f16, forward and both gradients, on the narrow kernels (1 and 3
// channels), the channels-last ones (16 and 32 channels, an odd batch and size) and the
// im2col fallback (a strided input gradient), on one thread and on a pool; at every CPU level
// ([isa]).
#include <catch2/catch.hpp>

#include <xmmintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dsl/half_float.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_images.h"
#include "runtime/cpu/half_spans.h"
#include "runtime/cpu/half_conv.h"
#include "runtime/thread_pool.h"

namespace tj = towerjit;
namespace cpujit = towerjit::cpujit;
using tj::DType;

namespace {

struct Geometry {
  int64_t n, c, h, w, o, k, stride, pad;
  int64_t oh() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - k) / stride + 1; }
};

std::vector<uint16_t> random_half(int64_t count, DType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<uint16_t> out(static_cast<size_t>(count));
  for (uint16_t& v : out) v = tj::half_bits(u(rng), t);
  return out;
}

std::vector<float> widen(const std::vector<uint16_t>& v, DType t) {
  std::vector<float> out(v.size());
  cpujit::widen_span(v.data(), out.data(), static_cast<int64_t>(v.size()), t);
  return out;
}

}  // namespace

TEST_CASE("16-bit convolutions an image at a time equal the widened f32 convolution rounded once",
          "[half][cpu][isa]") {
  tj::ThreadPool pool(2);
  for (const Geometry& g : {Geometry{3, 1, 9, 11, 16, 3, 1, 1}, Geometry{2, 3, 8, 8, 5, 3, 1, 1},
                            Geometry{3, 16, 7, 9, 16, 3, 1, 1}, Geometry{2, 16, 6, 6, 32, 3, 1, 1},
                            Geometry{2, 8, 9, 9, 3, 3, 1, 1}, Geometry{2, 4, 8, 8, 8, 3, 2, 1}})
    for (DType t : {DType::bf16, DType::f16})
      for (tj::ThreadPool* p : {static_cast<tj::ThreadPool*>(nullptr), &pool})
        for (tj::Op op : {tj::Op::Conv2D, tj::Op::Conv2DGradInput, tj::Op::Conv2DGradFilter}) {
          INFO(tj::op_name(op) << " " << tj::dtype_name(t) << ", N " << g.n << " C " << g.c << " " << g.h << "x" << g.w
                               << " O " << g.o << " stride " << g.stride << (p ? ", pool" : ", one thread")
                               << ", level " << cpujit::isa_name(cpujit::cpu_isa()));
          tj::Attrs at;
          at.stride[0] = at.stride[1] = g.stride;
          at.pad[0] = at.pad[1] = g.pad;
          const tj::Shape xs({g.n, g.c, g.h, g.w}), ws({g.o, g.c, g.k, g.k}), ys({g.n, g.o, g.oh(), g.ow()});
          // The operands and the result of each op: forward (x, w) -> y; input gradient
          // (dy, w) -> dx; filter gradient (x, dy) -> dw.
          const tj::Shape as = op == tj::Op::Conv2DGradInput ? ys : xs;
          const tj::Shape bs = op == tj::Op::Conv2DGradFilter ? ys : ws;
          const tj::Shape os = op == tj::Op::Conv2D ? ys : op == tj::Op::Conv2DGradInput ? xs : ws;
          std::vector<uint16_t> a = random_half(as.elements(0), t, 1), b = random_half(bs.elements(0), t, 2);
          std::vector<uint16_t> got(static_cast<size_t>(os.elements(0)));
          cpujit::half_convolution(op, at, {as, a.data(), t}, {bs, b.data(), t}, {os, got.data(), t}, p);

          std::vector<float> af = widen(a, t), bf = widen(b, t), wide(got.size());
          const cpujit::View av{as, af.data()}, bv{bs, bf.data()}, ov{os, wide.data()};
          if (op == tj::Op::Conv2D) cpujit::conv2d(at, av, bv, ov, p);
          if (op == tj::Op::Conv2DGradInput) cpujit::conv2d_grad_input(at, av, bv, ov, p);
          if (op == tj::Op::Conv2DGradFilter) cpujit::conv2d_grad_filter(at, av, bv, ov, p);
          std::vector<uint16_t> want(got.size());
          cpujit::narrow_span(wide.data(), want.data(), static_cast<int64_t>(want.size()), t);
          for (size_t e = 0; e < want.size(); ++e) {
            INFO("element " << e);
            REQUIRE(got[e] == want[e]);
          }
        }
}

// The spans' conversions (F16C's vcvtph2ps / vcvtps2ph at the avx2 level and above, scalar
// below; bf16 by bits) against dsl/half_float.h's closed form: every one of the 65536 bit
// patterns widened, and floats narrowed through every rounding case (ties to even, f16
// subnormals, overflow, NaN payloads, signed zeros), with MXCSR's flush-to-zero and
// denormals-are-zero on, as towerjit computes, and off; lengths around the 8-wide blocks.
TEST_CASE("16-bit spans widen and round as the closed form, every f16 pattern, flushed or not", "[half][cpu][isa]") {
  const unsigned saved = _mm_getcsr();
  struct Restore {
    unsigned csr;
    ~Restore() { _mm_setcsr(csr); }
  } restore{saved};
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 65519.99f, 1e9f, -1e9f, inf, -inf,
                               0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1.004p-14f, 0x1.ffcp-15f, 1e-40f, -1e-40f,
                               1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
                               std::bit_cast<float>(0x7fc00000u), std::bit_cast<float>(0xffc00001u),
                               std::bit_cast<float>(0x7fbfffffu), std::bit_cast<float>(0x7f800001u)};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  while (values.size() < 203) values.push_back(u(rng));
  std::vector<uint16_t> patterns(65536);
  for (uint32_t b = 0; b < 65536; ++b) patterns[b] = static_cast<uint16_t>(b);
  // The closed form's values as f32 bits, converted with nothing flushed (a flushing MXCSR would
  // flush the oracle's own double -> float conversion).
  _mm_setcsr(saved & ~0x8040u);
  std::vector<uint32_t> want_bits[2];  // f16, bf16
  for (int f = 0; f < 2; ++f)
    for (uint32_t b = 0; b < 65536; ++b)
      want_bits[f].push_back(std::bit_cast<uint32_t>(static_cast<float>(tj::half_value(static_cast<uint16_t>(b), f ? DType::bf16 : DType::f16))));
  for (unsigned csr : {saved | 0x8040u, saved & ~0x8040u})  // FTZ | DAZ on, then off
    for (DType t : {DType::f16, DType::bf16}) {
      _mm_setcsr(csr);
      INFO(tj::dtype_name(t) << (csr & 0x8040u ? ", flushed" : ", not flushed") << ", level "
                             << cpujit::isa_name(cpujit::cpu_isa()));
      std::vector<float> wide(patterns.size());
      cpujit::widen_span(patterns.data(), wide.data(), static_cast<int64_t>(wide.size()), t);
      for (uint32_t b = 0; b < 65536; ++b) {
        const uint32_t want = want_bits[t == DType::bf16][b], got = std::bit_cast<uint32_t>(wide[b]);
        INFO("pattern " << b);
        if ((want & 0x7fffffffu) > 0x7f800000u) REQUIRE((got & 0x7fffffffu) > 0x7f800000u);  // a NaN
        else REQUIRE(got == want);
      }
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{27}, static_cast<int64_t>(values.size())}) {
        std::vector<uint16_t> narrow(static_cast<size_t>(n));
        cpujit::narrow_span(values.data(), narrow.data(), n, t);
        for (int64_t i = 0; i < n; ++i) {
          // A flushed f32 subnormal input is zero to the hardware: its nearest 16-bit value is the
          // signed zero either way (bf16 keeps f32's subnormals only when they are not flushed).
          const float v = values[i];
          const uint32_t bits = std::bit_cast<uint32_t>(v);
          const bool subnormal = (bits & 0x7f800000u) == 0 && (bits & 0x007fffffu) != 0;  // by bits: DAZ hides it from FP ops
          const bool flushed = (csr & 0x8040u) && subnormal;
          INFO("value " << v << " (" << std::hex << std::bit_cast<uint32_t>(v) << std::dec << ")");
          if (flushed && t == DType::bf16) continue;
          REQUIRE(narrow[i] == tj::half_bits(flushed ? (bits >> 31 ? -0.0 : 0.0) : v, t));
        }
      }
    }
}
