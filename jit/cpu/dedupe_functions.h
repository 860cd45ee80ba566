// Functions of an LLVM IR module that are the same but for their names, compiled once.
//
// A training step's loop kernels repeat: resnet-bn's 72 are 35 distinct bodies (the batch
// norms of equal-width layers, their backwards, the momentum updates of equal-shape weights),
// and the optimiser and code generator take time in proportion to the code they get
// (docs/cpu-jit.md, "Cold compile"). Two definitions whose text is equal once their own names
// are set aside compute the same thing, so one is kept and the other becomes an alias of it:
// no change to any kernel's code, and none at run time.
//
// Private to jit/cpu (cpu_compiler.cpp is its caller). Works on the text the emitter writes
// (jit/cpu/llvm_emitter.cpp): each definition starts at a line "define ... @name(" and ends
// at the next line "}". Anything else is left as it is.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace towerjit::cpujit {

struct DedupedModule {
  std::string text;  // the module with each duplicate's definition removed (its comments stay)
  // (duplicate, the kept function it equals), in the order the duplicates appear.
  std::vector<std::pair<std::string, std::string>> aliases;
  int functions = 0;  // definitions in the module
  int distinct = 0;   // definitions kept
};

DedupedModule dedupe_functions(const std::string& ll_text);

}  // namespace towerjit::cpujit
