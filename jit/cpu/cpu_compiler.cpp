#include "jit/cpu/cpu_compiler.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sched.h>
#include <set>
#include <utility>

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectFileInterface.h>
#include <llvm/Support/MemoryBuffer.h>

#include "dsl/error.h"
#include "jit/cpu/compile_cache.h"
#include "jit/cpu/dedupe_functions.h"
#include "jit/cpu/llvm_codegen.h"
#include "jit/knobs.h"

namespace towerjit::cpujit {
namespace {

namespace orc = llvm::orc;
namespace fs = std::filesystem;

// One LLJIT for the process: its ExecutionSession is thread-safe, but we hold `mutex` around
// creating, filling and removing JITDylibs so one module's link never interleaves with
// another's teardown. Optimisation and codegen (the slow part) run outside it, in parallel.
struct JitSession {
  std::unique_ptr<orc::LLJIT> jit;
  std::mutex mutex;
  std::uint64_t next_id = 0;                         // guarded by mutex
  std::unordered_map<std::string, void*> host_symbols;  // guarded by mutex
  // ORC reports some link errors (e.g. "Symbols not found: [ foo ]") only to the session's
  // error reporter, returning a vaguer "Failed to materialize" to the caller; we collect
  // them here so the thrown message names the missing symbol.
  std::mutex reported_mutex;
  std::string reported;  // guarded by reported_mutex

  std::string take_reported() {
    std::lock_guard lock(reported_mutex);
    return std::exchange(reported, {});
  }
};

// Where undefined symbols of every module resolve after its own JITDylib: symbols from
// define_host_symbol, then the process's dynamic symbol table. LLJIT's default does the
// same; we spell it out so the lookup rule is visible here rather than implied.
llvm::Expected<orc::JITDylibSP> make_process_symbols_dylib(orc::LLJIT& jit) {
  auto& dylib = jit.getExecutionSession().createBareJITDylib("<process>");
  auto generator = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      jit.getDataLayout().getGlobalPrefix());
  if (!generator) return generator.takeError();
  dylib.addGenerator(std::move(*generator));
  return &dylib;
}

std::shared_ptr<JitSession> session() {
  static std::shared_ptr<JitSession> instance = [] {
    initialize_native_target();
    auto s = std::make_shared<JitSession>();
    auto jtmb = orc::JITTargetMachineBuilder::detectHost();
    internal_check(static_cast<bool>(jtmb)) << "cannot describe the host CPU to LLVM: "
                                            << llvm::toString(jtmb.takeError());
    auto jit = orc::LLJITBuilder()
                   .setJITTargetMachineBuilder(std::move(*jtmb))
                   .setProcessSymbolsJITDylibSetup(make_process_symbols_dylib)
                   .create();
    internal_check(static_cast<bool>(jit)) << "cannot create the ORC LLJIT: "
                                           << llvm::toString(jit.takeError());
    s->jit = std::move(*jit);
    JitSession* raw = s.get();  // the session outlives its ExecutionSession's reporter
    s->jit->getExecutionSession().setErrorReporter([raw](llvm::Error err) {
      std::string message = llvm::toString(std::move(err));
      std::lock_guard lock(raw->reported_mutex);
      raw->reported += (raw->reported.empty() ? "" : "; ") + message;
    });
    return s;
  }();
  return instance;
}

// File-name-safe and JITDylib-name-safe form of a module name.
std::string safe_name(const std::string& name) {
  std::string out = name.empty() ? "module" : name;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      c = '_';
  return out;
}

// Writes the IR to <dir>/<module>.ll and returns the path (or a note that it could not).
std::string write_ll(const std::string& dir, const std::string& ll_text,
                     const std::string& module_name) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::path path = fs::path(dir) / (safe_name(module_name) + ".ll");
  std::ofstream out(path, std::ios::binary);
  out << ll_text;
  out.close();
  if (!out) return path.string() + " (could not be written)";
  return path.string();
}

