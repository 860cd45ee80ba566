// NVRTC is declared here by hand (no nvrtc.h) and bound with dlopen, so this file builds on a
// machine without the CUDA toolkit and the binary starts on one without the library.
#include "jit/cuda/nvrtc_compiler.h"

#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "dsl/error.h"
#include "jit/cpu/compile_cache.h"
#include "jit/knobs.h"

namespace towerjit::cuda {
namespace {

using nvrtcProgram = struct _nvrtcProgram*;
using nvrtcResult = int;  // 0: NVRTC_SUCCESS

struct Nvrtc {
  void* handle = nullptr;
  std::string tried;  // the names dlopen was given, for the error message
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  std::string version;
};

template <typename F>
bool bind(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}

Nvrtc load() {
  Nvrtc n;
  // TOWERJIT_CUDA=emulator: the emulated GPU's NVRTC, which runs the real one and also makes
  // the module images the emulated driver loads (emulator/driver/nvrtc.cpp).
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so"};
  if (knobs::cuda_emulated()) names = {knobs::emulator_library()};
  std::vector<std::string> dirs;
  if (auto home = knobs::cuda_home()) dirs.push_back(*home + "/lib64/");
  dirs.push_back("/usr/local/cuda/lib64/");
  for (const auto& d : dirs)
    for (const char* f : {"libnvrtc.so.13", "libnvrtc.so"})
      if (!knobs::cuda_emulated()) names.push_back(d + f);
  for (const auto& name : names) {
    n.tried += (n.tried.empty() ? "" : ", ") + name;
    if ((n.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  }
  if (!n.handle) return n;
  const bool ok = bind(n.handle, "nvrtcGetErrorString", n.GetErrorString) &&
                  bind(n.handle, "nvrtcVersion", n.Version) &&
                  bind(n.handle, "nvrtcCreateProgram", n.CreateProgram) &&
                  bind(n.handle, "nvrtcDestroyProgram", n.DestroyProgram) &&
                  bind(n.handle, "nvrtcCompileProgram", n.CompileProgram) &&
                  bind(n.handle, "nvrtcGetPTXSize", n.GetPTXSize) && bind(n.handle, "nvrtcGetPTX", n.GetPTX) &&
                  bind(n.handle, "nvrtcGetCUBINSize", n.GetCUBINSize) &&
                  bind(n.handle, "nvrtcGetCUBIN", n.GetCUBIN) &&
                  bind(n.handle, "nvrtcGetProgramLogSize", n.GetProgramLogSize) &&
                  bind(n.handle, "nvrtcGetProgramLog", n.GetProgramLog);
  int major = 0, minor = 0;
  if (!ok || n.Version(&major, &minor) != 0) {
    n.tried += " (found, but it lacks the NVRTC entry points towerjit uses)";
    n.handle = nullptr;
    return n;
  }
  n.version = std::to_string(major) + "." + std::to_string(minor);
  return n;
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = load();
  return n;
}

const Nvrtc& require_nvrtc() {
  const Nvrtc& n = nvrtc();
  if (!n.handle)
    throw Error("towerjit: NVRTC not found (tried " + n.tried +
                "); CUDA compilation needs the CUDA toolkit's libnvrtc: install CUDA, or set "
                "CUDA_HOME to its directory, or add its lib64 to LD_LIBRARY_PATH");
  return n;
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The kernel named in the first "<module>.cu(LINE): error" line of the log.
std::string kernel_of_first_error(const std::string& source, const std::string& log) {
  std::smatch m;
  static const std::regex re(R"(\.cu\((\d+)\): error)");
  if (!std::regex_search(log, m, re)) return "";
  return kernel_at_line(source, std::stoi(m[1]));
}

[[noreturn]] void fail(const std::string& source, const std::string& module_name,
                       const std::string& arch, const std::string& log, const std::string& what) {
  const std::string dir = knobs::dump_dir().value_or(knobs::cache_dir());
  const std::string path = write_file(dir, module_name + ".cu", source);
  const std::string kernel = kernel_of_first_error(source, log);
  throw Error("towerjit internal error: NVRTC cannot compile CUDA module \"" + module_name + "\"" +
              (kernel.empty() ? std::string(" (preamble)") : " in kernel " + kernel) + " for " + arch +
              " (" + what + "); the source is at " + path +
              "; please report this with that file. NVRTC log:\n" + log);
}

// Cache payload: 8-byte PTX length, PTX, cubin.
std::string pack(const CudaBinary& b) {
  const uint64_t n = b.ptx.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + b.ptx + b.cubin;
}

bool unpack(const std::string& payload, CudaBinary& b) {
  uint64_t n = 0;
  if (payload.size() < 8) return false;
  std::memcpy(&n, payload.data(), 8);
  if (payload.size() < 8 + n) return false;
  b.ptx = payload.substr(8, n);
  b.cubin = payload.substr(8 + n);
  return true;
}

// A module with bf16 or f16 buffers includes the toolkit's cuda_bf16.h and cuda_fp16.h
// (cuda_emitter.cpp), which NVRTC 13 does not have built in: it needs the toolkit's include
// directory. From $CUDA_HOME/include when CUDA_HOME is set (it names the toolkit), else
// /usr/local/cuda/include; a user error naming both when the headers are not there.
std::vector<std::string> header_flags(const std::string& source, const std::string& module_name) {
  if (source.find("#include <cuda_bf16.h>") == std::string::npos) return {};
  const auto home = knobs::cuda_home();
  const std::string dir = (home ? *home : std::string("/usr/local/cuda")) + "/include";
  std::error_code ec;
  user_check(std::filesystem::exists(dir + "/cuda_bf16.h", ec) && std::filesystem::exists(dir + "/cuda_fp16.h", ec),
             std::source_location::current())
      << "CUDA module \"" << module_name << "\" holds bf16 or f16 tensors and needs the CUDA toolkit's headers "
      << "cuda_bf16.h and cuda_fp16.h, which are not in " << dir
      << (home ? " (CUDA_HOME=" + *home + ")" : std::string(" (CUDA_HOME is not set)"))
      << "; install the CUDA toolkit's headers there, point CUDA_HOME at the toolkit, or keep the model in f32 on a GPU";
  return {"--include-path=" + dir};
}

void run_nvrtc(const std::string& source, const std::string& module_name, const std::vector<std::string>& extra,
               CudaBinary& b) {
  const Nvrtc& n = require_nvrtc();
  nvrtcProgram prog = nullptr;
  const std::string file = module_name + ".cu";
  if (n.CreateProgram(&prog, source.c_str(), file.c_str(), 0, nullptr, nullptr) != 0)
    fail(source, module_name, b.arch, "", "nvrtcCreateProgram failed");
  std::vector<std::string> opts = {"--gpu-architecture=" + b.arch};
  for (const auto& f : nvrtc_flags()) opts.push_back(f);
  for (const auto& f : extra) opts.push_back(f);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult r = n.CompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t size = 0;
  n.GetProgramLogSize(prog, &size);
  b.log.assign(size, '\0');
  if (size) n.GetProgramLog(prog, b.log.data());
  while (!b.log.empty() && b.log.back() == '\0') b.log.pop_back();
  if (r != 0) {
    const std::string what = n.GetErrorString(r);
    n.DestroyProgram(&prog);
    fail(source, module_name, b.arch, b.log, what);
  }
  n.GetPTXSize(prog, &size);
  b.ptx.assign(size, '\0');
  n.GetPTX(prog, b.ptx.data());
  while (!b.ptx.empty() && b.ptx.back() == '\0') b.ptx.pop_back();
  n.GetCUBINSize(prog, &size);
  b.cubin.assign(size, '\0');
  n.GetCUBIN(prog, b.cubin.data());
  n.DestroyProgram(&prog);
}

}  // namespace

bool nvrtc_available() { return nvrtc().handle != nullptr; }

std::string nvrtc_version() { return require_nvrtc().version; }

std::string resolve_arch(const std::string& explicit_arch, const std::optional<std::string>& device_arch) {
  std::string a = !explicit_arch.empty() ? explicit_arch
                  : knobs::cuda_arch()    ? *knobs::cuda_arch()
                  : device_arch           ? *device_arch
                                          : "sm_90";
  const std::string given = a;
  for (const char* prefix : {"sm_", "compute_"})
    if (a.rfind(prefix, 0) == 0) a = a.substr(std::strlen(prefix));
  const bool digits = !a.empty() && a.size() <= 4 &&
                      a.find_first_not_of("0123456789") == std::string::npos;
  const bool suffix = a.size() >= 3 && (a.back() == 'a' || a.back() == 'f') &&
                      a.substr(0, a.size() - 1).find_first_not_of("0123456789") == std::string::npos;
  if (!digits && !suffix)
    throw Error("towerjit: CUDA architecture \"" + given +
                "\" is not of the form sm_NN (from --arch or TOWERJIT_CUDA_ARCH); use e.g. sm_80 or sm_90");
  return "sm_" + a;
}

const std::vector<std::string>& nvrtc_flags() {
  static const std::vector<std::string> flags = {"-std=c++17", "-lineinfo"};
  return flags;
}

CudaBinary compile_cuda(const std::string& source, const std::string& module_name, const std::string& arch) {
  if (auto dump = knobs::dump_dir()) write_file(*dump, module_name + ".cu", source);
  CudaBinary b = compile_cuda_undumped(source, module_name, arch);
  if (auto dump = knobs::dump_dir()) write_file(*dump, module_name + ".ptx", b.ptx);
  return b;
}

CudaBinary compile_cuda_undumped(const std::string& source, const std::string& module_name, const std::string& arch) {
  const auto start = std::chrono::steady_clock::now();
  CudaBinary b;
  b.arch = resolve_arch(arch);
  const std::vector<std::string> extra = header_flags(source, module_name);
  const std::string version = nvrtc_version();  // throws when NVRTC is missing
  std::string flags;
  for (const auto& f : nvrtc_flags()) flags += f + " ";
  for (const auto& f : extra) flags += f + " ";
  auto cache = cpujit::CompileCache::from_knobs();
  // The emulated GPU's "cubin" is its own image, never to be loaded by a real driver.
  const std::string key = cpujit::make_cache_key(
      {knobs::cuda_emulated() ? "cuda-emulated" : "cuda", source, b.arch, version, flags});
  if (cache) {
    auto hit = cache->load(key);
    b.cache_hit = hit.status == cpujit::CompileCache::Status::hit && unpack(hit.payload, b);
  }
  if (!b.cache_hit) {
    run_nvrtc(source, module_name, extra, b);
    if (cache) cache->store(key, pack(b));
  }
  b.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return b;
}

std::string kernel_at_line(const std::string& source, int line) {
  std::istringstream in(source);
  std::string text, current;
  static const std::regex head(R"(__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\()");
  int depth = 0;
  for (int n = 1; std::getline(in, text) && n <= line; ++n) {
    std::smatch m;
    if (depth == 0 && std::regex_search(text, m, head)) current = m[1];
    for (char c : text) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (depth == 0 && n < line && text.find('}') != std::string::npos) current.clear();
  }
  return current;
}

}  // namespace towerjit::cuda
