// A stand-in for the NVIDIA driver (built as libcuda.so.1 in its own directory, loaded only by
// the ctest entry that points LD_LIBRARY_PATH at it), so the CUDA runtime's host side runs on
// machines without a GPU: one device ("towerjit fake GPU", sm_90, 4 SMs; TJFAKE_DEVICES=N, read
// when the driver is loaded, for N of them); device memory is host memory; copies and memsets
// happen at once; streams and events do nothing; modules are kept as given and kernels are
// looked up in them by name; launches run nothing but are logged (kernel, grid, block and,
// where the test said how many, the 8-byte parameters) for the test to read through the
// tjfake_* functions.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct Launch {
  std::string kernel;
  unsigned grid, block;
  std::vector<unsigned long long> params;
};

struct State {
  std::mutex mutex;
  std::vector<Launch> launches;
  std::map<std::string, int> param_counts;  // kernel -> 8-byte parameters to log
  long long allocations = 0;
};

State& state() {
  static State s;
  return s;
}

struct Module {
  const char* image;
  size_t size;
  std::set<std::string> functions;  // the names handed out as CUfunctions, freed with the module
};

// The bytes of a loaded image: an ELF (cubin) up to its section headers, or PTX text.
size_t image_size(const char* image) {
  if (std::memcmp(image, "\x7f" "ELF", 4) != 0) return std::strlen(image);
  uint64_t shoff;
  uint16_t shentsize, shnum;
  std::memcpy(&shoff, image + 0x28, 8);
  std::memcpy(&shentsize, image + 0x3A, 2);
  std::memcpy(&shnum, image + 0x3C, 2);
  return shoff + static_cast<size_t>(shentsize) * shnum;
}

constexpr int kNotFound = 500, kInvalidDevice = 101;

// TJFAKE_DEVICES=N gives N identical devices.
int device_count() {
  const char* n = std::getenv("TJFAKE_DEVICES");
  return n && std::atoi(n) > 0 ? std::atoi(n) : 1;
}

}  // namespace

