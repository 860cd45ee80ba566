// Return address -> source frames, from the line tables of the object that holds it (LLVM's
// DWARF reader). Internal to dsl/call_stack.cpp.
#pragma once

#include <string>
#include <vector>

namespace towerjit::detail {

struct SourceFrame {
  std::string object;    // the executable or shared library holding the code
  std::string file;      // empty where the object has no line tables
  int line = 0;
  int function_line = 0;
  std::string function;  // demangled, parameters included
};

// The frames at `return_address`, innermost (inlined) first; cached, thread-safe.
const std::vector<SourceFrame>& symbolize(const void* return_address);

// The path of the loaded object holding `return_address`'s call, without reading its line
// tables (the loader's list, cached), "" where none holds it.
std::string object_of(const void* return_address);

}  // namespace towerjit::detail
