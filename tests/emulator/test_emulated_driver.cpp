// The emulated GPU's driver (emulator/driver/), called as towerjit's runtime calls NVIDIA's:
// through the entry points of the library TOWERJIT_CUDA=emulator loads. What a GPU would show,
// it shows: never-written memory reads NaN, a write past an allocation and a kernel given
// pageable host memory are faults that name the kernel, out-of-memory is real, a fault is
// sticky until the context is reset, and streams run concurrently, ordered only by events — a
// missing cuStreamWaitEvent is caught under the random schedule.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <latch>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jit/knobs.h"
#include "runtime/dist/half_wire.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;

namespace {

using CUdeviceptr = unsigned long long;
using Handle = void*;

// The entry points these tests call, bound from the emulator's library.
struct Emulator {
  void* lib = nullptr;
  int (*Init)(unsigned);
  int (*CtxRetain)(Handle*, int);
  int (*CtxSetCurrent)(Handle);
  int (*CtxReset)(int);
  int (*MemAlloc)(CUdeviceptr*, size_t);
  int (*MemFree)(CUdeviceptr);
  int (*HtoD)(CUdeviceptr, const void*, size_t, Handle);
  int (*DtoH)(void*, CUdeviceptr, size_t, Handle);
  int (*StreamCreate)(Handle*, unsigned);
  int (*StreamDestroy)(Handle);
  int (*StreamSynchronize)(Handle);
  int (*StreamWaitEvent)(Handle, Handle, unsigned);
  int (*EventCreate)(Handle*, unsigned);
  int (*EventDestroy)(Handle);
  int (*EventRecord)(Handle, Handle);
  int (*ModuleLoadData)(Handle*, const void*);
  int (*ModuleUnload)(Handle);
  int (*ModuleGetFunction)(Handle*, Handle, const char*);
  int (*Launch)(Handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Handle, void**, void**);
  int (*ErrorString)(int, const char**);
  int (*NvrtcCreate)(Handle*, const char*, const char*, int, const char* const*, const char* const*);
  int (*NvrtcCompile)(Handle, int, const char* const*);
  int (*NvrtcCubinSize)(Handle, size_t*);
  int (*NvrtcCubin)(Handle, char*);
  int (*NvrtcPtxSize)(Handle, size_t*);
  int (*NvrtcDestroy)(Handle*);

  Emulator() {
    lib = ::dlopen(towerjit::knobs::emulator_library().c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    bind(Init, "cuInit"), bind(CtxRetain, "cuDevicePrimaryCtxRetain"), bind(CtxSetCurrent, "cuCtxSetCurrent");
    bind(CtxReset, "cuDevicePrimaryCtxReset_v2"), bind(MemAlloc, "cuMemAlloc_v2"), bind(MemFree, "cuMemFree_v2");
    bind(HtoD, "cuMemcpyHtoDAsync_v2"), bind(DtoH, "cuMemcpyDtoHAsync_v2"), bind(StreamCreate, "cuStreamCreate");
    bind(StreamSynchronize, "cuStreamSynchronize"), bind(StreamWaitEvent, "cuStreamWaitEvent");
    bind(EventCreate, "cuEventCreate"), bind(EventRecord, "cuEventRecord"), bind(ModuleLoadData, "cuModuleLoadData");
    bind(ModuleGetFunction, "cuModuleGetFunction"), bind(Launch, "cuLaunchKernel"), bind(ErrorString, "cuGetErrorString");
    bind(NvrtcCreate, "nvrtcCreateProgram"), bind(NvrtcCompile, "nvrtcCompileProgram");
    bind(NvrtcCubinSize, "nvrtcGetCUBINSize"), bind(NvrtcCubin, "nvrtcGetCUBIN"), bind(NvrtcPtxSize, "nvrtcGetPTXSize");
    // What the tests create they destroy, so a leak LeakSanitizer finds is the emulator's.
    bind(NvrtcDestroy, "nvrtcDestroyProgram"), bind(ModuleUnload, "cuModuleUnload");
    bind(StreamDestroy, "cuStreamDestroy_v2"), bind(EventDestroy, "cuEventDestroy_v2");
    REQUIRE(Init(0) == 0);
    Handle ctx;
    REQUIRE(CtxRetain(&ctx, 0) == 0);
    REQUIRE(CtxSetCurrent(ctx) == 0);
  }
  template <typename F>
  void bind(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib, name));
    REQUIRE(f != nullptr);
  }
  std::string error(int code) {
    const char* text = nullptr;
    ErrorString(code, &text);
    return text ? text : "";
  }
  // Compiles `source` with the emulator's NVRTC (the real one runs too) and loads it.
  Handle load(const std::string& source) {
    Handle program = nullptr, module = nullptr;
    REQUIRE(NvrtcCreate(&program, source.c_str(), "driver_test.cu", 0, nullptr, nullptr) == 0);
    const char* options[] = {"--gpu-architecture=sm_90", "-std=c++17"};
    REQUIRE(NvrtcCompile(program, 2, options) == 0);
    size_t ptx = 0, size = 0;
    NvrtcPtxSize(program, &ptx);
    CHECK(ptx > 100);  // the real PTX
    NvrtcCubinSize(program, &size);
    std::string image(size, '\0');
    NvrtcCubin(program, image.data());
    NvrtcDestroy(&program);
    REQUIRE(ModuleLoadData(&module, image.data()) == 0);
    return module;
  }
};

