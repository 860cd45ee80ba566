// The emulated GPU's kernel engine (emulator/kernel/): CUDA C compiled for the host and run one
// fiber per thread. Its semantics against CUDA's: barriers, shuffles at every width, shared
// memory per block, atomics, and the faults a GPU would show (divergent barriers, misaligned
// vector accesses, lanes missing from a shuffle).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emulator/kernel/host_module.h"
#include "tests/jit/cpu_test_env.h"

namespace emu = towerjit::emulator;
using towerjit::test::CacheSandbox;

namespace {

// The module every test here launches from, compiled once.
const char* kSource = R"(
// Reverses each block's values through shared memory: needs the barrier.
extern "C" __global__ void reverse_in_block(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[256];
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  tile[t] = in[base + t];
  __syncthreads();
  out[base + t] = tile[blockDim.x - 1 - t];
}

// Every shuffle kind at width `width`, lane values 100 + lane.
extern "C" __global__ void shuffles(int* out, int width, int arg) {
  const int lane = threadIdx.x;
  const int v = 100 + lane;
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, arg, width);
  out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, arg, width);
  out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, arg, width);
  out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, arg, width);
}

// A tree sum over the warp with doubles, and a half-warp mask.
extern "C" __global__ void warp_sums(double* out) {
  double v = threadIdx.x + 0.5;
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x == 0) out[0] = v;
  if (threadIdx.x < 16) {
    int w = threadIdx.x;
    w += __shfl_xor_sync(0x0000ffffu, w, 8, 16);
    out[1 + threadIdx.x] = w;
  }
}

// Writes what each block's shared memory held before it wrote: never-written is NaN.
extern "C" __global__ void shared_is_per_block(float* seen) {
  __shared__ float slot[1];
  __syncthreads();
  if (threadIdx.x == 0) {
    seen[blockIdx.x] = slot[0];
    slot[0] = blockIdx.x;
  }
}

extern "C" __global__ void count_with_atomics(unsigned long long* counter, unsigned long long* smallest) {
  atomicAdd(counter, 1ull);
  atomicMin(smallest, (unsigned long long)(1000 + blockIdx.x * blockDim.x + threadIdx.x));
}

extern "C" __global__ void divergent_barrier(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();  // the first half's
  } else {
    __syncthreads();  // the second half's
  }
  out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void misaligned_float4(const float* in, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(in + 1);  // in + 1: 4 bytes off
  out[0] = v.x;
}

extern "C" __global__ void lane_skips_shuffle(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x != 5) v = __shfl_down_sync(0xffffffffu, v, 1);  // lane 5 skips it
  out[threadIdx.x] = v;
}

extern "C" __global__ void dynamic_shared_sum(const float* in, float* out) {
  extern __shared__ float scratch[];
  scratch[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) s += scratch[i];
    out[0] = s;
  }
}
)";

// "line N" of the first source line holding `text`.
std::string line_of(const std::string& text) {
  const std::string source = kSource;
  const auto at = source.find(text);
  return "line " + std::to_string(std::count(source.begin(), source.begin() + at, '\n') + 1);
}

std::shared_ptr<emu::HostModule> module() {
  static CacheSandbox sandbox;  // compiled once, in a cache of this test binary's own
  static auto m = emu::HostModule::compile(kSource, "engine_test");
  return m;
}

void launch(const char* kernel, std::vector<void*> params, emu::LaunchShape shape) {
  emu::KernelEntry entry = module()->entry(kernel);
  REQUIRE(entry != nullptr);
  emu::run_grid(kernel, entry, params.data(), shape);
}

emu::LaunchShape shape(unsigned grid, unsigned block, std::size_t dynamic = 0) {
  emu::LaunchShape s;
  s.grid.x = grid, s.block.x = block, s.dynamic_shared_bytes = dynamic;
  return s;
}

}  // namespace

TEST_CASE("emulator: the pre-pass finds every kernel and rewrites shared memory and vector casts", "[emulator]") {
  const emu::HostSource s = emu::prepare_host_source(kSource);
  CHECK(s.kernels.size() == 9);
  CHECK(s.text.find("__shared__") == std::string::npos);
  CHECK(s.text.find("tj_emu::vector_cast<const float4*>(__LINE__, ") != std::string::npos);
  CHECK(s.text.find("extern \"C\" void shuffles__tj_entry(void** p) { shuffles(*(int**)p[0], *(int*)p[1], *(int*)p[2]); }") !=
        std::string::npos);
  // The same lines: a fault's line number is the source's.
  const std::string source = kSource, before_entries = s.text.substr(0, s.text.find("// Launch entries"));
  CHECK(std::count(before_entries.begin(), before_entries.end(), '\n') ==
        std::count(source.begin(), source.end(), '\n') + 1);
}

