#include "emulator/kernel/host_module.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "emulator/kernel/emulator_sources.h"
#include "jit/cpu/compile_cache.h"

namespace towerjit::emulator {
namespace {

namespace fs = std::filesystem;

// g++'s flags for a module; part of the cache key. -O1 keeps compiles short (a training step's
// module is tens of kernels); -ffp-contract=off: the emulator keeps each operation's rounding,
// as NVRTC's --fmad=false would, so its results are the interpreter's within the error bounds.
constexpr const char* kHostFlags = "-std=c++17 -O1 -fPIC -shared -w -ffp-contract=off -fno-strict-aliasing";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw Fault("emulated GPU: cannot write " + p.string());
}

// A fresh directory for one compile, removed on exit.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "towerjit-emulator-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw Fault("emulated GPU: cannot create a temporary directory");
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string compiler_version() {
  static const std::string version = [] {
    std::string out;
    if (FILE* p = ::popen("g++ --version 2>/dev/null", "r")) {
      char line[256];
      if (std::fgets(line, sizeof line, p)) out = line;
      ::pclose(p);
    }
    return out;
  }();
  return version;
}

// The parameters' types of a kernel's parameter list: each parameter less its name.
std::vector<std::string> parameter_types(const std::string& list, const std::string& kernel) {
  std::vector<std::string> types;
  int depth = 0;
  std::string current;
  auto flush = [&] {
    static const std::regex named(R"(^\s*(.*?[\s\*&])\s*([A-Za-z_]\w*)\s*$)");
    std::smatch m;
    if (current.find_first_not_of(" \t\n") == std::string::npos) return;
    if (!std::regex_match(current, m, named))
      throw Fault("emulated GPU: kernel " + kernel + ": cannot read parameter \"" + current + "\"");
    std::string type = m[1];
    type.erase(type.find_last_not_of(" \t\n") + 1);
    types.push_back(type);
    current.clear();
  };
  for (char c : list) {
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c == ',' && depth == 0) flush();
    else current += c;
  }
  flush();
  return types;
}

}  // namespace

HostSource prepare_host_source(const std::string& cuda_source) {
  HostSource out;
  std::string text = cuda_source;
  // extern __shared__ T name[];  ->  T* name = tj_emu::dynamic_shared<T>();
  static const std::regex dynamic_shared(R"(extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([A-Za-z_][\w:]*)\s+(\w+)\s*\[\s*\]\s*;)");
  text = std::regex_replace(text, dynamic_shared, "$1* $2 = tj_emu::dynamic_shared<$1>();");
  // __shared__ T name[N]...;  ->  T (&name)[N]... = tj_emu::shared<T[N]...>(__LINE__);
  static const std::regex static_shared(R"(__shared__\s+(?:__align__\(\d+\)\s+)?([A-Za-z_][\w:]*)\s+(\w+)\s*((?:\[[^\]\n]+\])+)\s*;)");
  text = std::regex_replace(text, static_shared, "$1 (&$2)$3 = tj_emu::shared<$1$3>(__LINE__);");
  // reinterpret_cast<const float4*>(  ->  tj_emu::vector_cast<const float4*>(__LINE__, (and the
  // 8-byte quads of bf16 / f16 elements, tj_bf16x4 and tj_f16x4)
  static const std::regex vector_cast(
      R"(reinterpret_cast\s*<\s*((?:const\s+)?(?:float[24]|tj_bf16x4|tj_f16x4)\s*\*)\s*>\s*\()");
  text = std::regex_replace(text, vector_cast, "tj_emu::vector_cast<$1>(__LINE__, ");

  // Every kernel gets an entry taking the driver's parameter array.
  static const std::regex kernel(R"(extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*\()");
  std::string entries = "\n// Launch entries (the emulator's pre-pass).\n";
  for (std::sregex_iterator it(text.begin(), text.end(), kernel), end; it != end; ++it) {
    const std::string name = (*it)[1];
    std::size_t open = static_cast<std::size_t>(it->position(0) + it->length(0)), close = open;
    for (int depth = 1; close < text.size() && depth > 0; ++close) depth += text[close] == '(' ? 1 : text[close] == ')' ? -1 : 0;
    const std::vector<std::string> types = parameter_types(text.substr(open, close - 1 - open), name);
    entries += "extern \"C\" void " + name + "__tj_entry(void** p) { " + name + "(";
    for (std::size_t i = 0; i < types.size(); ++i)
      entries += (i ? ", " : "") + std::string("*(") + types[i] + "*)p[" + std::to_string(i) + "]";
    entries += "); }\n";
    // The parameters' sizes and which are pointers, for the driver to copy and check them.
    entries += "extern \"C\" const int " + name + "__tj_params[] = {" + std::to_string(types.size());
    for (const std::string& t : types)
      entries += ", (int)sizeof(" + t + "), " + (t.find('*') != std::string::npos ? "1" : "0");
    entries += "};\n";
    out.kernels.push_back(name);
  }
  out.text = text + entries;
  return out;
}