Emulator& emulator() {
  static towerjit::test::CacheSandbox sandbox;
  static Emulator e;
  return e;
}

const char* kKernels = R"(
extern "C" __global__ void copy(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}
extern "C" __global__ void write_one_past(float* out, int n) {
  if (threadIdx.x == 0) out[n] = 1.0f;  // one element past the end
}
// Slow on purpose (a long dependent loop per element), then the value: a reader on another
// stream that does not wait sees the old contents.
extern "C" __global__ void slow_fill(float* out, int n, float value) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = 0.0f;
    for (int k = 0; k < 2000; ++k) v = v * 0.5f + 1.0f;
    out[i] = value + (v - v);
  }
}
)";

}  // namespace

TEST_CASE("emulated driver: never-written memory reads as NaN, a copy kernel moves real bytes", "[emulator]") {
  Emulator& e = emulator();
  Handle module = e.load(kKernels), copy;
  REQUIRE(e.ModuleGetFunction(&copy, module, "copy") == 0);
  const int n = 1000;
  CUdeviceptr in, out;
  REQUIRE(e.MemAlloc(&in, n * 4) == 0);
  REQUIRE(e.MemAlloc(&out, n * 4) == 0);
  std::vector<float> host(n);
  REQUIRE(e.DtoH(host.data(), in, n * 4, nullptr) == 0);
  for (float v : host) REQUIRE(std::isnan(v));
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  REQUIRE(e.HtoD(in, host.data(), n * 4, nullptr) == 0);
  int count = n;
  void* params[] = {&in, &out, &count};
  REQUIRE(e.Launch(copy, 3, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr) == 0);
  std::vector<float> back(n, -1);
  REQUIRE(e.DtoH(back.data(), out, n * 4, nullptr) == 0);
  CHECK(back == host);
  e.MemFree(in), e.MemFree(out);
  e.ModuleUnload(module);
}