TEST_CASE("emulator: __syncthreads is a real barrier of the block", "[emulator]") {
  const int blocks = 3, threads = 256;
  std::vector<float> in(blocks * threads), out(in.size(), -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  const float* pin = in.data();
  float* pout = out.data();
  launch("reverse_in_block", {&pin, &pout}, shape(blocks, threads));
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) REQUIRE(out[b * threads + t] == in[b * threads + threads - 1 - t]);
}

TEST_CASE("emulator: shuffles follow CUDA's rules at every width", "[emulator]") {
  for (int width : {1, 2, 4, 8, 16, 32})
    for (int arg : {0, 1, 3, 5, 16, 31, 33}) {
      std::vector<int> out(4 * 32, -1);
      int* p = out.data();
      launch("shuffles", {&p, &width, &arg}, shape(1, 32));
      for (int lane = 0; lane < 32; ++lane) {
        INFO("width " << width << ", arg " << arg << ", lane " << lane);
        const int base = lane & ~(width - 1);
        CHECK(out[lane] == 100 + base + (arg % width));
        CHECK(out[32 + lane] == 100 + (lane - arg >= base ? lane - arg : lane));
        CHECK(out[64 + lane] == 100 + (lane + arg < base + width ? lane + arg : lane));
        const int x = lane ^ arg;
        CHECK(out[96 + lane] == 100 + (x < base + width && x < 32 ? x : lane));
      }
    }
}

TEST_CASE("emulator: a warp's tree sum and a half-warp mask", "[emulator]") {
  std::vector<double> out(17, -1);
  double* p = out.data();
  launch("warp_sums", {&p}, shape(1, 32));
  CHECK(out[0] == 32 * 31 / 2 + 16.0);
  for (int lane = 0; lane < 16; ++lane) CHECK(out[1 + lane] == lane + (lane ^ 8));
}

TEST_CASE("emulator: shared memory belongs to each block and starts as NaN", "[emulator]") {
  std::vector<float> seen(4, 0);
  float* p = seen.data();
  launch("shared_is_per_block", {&p}, shape(4, 64));
  for (float v : seen) CHECK(std::isnan(v));
}

TEST_CASE("emulator: atomics count every thread of every block", "[emulator]") {
  unsigned long long counter = 0, smallest = ~0ull;
  unsigned long long *pc = &counter, *ps = &smallest;
  launch("count_with_atomics", {&pc, &ps}, shape(5, 96));
  CHECK(counter == 5 * 96);
  CHECK(smallest == 1000);
}

TEST_CASE("emulator: dynamic shared memory", "[emulator]") {
  std::vector<float> in(100);
  for (int i = 0; i < 100; ++i) in[i] = static_cast<float>(i);
  float out = 0;
  const float* pin = in.data();
  float* pout = &out;
  launch("dynamic_shared_sum", {&pin, &pout}, shape(1, 100, 100 * sizeof(float)));
  CHECK(out == 4950.0f);
}

TEST_CASE("emulator: the faults a GPU shows are errors naming kernel, block, thread and line", "[emulator]") {
  std::vector<float> buffer(64, 0);
  float* p = buffer.data();
  const float* cp = buffer.data();
  CHECK_THROWS_WITH(launch("divergent_barrier", {&p}, shape(1, 32)),
                    Catch::Contains("kernel divergent_barrier, block (0,0,0), thread (16,0,0)") &&
                        Catch::Contains("divergent __syncthreads") &&
                        Catch::Contains(line_of("// the first half's")) && Catch::Contains(line_of("// the second half's")));
  CHECK_THROWS_WITH(launch("misaligned_float4", {&cp, &p}, shape(2, 4)),
                    Catch::Contains("misaligned vector access") && Catch::Contains("block (0,0,0), thread (0,0,0)") &&
                        Catch::Contains(line_of("4 bytes off")));
  std::vector<int> ints(32);
  int* ip = ints.data();
  CHECK_THROWS_WITH(launch("lane_skips_shuffle", {&ip}, shape(1, 32)),
                    Catch::Contains("lane 5 has exited") && Catch::Contains(line_of("lane 5 skips it")));
  CHECK_THROWS_WITH(launch("reverse_in_block", {&cp, &p}, shape(1, 2000)), Catch::Contains("1 to 1024 threads"));
  // After a fault the engine runs the next launch normally.
  std::vector<float> in(256, 2.0f), out(256, 0);
  const float* pin = in.data();
  float* pout = out.data();
  launch("reverse_in_block", {&pin, &pout}, shape(1, 256));
  CHECK(out[17] == 2.0f);
}