std::shared_ptr<HostModule> HostModule::compile(const std::string& cuda_source, const std::string& name) {
  const HostSource source = prepare_host_source(cuda_source);
  std::shared_ptr<HostModule> module(new HostModule());
  module->name_ = name;
  module->kernels_ = source.kernels;

  const std::string key = cpujit::make_cache_key(
      {source.text, kCudaHostHeader, kCudaHostApiHeader, kCudaHostHalfHeader, compiler_version(), kHostFlags, "emulator-host-module"});
  // A module already loaded in this process is shared (NVRTC's stand-in compiles a module to
  // report errors, the driver's cuModuleLoadData loads it again).
  static std::mutex loaded_mutex;
  static std::map<std::string, std::weak_ptr<HostModule>> loaded;
  std::lock_guard loaded_lock(loaded_mutex);
  if (auto same = loaded[key].lock()) return same;
  auto cache = cpujit::CompileCache::from_knobs();
  std::string object;
  if (cache) {
    auto hit = cache->load(key);
    if (hit.status == cpujit::CompileCache::Status::hit) object = std::move(hit.payload), module->from_cache_ = true;
  }
  ScratchDir dir;
  const fs::path so = dir.path / "module.so";
  if (object.empty()) {
    write_file(dir.path / "cuda_host.h", kCudaHostHeader);
    write_file(dir.path / "cuda_host_api.h", kCudaHostApiHeader);
    write_file(dir.path / "cuda_host_half.h", kCudaHostHalfHeader);
    write_file(dir.path / "module.cpp", source.text);
    const std::string command = std::string("g++ ") + kHostFlags + " -include '" + (dir.path / "cuda_host.h").string() +
                                "' -x c++ '" + (dir.path / "module.cpp").string() + "' -o '" + so.string() + "' 2>'" +
                                (dir.path / "errors.txt").string() + "'";
    const int status = std::system(command.c_str());
    if (status != 0 || !fs::exists(so))
      throw Fault("emulated GPU: module " + name + " does not compile for the host (g++ " + kHostFlags +
                  "):\n" + read_file(dir.path / "errors.txt"));
    object = read_file(so);
    if (cache) cache->store(key, object);
  } else {
    write_file(so, object);
  }
  module->handle_ = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!module->handle_) throw Fault("emulated GPU: module " + name + ": cannot load: " + ::dlerror());
  auto** api = static_cast<TjEmuApi**>(::dlsym(module->handle_, "tj_emu_api"));
  if (!api) throw Fault("emulated GPU: module " + name + " has no tj_emu_api table");
  *api = emulator_api();
  for (const std::string& k : module->kernels_) {
    Kernel& kernel = module->entries_[k];
    kernel.entry = reinterpret_cast<KernelEntry>(::dlsym(module->handle_, (k + "__tj_entry").c_str()));
    const auto* params = static_cast<const int*>(::dlsym(module->handle_, (k + "__tj_params").c_str()));
    if (!kernel.entry || !params) throw Fault("emulated GPU: module " + name + " lacks the entry of kernel " + k);
    for (int i = 0; i < params[0]; ++i) kernel.params.push_back({params[1 + 2 * i], params[2 + 2 * i] != 0});
  }
  loaded[key] = module;
  return module;
}

HostModule::~HostModule() {
  if (handle_) ::dlclose(handle_);
}

const HostModule::Kernel* HostModule::kernel(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

KernelEntry HostModule::entry(const std::string& name) const {
  const Kernel* k = kernel(name);
  return k ? k->entry : nullptr;
}

}  // namespace towerjit::emulator