TEST_CASE("emulated driver: a write past an allocation, or a kernel given pageable host memory, is a sticky fault naming the kernel", "[emulator]") {
  Emulator& e = emulator();
  Handle module = e.load(kKernels), past, copy;
  REQUIRE(e.ModuleGetFunction(&past, module, "write_one_past") == 0);
  REQUIRE(e.ModuleGetFunction(&copy, module, "copy") == 0);
  CUdeviceptr out;
  REQUIRE(e.MemAlloc(&out, 10 * 4) == 0);
  int n = 10;
  void* params[] = {&out, &n};
  REQUIRE(e.Launch(past, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr) == 0);  // asynchronous, as CUDA
  std::vector<float> host(10);
  CHECK(e.DtoH(host.data(), out, 40, nullptr) == 700);  // the next synchronising call reports it
  CHECK_THAT(e.error(700), Catch::Contains("kernel write_one_past wrote outside its allocations") &&
                               Catch::Contains("0 bytes past the end of the allocation of 40 bytes"));
  // Sticky: every later call reports it, until the context is reset.
  CHECK(e.DtoH(host.data(), out, 40, nullptr) == 700);
  REQUIRE(e.CtxReset(0) == 0);

  REQUIRE(e.MemAlloc(&out, 10 * 4) == 0);
  std::vector<float> pageable(10, 1.0f);
  float* from = pageable.data();
  void* copy_params[] = {&from, &out, &n};
  CHECK(e.Launch(copy, 1, 1, 1, 32, 1, 1, 0, nullptr, copy_params, nullptr) == 0);
  CHECK(e.DtoH(host.data(), out, 40, nullptr) == 700);
  CHECK_THAT(e.error(700), Catch::Contains("parameter 0 of kernel copy") &&
                               Catch::Contains("neither device memory nor page-locked host memory"));
  REQUIRE(e.CtxReset(0) == 0);
  e.ModuleUnload(module);
}

TEST_CASE("emulated driver: memory has a limit", "[emulator]") {
  Emulator& e = emulator();
  CUdeviceptr p;
  CHECK(e.MemAlloc(&p, std::size_t(1) << 40) == 2);  // CUDA_ERROR_OUT_OF_MEMORY
  CHECK(e.MemAlloc(&p, 0) == 1);
}

// Stream A fills a buffer slowly; stream B copies it out. With the event wait the copy always
// sees the fill; without it, the random schedule shows the race within a few seeds.
TEST_CASE("emulated driver: streams run concurrently, ordered only by events", "[emulator]") {
  Emulator& e = emulator();
  Handle module = e.load(kKernels), fill, copy;
  REQUIRE(e.ModuleGetFunction(&fill, module, "slow_fill") == 0);
  REQUIRE(e.ModuleGetFunction(&copy, module, "copy") == 0);
  auto run = [&](bool wait) {
    Handle a, b, event;
    e.StreamCreate(&a, 1), e.StreamCreate(&b, 1), e.EventCreate(&event, 0);
    int n = 256;
    CUdeviceptr buffer, out;
    e.MemAlloc(&buffer, n * 4), e.MemAlloc(&out, n * 4);
    std::vector<float> zeros(n, 0.0f);
    e.HtoD(buffer, zeros.data(), n * 4, a);
    float value = 7.0f;
    void* fill_params[] = {&buffer, &n, &value};
    void* copy_params[] = {&buffer, &out, &n};
    e.Launch(fill, 1, 1, 1, 64, 1, 1, 0, a, fill_params, nullptr);
    e.EventRecord(event, a);
    if (wait) e.StreamWaitEvent(b, event, 0);
    e.Launch(copy, 1, 1, 1, 64, 1, 1, 0, b, copy_params, nullptr);
    e.StreamSynchronize(b);
    e.StreamSynchronize(a);
    std::vector<float> back(n);
    e.DtoH(back.data(), out, n * 4, nullptr);
    e.MemFree(buffer), e.MemFree(out);
    e.StreamDestroy(a), e.StreamDestroy(b), e.EventDestroy(event);
    return back[0] == 7.0f && back[n - 1] == 7.0f;
  };
  for (int i = 0; i < 5; ++i) CHECK(run(true));
  // A missing wait: some seed of the random schedule runs the copy first.
  int raced = 0;
  for (int seed = 1; seed <= 8 && raced == 0; ++seed) {
    towerjit::test::ScopedEnv schedule("TOWERJIT_EMULATOR_SCHEDULE", "random:" + std::to_string(seed));
    raced += !run(false);
  }
  CHECK(raced > 0);
  e.ModuleUnload(module);
}

