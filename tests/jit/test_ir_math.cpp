// The CPU kernels' own exp, log, log1p, erf and tanh (jit/cpu/ir_math.h), through the JIT as a
// user's graph runs them, against the double-precision functions: within the 4 units of
// 2^-24·|y| the reference's bounds grant a libm function, over a sweep of every 2039th float
// bit pattern (about two million inputs a function: every binade, both signs, NaNs and
// infinities) and the special values; bitwise the same in a vector lane and in the scalar
// remainder. `[.exhaustive]` runs every one of the 2^32 floats (minutes; docs/cpu-jit.md holds
// the figures).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include <catch2/catch.hpp>
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;

namespace {

constexpr double kLibmUnits = 4;  // jit/reference/error_bounds.cpp's kLibmUlps

struct Function {
  const char* name;
  tj::Tensor (*op)(tj::Tensor);
  double (*exact)(double);
  bool (*in_domain)(float);  // where the test compares (elsewhere: NaN expected, checked too)
};

bool everywhere(float) { return true; }
bool above_minus_one(float x) { return x >= -1.0f; }
bool non_negative(float x) { return x >= 0.0f; }

const Function kFunctions[] = {
    {"exp", [](tj::Tensor x) { return tj::exp(x); }, [](double x) { return std::exp(x); }, everywhere},
    {"log", [](tj::Tensor x) { return tj::log(x); }, [](double x) { return std::log(x); }, non_negative},
    {"erf", [](tj::Tensor x) { return tj::erf(x); }, [](double x) { return std::erf(x); }, everywhere},
    {"tanh", [](tj::Tensor x) { return tj::tanh(x); }, [](double x) { return std::tanh(x); }, everywhere},
};

// The JIT's results for `xs`, one program per function, compiled once.
class Kernels {
 public:
  Kernels() {
    tj::GraphScope use(graph_);
    auto x = tj::input("x", {kBatch});
    for (const Function& f : kFunctions) fetches_.push_back(f.op(x));
    program_ = std::make_unique<tj::CpuProgram>(graph_, fetches_);
  }
  std::vector<tj::HostTensor> run(const std::vector<float>& xs) {
    tj::HostTensor t({static_cast<int64_t>(xs.size())});
    t.f32 = xs;
    tj::HostVariables none;
    return program_->run({{"x", t}}, none);
  }

 private:
  tj::Graph graph_;
  std::vector<tj::Tensor> fetches_;
  std::unique_ptr<tj::CpuProgram> program_;
};

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// The worst error over `xs` of function `f`'s results `ys`, in units of 2^-24·|exact|; a NaN,
// infinity or flushed result where another is due counts as infinitely wrong.
struct Worst {
  double units = 0;
  float at = 0;
  long wrong = 0;
  void add(const Worst& o) {
    if (o.units > units) units = o.units, at = o.at;
    wrong += o.wrong;
  }
};

Worst measure(const Function& f, const float* xs, const float* ys, size_t n) {
  Worst w;
  for (size_t i = 0; i < n; ++i) {
    float x = xs[i];
    if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);  // the kernels run with DAZ
    const double exact = f.in_domain(x) || std::isnan(x) ? f.exact(x) : std::numeric_limits<double>::quiet_NaN();
    const float y = ys[i];
    bool ok;
    double units = 0;
    if (std::isnan(exact)) {
      ok = std::isnan(y);
    } else if (std::fabs(exact) > std::numeric_limits<float>::max()) {
      ok = y == static_cast<float>(exact);  // an overflow is the infinity of its sign
    } else if (std::fabs(exact) < std::numeric_limits<float>::min()) {
      ok = std::fabs(y) <= std::numeric_limits<float>::min();  // flushed or the nearest normal
    } else {
      units = std::fabs(y - exact) / (0x1p-24 * std::fabs(exact));
      ok = units <= kLibmUnits;
      // exp's result at the overflow threshold may round to FLT_MAX or infinity either way.
      if (std::isinf(y) && std::fabs(exact) * (1 + kLibmUnits * 0x1p-24) > 0x1.fffffep127) ok = true, units = 0;
    }
    if (!ok) ++w.wrong;
    if (!ok || units > w.units) w.units = ok ? units : std::numeric_limits<double>::infinity(), w.at = x;
  }
  return w;
}

// Every `stride`th bit pattern from `first`, in chunks, each function's worst error over them.
std::vector<Worst> sweep(Kernels& k, uint64_t first, uint64_t stride) {
  std::vector<Worst> worst(std::size(kFunctions));
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<float> xs;
  xs.reserve(kChunk);
  for (uint64_t b = first; b < (uint64_t{1} << 32);) {
    xs.clear();
    for (; b < (uint64_t{1} << 32) && xs.size() < kChunk; b += stride) xs.push_back(from_bits(static_cast<uint32_t>(b)));
    const auto ys = k.run(xs);
    // The double functions are the slow part: two threads, each half the chunk.
    for (size_t j = 0; j < std::size(kFunctions); ++j) {
      const size_t half = xs.size() / 2;
      Worst a, c;
      std::thread t([&] { a = measure(kFunctions[j], xs.data(), ys[j].f32.data(), half); });
      c = measure(kFunctions[j], xs.data() + half, ys[j].f32.data() + half, xs.size() - half);
      t.join();
      worst[j].add(a);
      worst[j].add(c);
    }
  }
  return worst;
}

