// The emulated GPU's launch records (emulator/driver/launch_log.h), called as the runtime calls
// the driver: a kernel's record has its grid, block, shared memory and the serial work its
// threads counted (TJ_WORK), equal to the closed form of its grid-stride loop; nothing is
// recorded outside a recording; copies are recorded with their bytes; the device reports
// TOWERJIT_EMULATED_GPU_SMS SMs.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "jit/knobs.h"
#include "tests/jit/cpu_test_env.h"

namespace {

using Handle = void*;
using CUdeviceptr = unsigned long long;

template <typename F>
F bound(void* lib, const char* name) {
  auto f = reinterpret_cast<F>(::dlsym(lib, name));
  REQUIRE(f != nullptr);
  return f;
}

// A grid-stride loop counting one unit of work a point, with 64 bytes of static shared memory.
const char* kKernel = R"(
#ifndef TJ_WORK
#define TJ_WORK(n)
#endif
extern "C" __global__ void scale(const float* in, float* out, int n) {
  __shared__ float pad[16];
  pad[threadIdx.x % 16] = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    TJ_WORK(1);
    out[i] = 2.0f * in[i] + pad[0];
  }
}
)";

std::vector<nlohmann::json> parse(const char* text) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("launch records: a kernel's shape and its threads' counted work, copies, and the SM count") {
  static towerjit::test::CacheSandbox sandbox;
  setenv("TOWERJIT_EMULATED_GPU_SMS", "132", 1);
  void* lib = ::dlopen(towerjit::knobs::emulator_library().c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  REQUIRE(bound<int (*)(unsigned)>(lib, "cuInit")(0) == 0);
  int sms = 0;
  REQUIRE(bound<int (*)(int*, int, int)>(lib, "cuDeviceGetAttribute")(&sms, 16, 0) == 0);
  CHECK(sms == 132);
  Handle ctx = nullptr, stream = nullptr, program = nullptr, module = nullptr, fn = nullptr;
  REQUIRE(bound<int (*)(Handle*, int)>(lib, "cuDevicePrimaryCtxRetain")(&ctx, 0) == 0);
  REQUIRE(bound<int (*)(Handle)>(lib, "cuCtxSetCurrent")(ctx) == 0);
  REQUIRE(bound<int (*)(Handle*, unsigned)>(lib, "cuStreamCreate")(&stream, 0) == 0);
  REQUIRE(bound<int (*)(Handle*, const char*, const char*, int, const char* const*, const char* const*)>(
              lib, "nvrtcCreateProgram")(&program, kKernel, "records.cu", 0, nullptr, nullptr) == 0);
  const char* options[] = {"--gpu-architecture=sm_90"};
  REQUIRE(bound<int (*)(Handle, int, const char* const*)>(lib, "nvrtcCompileProgram")(program, 1, options) == 0);
  size_t size = 0;
  bound<int (*)(Handle, size_t*)>(lib, "nvrtcGetCUBINSize")(program, &size);
  std::string image(size, '\0');
  bound<int (*)(Handle, char*)>(lib, "nvrtcGetCUBIN")(program, image.data());
  bound<int (*)(Handle*)>(lib, "nvrtcDestroyProgram")(&program);
  REQUIRE(bound<int (*)(Handle*, const void*)>(lib, "cuModuleLoadData")(&module, image.data()) == 0);
  REQUIRE(bound<int (*)(Handle*, Handle, const char*)>(lib, "cuModuleGetFunction")(&fn, module, "scale") == 0);

  auto alloc = bound<int (*)(CUdeviceptr*, size_t)>(lib, "cuMemAlloc_v2");
  auto htod = bound<int (*)(CUdeviceptr, const void*, size_t, Handle)>(lib, "cuMemcpyHtoDAsync_v2");
  auto launch = bound<int (*)(Handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Handle,
                              void**, void**)>(lib, "cuLaunchKernel");
  auto sync = bound<int (*)(Handle)>(lib, "cuStreamSynchronize");
  auto start = bound<void (*)()>(lib, "tj_emu_launch_log_start");
  auto stop = bound<const char* (*)()>(lib, "tj_emu_launch_log_stop");

  const int n = 1000;  // 3 blocks of 128 threads: 384 threads, 232 of them take 3 points
  std::vector<float> host(n, 1.0f);
  CUdeviceptr in = 0, out = 0;
  REQUIRE(alloc(&in, n * 4) == 0);
  REQUIRE(alloc(&out, n * 4) == 0);
  int count = n;
  void* params[] = {&in, &out, &count};
  REQUIRE(launch(fn, 3, 1, 1, 128, 1, 1, 0, stream, params, nullptr) == 0);  // not recorded
  REQUIRE(sync(stream) == 0);
  CHECK(parse(stop()).empty());

  start();
  REQUIRE(htod(in, host.data(), n * 4, stream) == 0);
  REQUIRE(launch(fn, 3, 1, 1, 128, 1, 1, 0, stream, params, nullptr) == 0);
  REQUIRE(sync(stream) == 0);
  const std::vector<nlohmann::json> records = parse(stop());
  REQUIRE(records.size() == 2);
  CHECK(records[0]["kind"] == "copy");
  CHECK(records[0]["name"] == "cuMemcpyHtoDAsync");
  CHECK(records[0]["host_link"] == true);
  CHECK(records[0]["bytes"] == 2.0 * n * 4);
  const nlohmann::json& k = records[1];
  CHECK(k["kind"] == "kernel");
  CHECK(k["name"] == "scale");
  CHECK(k["grid"] == nlohmann::json::array({3, 1, 1}));
  CHECK(k["block"] == nlohmann::json::array({128, 1, 1}));
  CHECK(k["static_shared_bytes"] == 64);
  CHECK(k["dynamic_shared_bytes"] == 0);
  CHECK(k["work_max"] == 3);  // ceil(1000 / 384)
  CHECK(k["work_mean"].get<double>() == Approx(1000.0 / 384));
  CHECK(k["stream"] != "0");
  CHECK(k["graph"] == false);

  // The same launch captured into a CUDA graph: recorded when the graph is replayed, marked so.
  Handle graph = nullptr, exec = nullptr;
  REQUIRE(bound<int (*)(Handle, int)>(lib, "cuStreamBeginCapture_v2")(stream, 0) == 0);
  REQUIRE(launch(fn, 3, 1, 1, 128, 1, 1, 0, stream, params, nullptr) == 0);
  REQUIRE(bound<int (*)(Handle, Handle*)>(lib, "cuStreamEndCapture")(stream, &graph) == 0);
  REQUIRE(bound<int (*)(Handle*, Handle, unsigned long long)>(lib, "cuGraphInstantiateWithFlags")(&exec, graph, 0) == 0);
  start();
  REQUIRE(bound<int (*)(Handle, Handle)>(lib, "cuGraphLaunch")(exec, stream) == 0);
  REQUIRE(launch(fn, 3, 1, 1, 128, 1, 1, 0, stream, params, nullptr) == 0);
  REQUIRE(sync(stream) == 0);
  const std::vector<nlohmann::json> replayed = parse(stop());
  REQUIRE(replayed.size() == 2);
  CHECK(replayed[0]["name"] == "scale");
  CHECK(replayed[0]["graph"] == true);
  CHECK(replayed[0]["work_max"] == 3);
  CHECK(replayed[1]["graph"] == false);  // launched on its own after the replay
  bound<int (*)(Handle)>(lib, "cuGraphExecDestroy")(exec);
  bound<int (*)(Handle)>(lib, "cuGraphDestroy")(graph);
  // Everything made here given back, so LeakSanitizer sees nothing of this test's.
  CHECK(bound<int (*)(Handle)>(lib, "cuModuleUnload")(module) == 0);
  CHECK(bound<int (*)(CUdeviceptr)>(lib, "cuMemFree_v2")(in) == 0);
  CHECK(bound<int (*)(CUdeviceptr)>(lib, "cuMemFree_v2")(out) == 0);
  CHECK(bound<int (*)(Handle)>(lib, "cuStreamDestroy_v2")(stream) == 0);
  unsetenv("TOWERJIT_EMULATED_GPU_SMS");
}