// CUDA lets any thread call cuModuleGetFunction at any time, and towers sharing a GPU look up
// the library module's kernels at once: each name gets one function whichever thread asks
// first. Eight threads ask for 64 names, each in its own order, all released together, on four
// fresh modules. Under ThreadSanitizer (tag [threads]) an unguarded table is a reported race;
// without it, a lost or doubled entry (a leak LeakSanitizer reports, or two handles for one name).
TEST_CASE("emulated driver: threads looking up one module's kernels at once get one function per name",
          "[emulator][threads]") {
  Emulator& e = emulator();
  constexpr int kNames = 64, kThreads = 8;
  std::string source;
  for (int k = 0; k < kNames; ++k)
    source += "extern \"C\" __global__ void kernel_number_" + std::to_string(k) + "(float* out) { out[0] = " +
              std::to_string(k) + ".0f; }\n";
  for (int round = 0; round < 4; ++round) {  // a fresh module each round: its table starts empty
    Handle module = e.load(source);
    std::vector<std::vector<Handle>> seen(kThreads, std::vector<Handle>(kNames, nullptr));
    std::vector<int> failures(kThreads, 0);
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        for (int i = 0; i < kNames; ++i) {
          const int k = (i * (2 * t + 1) + t) % kNames;  // a different order per thread
          const std::string name = "kernel_number_" + std::to_string(k);
          failures[t] += e.ModuleGetFunction(&seen[t][k], module, name.c_str()) != 0;
        }
      });
    for (std::thread& t : threads) t.join();
    for (int t = 0; t < kThreads; ++t) {
      CHECK(failures[t] == 0);
      CHECK(seen[t] == seen[0]);
    }
    CHECK(std::set<Handle>(seen[0].begin(), seen[0].end()).size() == kNames);
    e.ModuleUnload(module);
  }
}

// Communicators joined by one unique id (ncclCommInitRank), as processes join them: here two
// ranks in this process, each on its own stream, meeting in the shared memory the id names
// as two processes would (tests/mpi/mpi_cli.sh runs them in two). Sizes 1, 7 and 127; each
// result is the sum in rank order; a rank out of range or an id not made by ncclGetUniqueId is
// an invalid argument.
TEST_CASE("emulated NCCL: ranks joined by a unique id sum their buffers in rank order", "[emulator]") {
  Emulator& e = emulator();
  struct UniqueId {
    char internal[128];
  };
  using Comm = void*;
  int (*GetUniqueId)(UniqueId*);
  int (*CommInitRank)(Comm*, int, UniqueId, int);
  int (*AllReduce)(const void*, void*, size_t, int, int, Comm, Handle);
  int (*CommDestroy)(Comm);
  e.bind(GetUniqueId, "ncclGetUniqueId"), e.bind(CommInitRank, "ncclCommInitRank");
  e.bind(AllReduce, "ncclAllReduce"), e.bind(CommDestroy, "ncclCommDestroy");
  constexpr int kFloat32 = 7, kSum = 0, kInvalidArgument = 4;
  UniqueId id;
  REQUIRE(GetUniqueId(&id) == 0);
  Comm comms[2];
  REQUIRE(CommInitRank(&comms[0], 2, id, 0) == 0);
  REQUIRE(CommInitRank(&comms[1], 2, id, 1) == 0);
  Comm bad = nullptr;
  CHECK(CommInitRank(&bad, 2, id, 2) == kInvalidArgument);
  UniqueId forged{};
  CHECK(CommInitRank(&bad, 2, forged, 0) == kInvalidArgument);
  Handle streams[2];
  for (Handle& s : streams) REQUIRE(e.StreamCreate(&s, 1) == 0);
  for (const size_t n : {size_t{1}, size_t{7}, size_t{127}}) {
    std::vector<float> in[2] = {std::vector<float>(n), std::vector<float>(n)};
    CUdeviceptr buffer[2];
    for (int r = 0; r < 2; ++r) {
      for (size_t i = 0; i < n; ++i) in[r][i] = r == 0 ? 0.1f * static_cast<float>(i) : 1e7f + static_cast<float>(i);
      REQUIRE(e.MemAlloc(&buffer[r], n * 4) == 0);
      REQUIRE(e.HtoD(buffer[r], in[r].data(), n * 4, streams[r]) == 0);
      auto* p = reinterpret_cast<void*>(buffer[r]);
      REQUIRE(AllReduce(p, p, n, kFloat32, kSum, comms[r], streams[r]) == 0);
    }
    for (int r = 0; r < 2; ++r) {
      std::vector<float> out(n);
      REQUIRE(e.DtoH(out.data(), buffer[r], n * 4, streams[r]) == 0);
      REQUIRE(e.StreamSynchronize(streams[r]) == 0);
      for (size_t i = 0; i < n; ++i) CHECK(out[i] == (0.0f + in[0][i]) + in[1][i]);
      e.MemFree(buffer[r]);
    }
  }
  for (Handle s : streams) e.StreamDestroy(s);
  for (Comm c : comms) CommDestroy(c);
}