void require_within_bound(const std::vector<Worst>& worst) {
  for (size_t j = 0; j < worst.size(); ++j) {
    INFO(kFunctions[j].name << ": worst " << worst[j].units << " units of 2^-24|y| at x = " << worst[j].at
                            << " (" << std::hexfloat << worst[j].at << std::defaultfloat << "), "
                            << worst[j].wrong << " wrong");
    CHECK(worst[j].wrong == 0);
    CHECK(worst[j].units <= kLibmUnits);
  }
}

}  // namespace

TEST_CASE("the kernels' exp log erf and tanh are within the libm bound over a sweep of all floats", "[cpu][jit][isa][math]") {
  Kernels k;
  require_within_bound(sweep(k, 0, 2039));
}

TEST_CASE("the kernels' exp log erf and tanh at their edges", "[cpu][jit][isa][math]") {
  Kernels k;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, -nan,
                                 88.72283f, 88.72284f, 88.7229f, 88.75f, 89.0f, -87.33654f, -103.9f, -104.0f, -150.0f,
                                 0.9f, -0.9f, std::nextafter(0.9f, 0.0f), 3.93f, 3.94f, 10.0f, -10.0f,
                                 std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::denorm_min(), 1e-30f, -1e-30f, 0.5f, 2.0f};
  const auto ys = k.run(xs);
  std::vector<Worst> worst;
  for (size_t j = 0; j < std::size(kFunctions); ++j)
    worst.push_back(measure(kFunctions[j], xs.data(), ys[j].f32.data(), xs.size()));
  require_within_bound(worst);
  // The exact values where there is one.
  CHECK(ys[0].f32[0] == 1.0f);                  // exp(0)
  CHECK(ys[0].f32[4] == inf);                   // exp(inf)
  CHECK(ys[0].f32[5] == 0.0f);                  // exp(-inf)
  CHECK(ys[0].f32[12] == inf);                  // exp(88.75) overflows
  CHECK(ys[1].f32[0] == -inf);                  // log(0)
  CHECK(ys[1].f32[1] == -inf);                  // log(-0)
  CHECK(ys[1].f32[2] == 0.0f);                  // log(1)
  CHECK(std::isnan(ys[1].f32[3]));              // log(-1)
  CHECK(ys[1].f32[4] == inf);                   // log(inf)
  CHECK(ys[1].f32[26] == -inf);             // log(a subnormal): zero under DAZ
  CHECK(ys[2].f32[4] == 1.0f);                  // erf(inf)
  CHECK(ys[2].f32[5] == -1.0f);                 // erf(-inf)
  CHECK(std::signbit(ys[2].f32[1]));            // erf(-0) = -0
  CHECK(ys[3].f32[4] == 1.0f);                  // tanh(inf)
  CHECK(ys[3].f32[5] == -1.0f);                 // tanh(-inf)
  CHECK(std::signbit(ys[3].f32[1]));            // tanh(-0) = -0
  CHECK(std::signbit(ys[0].f32[1]) == false);   // exp(-0) = 1
  for (const auto& y : ys) CHECK(std::isnan(y.f32[6]));
}

TEST_CASE("the kernels' math functions give the same bits in vector lanes and in the scalar remainder", "[cpu][jit][isa][math]") {
  Kernels k;
  std::vector<float> many;
  for (int i = 0; i < 1031; ++i) many.push_back(-20.0f + 0.039f * static_cast<float>(i));
  const auto all = k.run(many);
  for (size_t start : {size_t{0}, size_t{5}, size_t{1024}}) {
    const std::vector<float> few(many.begin() + start, many.begin() + start + 7);  // seven: the remainder only
    const auto some = k.run(few);
    for (size_t j = 0; j < all.size(); ++j)
      for (size_t i = 0; i < few.size(); ++i) {
        INFO(kFunctions[j].name << " at x = " << few[i]);
        CHECK(std::bit_cast<uint32_t>(some[j].f32[i]) == std::bit_cast<uint32_t>(all[j].f32[start + i]));
      }
  }
}

TEST_CASE("the kernels' exp log erf and tanh over every float", "[.exhaustive]") {
  Kernels k;
  const auto worst = sweep(k, 0, 1);
  for (size_t j = 0; j < worst.size(); ++j)
    std::printf("%s: worst %.3f units of 2^-24|y| at x = %a, %ld wrong\n", kFunctions[j].name, worst[j].units,
                worst[j].at, worst[j].wrong);
  require_within_bound(worst);
}