extern "C" {

int cuInit(unsigned) { return 0; }
// NVRTC 13 itself loads libcuda.so.1 and asks for the driver's internal export tables; a
// driver without them (as the toolkit's stub) is one NVRTC compiles without.
int cuGetExportTable(const void** table, const void*) { *table = nullptr; return 801; }
int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
int cuGetErrorName(int r, const char** s) { *s = r == 0 ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE"; return 0; }
int cuGetErrorString(int r, const char** s) { *s = r == 0 ? "no error" : "an error of the fake driver"; return 0; }
int cuDeviceGet(int* d, int ordinal) { if (ordinal < 0 || ordinal >= device_count()) return kInvalidDevice; *d = ordinal; return 0; }
int cuDeviceGetCount(int* c) { *c = device_count(); return 0; }
int cuDeviceGetName(char* name, int len, int) { std::snprintf(name, len, "towerjit fake GPU"); return 0; }
int cuDeviceGetAttribute(int* v, int attribute, int) {
  *v = attribute == 75 ? 9 : attribute == 76 ? 0 : attribute == 16 ? 4 : 0;
  return 0;
}
int cuDeviceTotalMem_v2(size_t* bytes, int) { *bytes = size_t{1} << 30; return 0; }
int cuDeviceCanAccessPeer(int* can, int, int) { *can = 0; return 0; }
int cuDevicePrimaryCtxRetain(void** ctx, int d) { *ctx = reinterpret_cast<void*>(0x1000 + 0x10 * d); return 0; }
int cuCtxSetCurrent(void*) { return 0; }
int cuCtxSynchronize() { return 0; }
int cuCtxEnablePeerAccess(void*, unsigned) { return 0; }
int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) { *free_bytes = *total = size_t{1} << 30; return 0; }
int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  *p = reinterpret_cast<unsigned long long>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
  std::lock_guard<std::mutex> lock(state().mutex);
  ++state().allocations;
  return 0;
}
int cuMemFree_v2(unsigned long long p) { std::free(reinterpret_cast<void*>(p)); return 0; }
int cuMemAllocHost_v2(void** p, size_t bytes) { *p = std::malloc(bytes); return 0; }
int cuMemFreeHost(void* p) { std::free(p); return 0; }
int cuMemcpyHtoDAsync_v2(unsigned long long d, const void* h, size_t n, void*) {
  std::memcpy(reinterpret_cast<void*>(d), h, n);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void* h, unsigned long long d, size_t n, void*) {
  std::memcpy(h, reinterpret_cast<const void*>(d), n);
  return 0;
}
int cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void*) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n);
  return 0;
}
int cuMemcpyPeerAsync(unsigned long long d, void*, unsigned long long s, void*, size_t n, void*) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n);
  return 0;
}
int cuMemsetD32Async(unsigned long long d, unsigned v, size_t n, void*) {
  auto* p = reinterpret_cast<unsigned*>(d);
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return 0;
}
int cuMemsetD8Async(unsigned long long d, unsigned char v, size_t n, void*) {
  std::memset(reinterpret_cast<void*>(d), v, n);
  return 0;
}
int cuStreamCreate(void** s, unsigned) { *s = new int(0); return 0; }
int cuStreamDestroy_v2(void* s) { delete static_cast<int*>(s); return 0; }
int cuStreamSynchronize(void*) { return 0; }
int cuStreamWaitEvent(void*, void*, unsigned) { return 0; }
int cuEventCreate(void** e, unsigned) { *e = new int(0); return 0; }
int cuEventDestroy_v2(void* e) { delete static_cast<int*>(e); return 0; }
int cuEventRecord(void*, void*) { return 0; }
int cuEventQuery(void*) { return 0; }
int cuEventSynchronize(void*) { return 0; }
int cuEventElapsedTime_v2(float* ms, void*, void*) { *ms = 0; return 0; }
int cuModuleLoadData(void** module, const void* image) {
  auto* m = new Module{static_cast<const char*>(image), 0};
  // The runtime keeps the image alive only for the call: copy it.
  m->size = image_size(m->image);
  char* copy = static_cast<char*>(std::malloc(m->size + 1));
  std::memcpy(copy, m->image, m->size);
  copy[m->size] = 0;
  m->image = copy;
  *module = m;
  return 0;
}
int cuModuleUnload(void* module) {
  auto* m = static_cast<Module*>(module);
  std::free(const_cast<char*>(m->image));
  delete m;
  return 0;
}
int cuModuleGetFunction(void** f, void* module, const char* name) {
  auto* m = static_cast<Module*>(module);
  const std::string key = std::string(name) + '\0';  // a whole symbol name in the string table
  if (!memmem(m->image, m->size, key.data(), key.size())) return kNotFound;
  std::lock_guard<std::mutex> lock(state().mutex);  // any thread may ask, as CUDA's driver allows
  *f = const_cast<char*>(m->functions.insert(name).first->c_str());
  return 0;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned, void*,
                   void** params, void**) {
  Launch l{static_cast<const char*>(f), gx, bx, {}};
  std::lock_guard<std::mutex> lock(state().mutex);
  auto it = state().param_counts.find(l.kernel);
  if (it != state().param_counts.end())
    for (int i = 0; i < it->second; ++i) l.params.push_back(*static_cast<unsigned long long*>(params[i]));
  state().launches.push_back(std::move(l));
  return 0;
}

// What the tests read.
void tjfake_reset() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().launches.clear();
}
void tjfake_set_param_count(const char* kernel, int count) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().param_counts[kernel] = count;
}
int tjfake_launch_count() { return static_cast<int>(state().launches.size()); }
const char* tjfake_launch_kernel(int i) { return state().launches.at(i).kernel.c_str(); }
unsigned tjfake_launch_grid(int i) { return state().launches.at(i).grid; }
unsigned tjfake_launch_block(int i) { return state().launches.at(i).block; }
int tjfake_launch_param_count(int i) { return static_cast<int>(state().launches.at(i).params.size()); }
unsigned long long tjfake_launch_param(int i, int j) { return state().launches.at(i).params.at(j); }
long long tjfake_allocations() { return state().allocations; }

}  // extern "C"