// Gradient compression's all-reduce: bf16 (ncclBfloat16, 9) and f16 (ncclFloat16, 6) summed
// in the format over 3 ranks, each partial sum one rounding of the exact sum, in rank order:
// the same bits as half_wire.h's add_on_wire (bit operations, written apart from the emulator's
// conversions), on every rank, for ranks of one clique (ncclCommInitAll) and ranks joined by an
// id (ncclCommInitRank, shared memory). Random bit patterns (ties, overflow, subnormals, signed
// zeros, infinities, NaN: any NaN stands for NaN) at sizes 1, 7 and 127.
TEST_CASE("emulated NCCL: bf16 and f16 all-reduces sum in the format, in rank order", "[emulator]") {
  Emulator& e = emulator();
  struct UniqueId {
    char internal[128];
  };
  using Comm = void*;
  int (*CommInitAll)(Comm*, int, const int*);
  int (*GetUniqueId)(UniqueId*);
  int (*CommInitRank)(Comm*, int, UniqueId, int);
  int (*AllReduce)(const void*, void*, size_t, int, int, Comm, Handle);
  int (*GroupStart)();
  int (*GroupEnd)();
  int (*CommDestroy)(Comm);
  e.bind(CommInitAll, "ncclCommInitAll"), e.bind(GetUniqueId, "ncclGetUniqueId");
  e.bind(CommInitRank, "ncclCommInitRank"), e.bind(AllReduce, "ncclAllReduce");
  e.bind(GroupStart, "ncclGroupStart"), e.bind(GroupEnd, "ncclGroupEnd"), e.bind(CommDestroy, "ncclCommDestroy");
  constexpr int kRanks = 3, kSum = 0, kFloat16 = 6, kBfloat16 = 9, kInt8 = 0, kInvalidArgument = 4;
  std::mt19937 random(2025);
  for (const bool by_id : {false, true}) {
    Comm comms[kRanks];
    if (by_id) {
      UniqueId id;
      REQUIRE(GetUniqueId(&id) == 0);
      for (int r = 0; r < kRanks; ++r) REQUIRE(CommInitRank(&comms[r], kRanks, id, r) == 0);
    } else {
      const int devices[kRanks] = {0, 0, 0};
      REQUIRE(CommInitAll(comms, kRanks, devices) == 0);
    }
    Handle streams[kRanks];
    for (Handle& s : streams) REQUIRE(e.StreamCreate(&s, 1) == 0);
    for (const auto& [type, format] : {std::pair{kBfloat16, tj::DType::bf16}, std::pair{kFloat16, tj::DType::f16}})
      for (const size_t n : {size_t{1}, size_t{7}, size_t{127}}) {
        INFO((by_id ? "ranks joined by an id" : "one clique") << ", " << tj::dtype_name(format) << ", " << n);
        std::vector<uint16_t> in[kRanks];
        CUdeviceptr buffer[kRanks];
        REQUIRE(GroupStart() == 0);  // the ranks' calls from one thread, as NCCL asks
        for (int r = 0; r < kRanks; ++r) {
          for (size_t i = 0; i < n; ++i) in[r].push_back(static_cast<uint16_t>(random()));
          REQUIRE(e.MemAlloc(&buffer[r], n * 2) == 0);
          REQUIRE(e.HtoD(buffer[r], in[r].data(), n * 2, streams[r]) == 0);
          auto* p = reinterpret_cast<void*>(buffer[r]);
          REQUIRE(AllReduce(p, p, n, type, kSum, comms[r], streams[r]) == 0);
        }
        REQUIRE(GroupEnd() == 0);
        for (int r = 0; r < kRanks; ++r) {
          std::vector<uint16_t> out(n);
          REQUIRE(e.DtoH(out.data(), buffer[r], n * 2, streams[r]) == 0);
          REQUIRE(e.StreamSynchronize(streams[r]) == 0);
          for (size_t i = 0; i < n; ++i) {
            const uint16_t want = tj::dist::add_on_wire(tj::dist::add_on_wire(in[0][i], in[1][i], format), in[2][i], format);
            const float value = tj::dist::from_wire(want, format);
            INFO("element " << i << ": " << in[0][i] << " + " << in[1][i] << " + " << in[2][i]);
            if (std::isnan(value)) CHECK(std::isnan(tj::dist::from_wire(out[i], format)));
            else CHECK(out[i] == want);
          }
          e.MemFree(buffer[r]);
        }
      }
    CUdeviceptr small;
    REQUIRE(e.MemAlloc(&small, 8) == 0);
    auto* p = reinterpret_cast<void*>(small);
    CHECK(AllReduce(p, p, 2, kInt8, kSum, comms[0], streams[0]) == kInvalidArgument);  // not a type it sums
    CHECK(AllReduce(p, p, 5, kBfloat16, kSum, comms[0], streams[0]) == kInvalidArgument);  // 10 bytes of 8
    e.MemFree(small);
    for (Handle s : streams) e.StreamDestroy(s);
    for (Comm c : comms) CommDestroy(c);
  }
}

