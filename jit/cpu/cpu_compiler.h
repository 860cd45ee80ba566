// The CPU compiler: LLVM IR text -> native code in this process, through an on-disk cache.
//
//   auto module = cpujit::compile(ll_text, "step_fwd_3");
//   auto* fn = reinterpret_cast<void (*)(float*, long)>(module->lookup("kernel_0"));
//
// The IR is optimised with default<O3> for this machine's real CPU (AVX2/FMA where present),
// emitted as an object file, cached, and linked by one process-wide ORC LLJIT into a fresh
// JITDylib per module, so modules may define the same symbol names. Undefined symbols resolve,
// in order, to symbols registered with define_host_symbol and to the process's own dynamic
// symbols (libm, OpenBLAS's cblas_*, anything exported by a loaded shared library).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace towerjit::cpujit {

// Native code for one compiled module; its symbols stay valid while it lives.
class CompiledModule {
 public:
  struct JitHandle;  // the module's JITDylib; removed (code freed) on destruction

  CompiledModule(std::string name, std::unordered_map<std::string, void*> symbols,
                 std::unique_ptr<JitHandle> handle);
  ~CompiledModule();
  CompiledModule(const CompiledModule&) = delete;
  CompiledModule& operator=(const CompiledModule&) = delete;

  // Address of a function or global the module defines (external linkage, any visibility).
  // Throws towerjit::Error naming the module and the symbols it has when `symbol` is missing.
  void* lookup(const std::string& symbol) const;

  const std::string& name() const { return name_; }
  // The module's defined symbols, sorted.
  std::vector<std::string> symbols() const;

 private:
  std::string name_;
  std::unordered_map<std::string, void*> symbols_;
  std::unique_ptr<JitHandle> handle_;
};

struct CompileStats {
  bool cache_hit = false;      // object came from the on-disk cache (no optimise/codegen)
  bool cache_damaged = false;  // a damaged cache entry was found and rebuilt
  bool shared = false;         // the same module, compiled earlier in this process and alive, was reused
  double compile_ms = 0;       // wall time of compile(): cache + optimise + codegen + link
};

// Compiles and links `ll_text`, split over this thread's cores (llvm_codegen.h), or returns the
// module already compiled from the same text in this process while it lives (the towers'
// copies of one program share their code). `module_name` names the module in errors and dumps (one
// file-name-safe word is best, e.g. "step_fwd_3"). With TOWERJIT_DUMP set the text is
// written to <dump>/<module_name>.ll. IR that fails to parse, verify or link is a towerjit
// bug: throws towerjit::Error naming the module, the dumped .ll path and LLVM's message.
// Thread-safe.
std::shared_ptr<CompiledModule> compile(const std::string& ll_text, const std::string& module_name,
                                        CompileStats* stats = nullptr);

// Triple + CPU name + CPU features of the target the kernels are compiled for (this machine,
// or the generic CPU of the level TOWERJIT_CPU_ISA caps it to); part of the cache key.
std::string target_description();

// Makes `name` resolve to `address` in every module compiled afterwards (runtime helpers
// that live in a static library or an executable not built with -rdynamic, which the
// process's dynamic symbol table would not show). Registering the same name twice with the
// same address is fine; with a different address it throws towerjit::Error.
void define_host_symbol(const std::string& name, void* address);

}  // namespace towerjit::cpujit