// On failure the IR goes to TOWERJIT_DUMP when set, else next to the cache, so the message
// can always point at a file to open.
[[noreturn]] void fail(const std::string& what, const std::string& ll_text,
                       const std::string& module_name, const std::string& llvm_message) {
  std::string dir = knobs::dump_dir().value_or(knobs::cache_dir());
  std::string path = write_ll(dir, ll_text, module_name);
  internal_check(false) << what << " CPU kernel module \"" << module_name << "\" (IR dumped to "
                        << path << "): " << llvm_message;
  std::abort();  // unreachable: internal_check(false) always throws
}

// A compile that cannot store its result stays correct, only slower: a warning, once per
// directory and process. It says why when the reason is on the path itself: the directory, or a
// folder above it, is a file (TOWERJIT_CACHE_DIR pointed at one).
void warn_once_cache_unwritable(const std::string& dir) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(dir).second) return;
  }
  std::string why;
  std::error_code ec;
  for (std::filesystem::path p = dir; !p.empty() && p != p.parent_path(); p = p.parent_path())
    if (std::filesystem::exists(p, ec)) {
      if (!std::filesystem::is_directory(p, ec)) why = " (" + p.string() + " is a file, not a directory)";
      break;
    }
  std::fprintf(stderr,
               "towerjit: warning: cannot write the compile cache in %s%s; kernels will be "
               "recompiled each run (set TOWERJIT_CACHE_DIR to a writable directory, or "
               "TOWERJIT_CACHE=off to silence this)\n",
               dir.c_str(), why.c_str());
}

}  // namespace

struct CompiledModule::JitHandle {
  std::shared_ptr<JitSession> session;
  orc::JITDylib* dylib = nullptr;

  ~JitHandle() {
    if (dylib == nullptr) return;
    std::lock_guard lock(session->mutex);
    // Frees the module's code and symbols; an error here has no one to report to.
    llvm::consumeError(session->jit->getExecutionSession().removeJITDylib(*dylib));
  }
};

namespace {

using SymbolTable = std::unordered_map<std::string, void*>;

// Adds the module's objects to a fresh JITDylib and links them at once (looking up every
// symbol they define), so unresolved externals surface here, in compile(), with the module's
// name, and lookup() afterwards is a plain map read.
llvm::Expected<SymbolTable> link_objects(JitSession& s, CompiledModule::JitHandle& handle,
                                         const std::vector<std::string>& objects,
                                         const std::string& module_name) {
  auto& es = s.jit->getExecutionSession();
  auto dylib = s.jit->createJITDylib(safe_name(module_name) + "#" + std::to_string(s.next_id++));
  if (!dylib) return dylib.takeError();
  handle.dylib = &*dylib;

  orc::SymbolLookupSet wanted;
  for (const std::string& object : objects) {
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, module_name);
    auto interface = orc::getObjectFileInterface(es, buffer->getMemBufferRef());
    if (!interface) return interface.takeError();
    if (auto err = s.jit->addObjectFile(*dylib, std::move(buffer))) return err;
    for (const auto& [name, flags] : interface->SymbolFlags)
      if (name != interface->InitSymbol) wanted.add(name);
  }
  auto found = es.lookup(
      orc::makeJITDylibSearchOrder(&*dylib, orc::JITDylibLookupFlags::MatchAllSymbols),
      wanted);
  if (!found) return found.takeError();
  SymbolTable table;
  for (const auto& [name, symbol] : *found)
    table.emplace((*name).str(), symbol.getAddress().toPtr<void*>());
  return table;
}

std::shared_ptr<CompiledModule> load(const std::vector<std::string>& objects, const DedupedModule& deduped,
                                     const std::string& module_name) {
  const std::string& ll_text = deduped.text;
  auto s = session();
  auto handle = std::make_unique<CompiledModule::JitHandle>();
  handle->session = s;
  std::unique_lock lock(s->mutex);
  s->take_reported();  // drop anything left over from an unrelated failure
  auto table = link_objects(*s, *handle, objects, module_name);
  std::string reported = s->take_reported();
  lock.unlock();
  if (!table) {  // handle's destructor removes the half-linked JITDylib
    std::string message = llvm::toString(table.takeError());
    if (!reported.empty()) message = reported + " (" + message + ")";
    fail("cannot link", ll_text, module_name, message);
  }
  // A duplicate's name finds the code of the function it equals.
  for (const auto& [duplicate, original] : deduped.aliases)
    if (auto it = table->find(original); it != table->end()) (*table)[duplicate] = it->second;
  return std::make_shared<CompiledModule>(module_name, std::move(*table), std::move(handle));
}

}  // namespace