// Stream capture as CUDA defines it: work queued on a capturing stream (and on a stream that
// joins the capture by waiting on one of its events) is recorded, not run; each launch of the
// instantiated graph runs it, in order, with the arguments it was captured with. A call that
// would wait for the capturing stream fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)
// and invalidates the capture (cuStreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901);
// an event recorded in a capture cannot be queried (CUDA_ERROR_CAPTURED_EVENT, 907); a capture
// may not wait on an event recorded outside it (CUDA_ERROR_STREAM_CAPTURE_ISOLATION, 905).
TEST_CASE("emulated driver: a captured graph runs only when launched, and a synchronising call breaks a capture", "[emulator]") {
  Emulator& e = emulator();
  int (*BeginCapture)(Handle, int);
  int (*EndCapture)(Handle, Handle*);
  int (*Instantiate)(Handle*, Handle, unsigned long long);
  int (*GraphLaunch)(Handle, Handle);
  int (*GraphExecDestroy)(Handle);
  int (*GraphDestroy)(Handle);
  int (*EventQuery)(Handle);
  int (*CtxSynchronize)();
  e.bind(BeginCapture, "cuStreamBeginCapture_v2"), e.bind(EndCapture, "cuStreamEndCapture");
  e.bind(Instantiate, "cuGraphInstantiateWithFlags"), e.bind(GraphLaunch, "cuGraphLaunch");
  e.bind(GraphExecDestroy, "cuGraphExecDestroy"), e.bind(GraphDestroy, "cuGraphDestroy");
  e.bind(EventQuery, "cuEventQuery"), e.bind(CtxSynchronize, "cuCtxSynchronize");
  constexpr int kThreadLocal = 1, kGlobal = 0;
  constexpr int kUnsupported = 900, kInvalidated = 901, kIsolation = 905, kCapturedEvent = 907;

  Handle module = e.load(kKernels), copy, fill;
  REQUIRE(e.ModuleGetFunction(&copy, module, "copy") == 0);
  REQUIRE(e.ModuleGetFunction(&fill, module, "slow_fill") == 0);
  Handle a, b, forked, joined;
  e.StreamCreate(&a, 1), e.StreamCreate(&b, 1), e.EventCreate(&forked, 0), e.EventCreate(&joined, 0);
  for (const int n : {1, 7, 127}) {
    CUdeviceptr x, y;
    REQUIRE(e.MemAlloc(&x, n * 4) == 0);
    REQUIRE(e.MemAlloc(&y, n * 4) == 0);
    int count = n;
    float value = 3.0f;
    void* fill_params[] = {&x, &count, &value};
    void* copy_params[] = {&x, &y, &count};
    // a fills x, b (joined through an event) copies x to y, a waits for b: one graph.
    REQUIRE(BeginCapture(a, kThreadLocal) == 0);
    REQUIRE(e.Launch(fill, 1, 1, 1, 64, 1, 1, 0, a, fill_params, nullptr) == 0);
    REQUIRE(e.EventRecord(forked, a) == 0);
    REQUIRE(e.StreamWaitEvent(b, forked, 0) == 0);
    REQUIRE(e.Launch(copy, 1, 1, 1, 64, 1, 1, 0, b, copy_params, nullptr) == 0);
    REQUIRE(e.EventRecord(joined, b) == 0);
    REQUIRE(e.StreamWaitEvent(a, joined, 0) == 0);
    CHECK(EventQuery(joined) == kCapturedEvent);
    Handle graph = nullptr, exec = nullptr;
    REQUIRE(EndCapture(a, &graph) == 0);
    value = 5.0f;  // the graph keeps the arguments it was captured with
    std::vector<float> back(n, 0.0f);
    REQUIRE(e.DtoH(back.data(), y, n * 4, nullptr) == 0);
    CHECK(std::isnan(back[0]));  // recorded, not run
    REQUIRE(Instantiate(&exec, graph, 0) == 0);
    for (int launch = 0; launch < 2; ++launch) {
      std::vector<float> nan(n, std::nanf(""));
      REQUIRE(e.HtoD(y, nan.data(), n * 4, a) == 0);
      REQUIRE(GraphLaunch(exec, a) == 0);
      REQUIRE(e.StreamSynchronize(a) == 0);
      REQUIRE(e.DtoH(back.data(), y, n * 4, nullptr) == 0);
      CHECK(back == std::vector<float>(n, 3.0f));
    }
    GraphExecDestroy(exec), GraphDestroy(graph);
    e.MemFree(x), e.MemFree(y);
  }
  // Each synchronising call breaks the capture it is made in; the stream works on after it.
  float v = 0;
  CUdeviceptr word;
  REQUIRE(e.MemAlloc(&word, 4) == 0);
  const std::vector<std::pair<std::string, std::function<int()>>> breakers = {
      {"cuStreamSynchronize", [&] { return e.StreamSynchronize(a); }},
      {"cuCtxSynchronize", [&] { return CtxSynchronize(); }},
      {"cuMemcpyDtoHAsync into pageable memory", [&] { return e.DtoH(&v, word, 4, a); }},
  };
  for (const auto& [call, make] : breakers) {
    INFO(call);
    REQUIRE(BeginCapture(a, kThreadLocal) == 0);
    const int result = make();
    CHECK(result == kUnsupported);
    CHECK(e.error(result).find(call) != std::string::npos);
    Handle graph = reinterpret_cast<Handle>(1);
    CHECK(EndCapture(a, &graph) == kInvalidated);
    CHECK(graph == nullptr);
    CHECK(e.error(kInvalidated).find(call) != std::string::npos);
    CHECK(e.StreamSynchronize(a) == 0);
  }
  e.MemFree(word);
  // An allocation from the capturing thread, or during a global-mode capture.
  for (const int mode : {kThreadLocal, kGlobal}) {
    REQUIRE(BeginCapture(a, mode) == 0);
    CUdeviceptr p = 0;
    CHECK(e.MemAlloc(&p, 4) == kUnsupported);
    Handle graph = nullptr;
    CHECK(EndCapture(a, &graph) == kInvalidated);
  }
  // A wait on an event recorded outside the capture.
  REQUIRE(e.EventRecord(forked, b) == 0);
  REQUIRE(BeginCapture(a, kThreadLocal) == 0);
  CHECK(e.StreamWaitEvent(a, forked, 0) == kIsolation);
  Handle graph = nullptr;
  CHECK(EndCapture(a, &graph) == kInvalidated);
  REQUIRE(e.StreamSynchronize(b) == 0);
  CHECK(EventQuery(forked) == 0);
  e.StreamDestroy(a), e.StreamDestroy(b), e.EventDestroy(forked), e.EventDestroy(joined);
  e.ModuleUnload(module);
}

