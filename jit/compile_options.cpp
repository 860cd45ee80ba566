// The process's CompileOptions, read by jit/knobs.cpp under the environment's overrides.
#include "jit/compile_options.h"

#include <mutex>

namespace towerjit {
namespace {

std::mutex options_mutex;
CompileOptions& options() {
  static CompileOptions set;
  return set;
}

}  // namespace

void set_compile_options(const CompileOptions& o) {
  std::lock_guard lock(options_mutex);
  options() = o;
}

CompileOptions compile_options() {
  std::lock_guard lock(options_mutex);
  return options();
}

}  // namespace towerjit
