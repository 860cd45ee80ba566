// Gradient compression with the variables on the GPUs (TOWERJIT_GPU_VARIABLES=on): each GPU's
// sum rounded to bf16 / f16, NCCL's all-reduce summing in the format, the total widened for
// the apply (runtime/towers/gpu_resident_sync.h). Checked bitwise against a closed form: with
// loss = Σ x·w, a tower's gradient is its rows' x, and each tower's weight a power of two, so
// every f32 step before the rounding is exact and one SGD step from zero at rate 1 leaves
// w = -(the reduced gradient).
#include <cstdlib>
#include <random>

#include "gpu_check.h"
#include "runtime/dist/half_wire.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;

namespace {

constexpr int kFeatures = 127;

// w after one step of `towers` (one row of `x` each) with the gradients compressed to `format`.
tj::HostTensor one_step(const tj::Towers& towers, const tj::HostTensor& x, tj::DType format) {
  tj::Graph g;
  tj::GraphScope use(g);
  auto in = tj::input("x", {kBatch, kFeatures});
  auto w = tj::variable("w", {kFeatures}, {.init = tj::init::zeros()});
  auto loss = tj::sum(in * w);
  ::setenv("TOWERJIT_GPU_VARIABLES", "on", 1);
  tj::TowerTrainer trainer(g, loss, towers, tj::sgd(1.0), {.strategy = {.gradient_compression = format}});
  ::unsetenv("TOWERJIT_GPU_VARIABLES");
  trainer.step({{"x", x}});
  return trainer.variables().at("w");
}

}  // namespace

TEST_CASE("GPU: compressed gradients are each GPU's sum rounded, then summed in the format by NCCL", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  // Towers on gpu:0, gpu:1 (one each, weight 1/2) and two on each (weight 1/4: the in-device
  // sum is taken in f32, exact here, then rounded). Rows: random values of every magnitude,
  // ties of both formats, and f16's overflow (60000 + 60000).
  for (const auto& towers : {tj::Towers{tj::gpu(0), tj::gpu(1)}, tj::Towers{tj::gpu(0), tj::gpu(0), tj::gpu(1), tj::gpu(1)}}) {
    const int n = static_cast<int>(towers.size());
    const float weight = 1.0f / static_cast<float>(n);
    tj::HostTensor x({n, kFeatures});
    std::mt19937 random(n);
    std::uniform_real_distribution<float> exponent(-12, 12), unit(-1, 1);
    for (float& v : x.f32) v = unit(random) * std::exp2(exponent(random));
    for (int t = 0; t < n; ++t) {
      x.f32[t * kFeatures + 0] = t == 0 ? (1.0f + 0x1p-8f) * static_cast<float>(n) : 0.0f;  // a bf16 tie (to 1)
      x.f32[t * kFeatures + 1] = t == 0 ? (1.0f + 0x1p-11f) * static_cast<float>(n) : 0.0f;  // an f16 tie (to 1)
      x.f32[t * kFeatures + 2] = 60000.0f * static_cast<float>(n);  // each share 60000
    }
    INFO(n << " towers");
    // Uncompressed: the sum of the towers' exact shares, rounded once.
    const tj::HostTensor plain = one_step(towers, x, tj::DType::f32);
    for (int i = 0; i < kFeatures; ++i) {
      double sum = 0;
      for (int t = 0; t < n; ++t) sum += static_cast<double>(weight * x.f32[t * kFeatures + i]);
      // in f32 pairwise, GPU by GPU: exact to within one rounding of the total
      CHECK(plain.f32[i] == Approx(-sum).epsilon(0x1p-23).margin(0));
    }
    for (const tj::DType format : {tj::DType::bf16, tj::DType::f16}) {
      INFO(tj::dtype_name(format));
      const tj::HostTensor w = one_step(towers, x, format);
      int rounded = 0;
      for (int i = 0; i < kFeatures; ++i) {
        uint16_t gpu_sum[2];
        for (int g = 0; g < 2; ++g) {  // towers 2g.. on gpu:g: their shares summed in f32, exact
          float s = 0;
          for (int t = g * n / 2; t < (g + 1) * n / 2; ++t) s += weight * x.f32[t * kFeatures + i];
          gpu_sum[g] = tj::dist::to_wire(s, format);
        }
        const float total = tj::dist::from_wire(tj::dist::add_on_wire(gpu_sum[0], gpu_sum[1], format), format);
        INFO("feature " << i);
        CHECK(w.f32[i] == -total);
        rounded += w.f32[i] != plain.f32[i];
      }
      CHECK(rounded > kFeatures / 2);  // the values crossed in 16 bits
      CHECK(w.f32[format == tj::DType::bf16 ? 0 : 1] == -1.0f);
      if (format == tj::DType::f16) CHECK(std::isinf(w.f32[2]));
    }
  }
}