// An all-reduce captured into a graph joins a collective of its own at every launch: each rank
// replays its graph twice, with new inputs, and gets each time's sum.
TEST_CASE("emulated NCCL: an all-reduce captured into a graph sums at every launch", "[emulator]") {
  Emulator& e = emulator();
  struct UniqueId {
    char internal[128];
  };
  using Comm = void*;
  int (*GetUniqueId)(UniqueId*);
  int (*CommInitRank)(Comm*, int, UniqueId, int);
  int (*AllReduce)(const void*, void*, size_t, int, int, Comm, Handle);
  int (*CommDestroy)(Comm);
  int (*BeginCapture)(Handle, int);
  int (*EndCapture)(Handle, Handle*);
  int (*Instantiate)(Handle*, Handle, unsigned long long);
  int (*GraphLaunch)(Handle, Handle);
  int (*GraphExecDestroy)(Handle);
  int (*GraphDestroy)(Handle);
  e.bind(GetUniqueId, "ncclGetUniqueId"), e.bind(CommInitRank, "ncclCommInitRank");
  e.bind(AllReduce, "ncclAllReduce"), e.bind(CommDestroy, "ncclCommDestroy");
  e.bind(BeginCapture, "cuStreamBeginCapture_v2"), e.bind(EndCapture, "cuStreamEndCapture");
  e.bind(Instantiate, "cuGraphInstantiateWithFlags"), e.bind(GraphLaunch, "cuGraphLaunch");
  e.bind(GraphExecDestroy, "cuGraphExecDestroy"), e.bind(GraphDestroy, "cuGraphDestroy");
  UniqueId id;
  REQUIRE(GetUniqueId(&id) == 0);
  Comm comms[2];
  REQUIRE(CommInitRank(&comms[0], 2, id, 0) == 0);
  REQUIRE(CommInitRank(&comms[1], 2, id, 1) == 0);
  const size_t n = 7;
  Handle streams[2], graphs[2], execs[2];
  CUdeviceptr buffer[2];
  for (int r = 0; r < 2; ++r) {
    REQUIRE(e.StreamCreate(&streams[r], 1) == 0);
    REQUIRE(e.MemAlloc(&buffer[r], n * 4) == 0);
    REQUIRE(BeginCapture(streams[r], 1) == 0);
    auto* p = reinterpret_cast<void*>(buffer[r]);
    REQUIRE(AllReduce(p, p, n, 7, 0, comms[r], streams[r]) == 0);
    REQUIRE(EndCapture(streams[r], &graphs[r]) == 0);
    REQUIRE(Instantiate(&execs[r], graphs[r], 0) == 0);
  }
  for (int launch = 1; launch <= 2; ++launch) {
    for (int r = 0; r < 2; ++r) {
      std::vector<float> in(n, static_cast<float>(launch * (r + 1)));
      REQUIRE(e.HtoD(buffer[r], in.data(), n * 4, streams[r]) == 0);
      REQUIRE(GraphLaunch(execs[r], streams[r]) == 0);
    }
    for (int r = 0; r < 2; ++r) {
      std::vector<float> out(n);
      REQUIRE(e.DtoH(out.data(), buffer[r], n * 4, streams[r]) == 0);
      CHECK(out == std::vector<float>(n, static_cast<float>(3 * launch)));
    }
  }
  for (int r = 0; r < 2; ++r) {
    GraphExecDestroy(execs[r]), GraphDestroy(graphs[r]);
    e.MemFree(buffer[r]);
    e.StreamDestroy(streams[r]);
    CommDestroy(comms[r]);
  }
}
