// A pooling convolution's codes, a byte a window (jit/passes/conv_pools.h): the byte loads and
// stores of runtime/cpu/vector_lanes.h at every count, nothing past the count read into a lane
// or written; and the routing of a pooled gradient channels-last (runtime/cpu/pool.h) against
// routing it into NCHW and transposing by hand, odd channel counts leaving padded columns that
// must come out +0, with and without a ReLU's mask, at every CPU level ([isa]).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "jit/cpu/cpu_isa.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/cpu/pool.h"
#include "runtime/cpu/vector_lanes.h"

namespace tj = towerjit;
namespace cpujit = towerjit::cpujit;

namespace {

constexpr uint8_t kCanary = 0xAB;

// Bytes 1, 2, ... at p[0 .. count), kCanary around them; p is 16 bytes into the buffer.
std::vector<uint8_t> counted_bytes(int64_t count) {
  std::vector<uint8_t> b(48, kCanary);
  for (int64_t j = 0; j < count; ++j) b[16 + j] = static_cast<uint8_t>(j + 1);
  return b;
}

TOWERJIT_TARGET_AVX2 std::vector<int32_t> load8(const uint8_t* p, int64_t count) {
  std::vector<int32_t> lanes(8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes.data()), cpujit::load_bytes8(p, count));
  return lanes;
}
TOWERJIT_TARGET_AVX2 void store8(uint8_t* p, int64_t count) {
  cpujit::store_bytes8(p, count, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8));
}
TOWERJIT_TARGET_AVX512 std::vector<int32_t> load16(const uint8_t* p, int64_t count) {
  std::vector<int32_t> lanes(16);
  _mm512_storeu_si512(lanes.data(), cpujit::load_bytes16(p, count));
  return lanes;
}
TOWERJIT_TARGET_AVX512 void store16(uint8_t* p, int64_t count) {
  cpujit::store_bytes16(p, count, _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16));
}

// Loads and stores of `width` lanes at every count from 0 to width.
template <typename Load, typename Store>
void check_bytes(int64_t width, Load load, Store store) {
  for (int64_t count = 0; count <= width; ++count) {
    INFO(count << " of " << width << " bytes");
    std::vector<uint8_t> b = counted_bytes(count);
    const std::vector<int32_t> lanes = load(b.data() + 16, count);
    for (int64_t j = 0; j < width; ++j) CHECK(lanes[j] == (j < count ? j + 1 : 0));
    std::vector<uint8_t> out(48, kCanary);
    store(out.data() + 16, count);
    CHECK(out == b);
  }
}

}  // namespace

TEST_CASE("pool codes: byte loads and stores touch their first count bytes alone", "[cpu][isa]") {
  CHECK(cpujit::load_bytes_upto8(counted_bytes(3).data() + 16, 3) == 0x030201u);
  if (cpujit::isa_allows(cpujit::CpuIsa::avx2)) check_bytes(8, load8, store8);
  if (cpujit::isa_allows(cpujit::CpuIsa::avx512)) check_bytes(16, load16, store16);
}

TEST_CASE("pool codes: routed channels-last, the values of routing into NCHW transposed", "[cpu][isa]") {
  struct Case { int64_t n, c, h, w, ld; };
  // 7 channels padded to 8 and 16, 17 to 32; odd pooled widths; an image of 3 windows, whose
  // codes end inside an element.
  const Case cases[] = {{2, 7, 4, 6, 16}, {3, 16, 14, 14, 16}, {1, 17, 6, 10, 32}, {2, 1, 2, 6, 8}, {1, 32, 4, 4, 32}};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code_of(0, 7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const Case& k : cases)
    for (const bool relu_mask : {false, true}) {
      INFO(k.n << "x" << k.c << "x" << k.h << "x" << k.w << ", ld " << k.ld << (relu_mask ? ", the ReLU's mask" : ""));
      const int64_t windows = k.c * (k.h / 2) * (k.w / 2), words = tj::kir::pool_code_words(windows);
      std::vector<int32_t> codes(k.n * words, 0);
      std::vector<float> dy(k.n * windows);
      for (int64_t i = 0; i < k.n; ++i)
        for (int64_t e = 0; e < windows; ++e) {
          reinterpret_cast<uint8_t*>(codes.data())[i * 4 * words + e] = static_cast<uint8_t>(code_of(rng));
          dy[i * windows + e] = value(rng);
        }
      const cpujit::View code_view{tj::Shape{k.n, words}, codes.data(), tj::DType::i32};
      const cpujit::View dy_view{tj::Shape{k.n, k.c, k.h / 2, k.w / 2}, dy.data()};
      const cpujit::RoutedPoolGradient r = cpujit::routed_by_codes(code_view, dy_view, relu_mask);
      const int64_t pixels = k.h * k.w;
      for (int64_t i = 0; i < k.n; ++i) {
        std::vector<float> nchw(k.c * pixels);
        cpujit::route_pool_rows(r, i * k.c * (k.h / 2), k.c * (k.h / 2), k.w / 2, nchw.data(), k.w);
        std::vector<float> out(pixels * k.ld, -7.0f), scratch(2 * (pixels / 4) * k.ld + k.c * (pixels / 4), -9.0f);
        cpujit::route_pool_image_channels_last(r, i, k.c, k.h, k.w, out.data(), k.ld, scratch.data());
        int64_t differ = 0;
        for (int64_t p = 0; p < pixels; ++p)
          for (int64_t o = 0; o < k.ld; ++o) {
            const float want = o < k.c ? nchw[o * pixels + p] : 0.0f;
            differ += std::memcmp(&out[p * k.ld + o], &want, sizeof want) != 0;
          }
        CHECK(differ == 0);
      }
    }
}
