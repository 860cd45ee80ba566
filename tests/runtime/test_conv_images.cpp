// 16-bit convolutions on the direct kernels, which widen and round an image at a time
// (runtime/cpu/conv_images.h), against the f32 convolution of the widened operands rounded
// once: bitwise, for bf16 and f16, forward and both gradients, on the narrow kernels (1 and 3
// channels), the channels-last ones (16 and 32 channels, an odd batch and size) and the
// im2col fallback (a strided input gradient), on one thread and on a pool; at every CPU level
// ([isa]).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dsl/half_float.h"
#include "jit/cpu/cpu_isa.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/conv_images.h"
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
