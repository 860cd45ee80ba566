// The emulator's NVRTC: the real NVRTC compiles the source as always (so the PTX, its dumps
// and its compile errors are the real ones), and the source is compiled for the host too;
// the "cubin" it returns is an image of the source (emulated_devices.h) that the emulated
// driver's cuModuleLoadData runs.
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "emulator/driver/emulated_devices.h"
#include "emulator/kernel/host_module.h"
#include "jit/knobs.h"

namespace {

using RealProgram = void*;

struct Real {
  void* handle = nullptr;
  int (*Create)(RealProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*Destroy)(RealProgram*) = nullptr;
  int (*Compile)(RealProgram, int, const char* const*) = nullptr;
  int (*PTXSize)(RealProgram, std::size_t*) = nullptr;
  int (*PTX)(RealProgram, char*) = nullptr;
  int (*LogSize)(RealProgram, std::size_t*) = nullptr;
  int (*Log)(RealProgram, char*) = nullptr;
  int (*Version)(int*, int*) = nullptr;
  const char* (*ErrorString)(int) = nullptr;
};

const Real& real() {
  static const Real r = [] {
    Real r;
    std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so"};
    if (auto home = towerjit::knobs::cuda_home()) names.push_back(*home + "/lib64/libnvrtc.so.13");
    names.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
    names.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    for (const std::string& n : names)
      if ((r.handle = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!r.handle) return r;
    auto bind = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(r.handle, name)); };
    bind(r.Create, "nvrtcCreateProgram");
    bind(r.Destroy, "nvrtcDestroyProgram");
    bind(r.Compile, "nvrtcCompileProgram");
    bind(r.PTXSize, "nvrtcGetPTXSize");
    bind(r.PTX, "nvrtcGetPTX");
    bind(r.LogSize, "nvrtcGetProgramLogSize");
    bind(r.Log, "nvrtcGetProgramLog");
    bind(r.Version, "nvrtcVersion");
    bind(r.ErrorString, "nvrtcGetErrorString");
    return r;
  }();
  return r;
}

struct Program {
  RealProgram real = nullptr;
  std::string name, source, log, ptx, image;
};

constexpr int kSuccess = 0, kCompilationFailed = 6, kInvalidInput = 3;

}  // namespace

extern "C" {

const char* nvrtcGetErrorString(int r) {
  if (r == kCompilationFailed) return "NVRTC_ERROR_COMPILATION";
  return real().ErrorString ? real().ErrorString(r) : "NVRTC_ERROR_INTERNAL_ERROR";
}

int nvrtcVersion(int* major, int* minor) {
  if (!real().Version) return 1;  // no NVRTC to run the PTX path with: the loader says so
  return real().Version(major, minor);
}

int nvrtcCreateProgram(Program** p, const char* source, const char* name, int headers, const char* const* h,
                       const char* const* names) {
  auto* program = new Program{nullptr, name ? name : "module.cu", source, "", "", ""};
  const int r = real().Create(&program->real, source, name, headers, h, names);
  if (r != kSuccess) {
    delete program;
    return r;
  }
  *p = program;
  return kSuccess;
}

int nvrtcDestroyProgram(Program** p) {
  if (!p || !*p) return kInvalidInput;
  real().Destroy(&(*p)->real);
  delete *p;
  *p = nullptr;
  return kSuccess;
}

int nvrtcCompileProgram(Program* p, int count, const char* const* options) {
  const int r = real().Compile(p->real, count, options);
  std::size_t size = 0;
  real().LogSize(p->real, &size);
  p->log.assign(size, '\0');
  if (size) real().Log(p->real, p->log.data());
  if (r != kSuccess) return r;
  real().PTXSize(p->real, &size);
  p->ptx.assign(size, '\0');
  real().PTX(p->real, p->ptx.data());
  std::string module = p->name;
  if (module.size() > 3 && module.compare(module.size() - 3, 3, ".cu") == 0) module.resize(module.size() - 3);
  try {
    towerjit::emulator::HostModule::compile(p->source, module);  // host compile errors show here
  } catch (const std::exception& e) {
    p->log += std::string("\n") + e.what() + "\n";
    return kCompilationFailed;
  }
  p->image = towerjit::emulator::make_module_image(module, p->source);
  p->image.push_back('\0');
  return kSuccess;
}

int nvrtcGetPTXSize(Program* p, std::size_t* size) {
  *size = p->ptx.size();
  return kSuccess;
}
int nvrtcGetPTX(Program* p, char* out) {
  std::memcpy(out, p->ptx.data(), p->ptx.size());
  return kSuccess;
}
int nvrtcGetCUBINSize(Program* p, std::size_t* size) {
  *size = p->image.size();
  return kSuccess;
}
int nvrtcGetCUBIN(Program* p, char* out) {
  std::memcpy(out, p->image.data(), p->image.size());
  return kSuccess;
}
int nvrtcGetProgramLogSize(Program* p, std::size_t* size) {
  *size = p->log.size() + 1;
  return kSuccess;
}
int nvrtcGetProgramLog(Program* p, char* out) {
  std::memcpy(out, p->log.c_str(), p->log.size() + 1);
  return kSuccess;
}

}  // extern "C"