CompiledModule::CompiledModule(std::string name, SymbolTable symbols,
                               std::unique_ptr<JitHandle> handle)
    : name_(std::move(name)), symbols_(std::move(symbols)), handle_(std::move(handle)) {}

CompiledModule::~CompiledModule() = default;

std::vector<std::string> CompiledModule::symbols() const {
  std::vector<std::string> names;
  for (const auto& entry : symbols_) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

void* CompiledModule::lookup(const std::string& symbol) const {
  auto it = symbols_.find(symbol);
  if (it != symbols_.end()) return it->second;
  std::string known;
  for (const auto& name : symbols()) known += (known.empty() ? "" : ", ") + name;
  internal_check(it != symbols_.end())
      << "CPU kernel module \"" << name_ << "\" defines no symbol \"" << symbol
      << "\"; it defines: " << (known.empty() ? "(nothing)" : known)
      << ". Only functions with external linkage are visible.";
  return nullptr;
}

namespace {

// The cores this thread may run on: the compile's threads inherit them.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// Modules alive in this process by cache key: towers compiling one program share its code.
std::mutex alive_mutex;
std::unordered_map<std::string, std::weak_ptr<CompiledModule>> alive;

}  // namespace

std::shared_ptr<CompiledModule> compile(const std::string& ll_text, const std::string& module_name,
                                        CompileStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  CompileStats local;
  if (auto dump = knobs::dump_dir()) write_ll(*dump, ll_text, module_name);
  auto finish = [&](std::shared_ptr<CompiledModule> module) {
    local.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (stats) *stats = local;
    return module;
  };
  // Functions equal but for their names are compiled once (dedupe_functions.h); the kept text
  // names the duplicates, so it alone keys the cache.
  const DedupedModule deduped = dedupe_functions(ll_text);
  const std::string key = make_cache_key({deduped.text, target_description(), llvm_version(), kCodegenFlags});
  {
    std::lock_guard lock(alive_mutex);
    if (auto it = alive.find(key); it != alive.end())
      if (auto module = it->second.lock()) {
        local.shared = true;
        return finish(module);
      }
  }
  auto cache = CompileCache::from_knobs();
  std::vector<std::string> objects;
  if (cache) {
    auto hit = cache->load(key);
    local.cache_damaged = hit.status == CompileCache::Status::damaged;
    if (hit.status == CompileCache::Status::hit) objects = unpack_objects(hit.payload);
    local.cache_hit = !objects.empty();
  }
  if (!local.cache_hit) {
    ObjectCode code = compile_ir_to_objects(deduped.text, module_name, usable_cores());
    if (!code.error.empty()) fail("cannot compile", deduped.text, module_name, code.error);
    objects = std::move(code.objects);
    if (cache && !cache->store(key, pack_objects(objects))) warn_once_cache_unwritable(cache->dir());
  }
  auto module = load(objects, deduped, module_name);
  {
    std::lock_guard lock(alive_mutex);
    std::erase_if(alive, [](const auto& entry) { return entry.second.expired(); });
    alive[key] = module;
  }
  return finish(module);
}

void define_host_symbol(const std::string& name, void* address) {
  auto s = session();
  std::lock_guard lock(s->mutex);
  auto [it, inserted] = s->host_symbols.emplace(name, address);
  if (!inserted) {
    internal_check(it->second == address)
        << "host symbol \"" << name << "\" registered twice with different addresses";
    return;
  }
  auto& es = s->jit->getExecutionSession();
  orc::SymbolMap symbols;
  symbols[es.intern(name)] = {orc::ExecutorAddr::fromPtr(address),
                              llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  auto err = s->jit->getProcessSymbolsJITDylib()->define(orc::absoluteSymbols(std::move(symbols)));
  if (err) {
    s->host_symbols.erase(name);
    internal_check(false) << "cannot define host symbol \"" << name
                          << "\" (was it already resolved from the process by an earlier "
                             "module?): "
                          << llvm::toString(std::move(err));
  }
}

}  // namespace towerjit::cpujit
