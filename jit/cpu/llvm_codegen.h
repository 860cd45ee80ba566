// LLVM IR text -> optimised host object file: the part of the CPU compiler that knows about
// LLVM's optimiser and code generator, and nothing about caches or loading.
//
// Private to jit/cpu (cpu_compiler.cpp is its one caller); no LLVM types in this header.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace towerjit::cpujit {

// How modules are optimised and generated; part of the cache key, so change the string
// whenever the settings below it in llvm_codegen.cpp change.
inline constexpr std::string_view kCodegenFlags =
    "opt=default<O3>+loop-vectorize+slp;codegen=Aggressive;reloc=pic;code-model=small;split";

// Initialises LLVM's native target, asm printer and asm parser; idempotent, thread-safe.
void initialize_native_target();

// Triple, CPU name and sorted feature list of what the kernels are compiled for: this machine,
// e.g. "x86_64-pc-linux-gnu;cpu=znver3;features=+adx,+aes,+avx,+avx2,...", or the generic CPU
// of the level TOWERJIT_CPU_ISA caps it to ("...;cpu=x86-64-v3;features=").
std::string target_description();

// LLVM's version, e.g. "19.1.7".
std::string llvm_version();

struct ObjectCode {
  std::vector<std::string> objects;  // ELF object files, together defining the module, when error is empty
  std::string error;                 // "<stage>: <LLVM's message>" when compilation failed
};

// Parses and verifies `ll_text`, sets the host triple and data layout (overriding any in the
// text), runs default<O3> for the target CPU (target_description()) and emits object files:
// the module split (llvm::SplitModule) into up to `threads` parts of whole functions, each
// optimised and generated on a thread of its own, so a program of many kernels compiles in a
// fraction of the time (kernels call no one but the host's helpers, so nothing inlines across
// parts). Thread-safe: each part has its own LLVMContext and TargetMachine.
ObjectCode compile_ir_to_objects(const std::string& ll_text, const std::string& module_name, int threads);

}  // namespace towerjit::cpujit
