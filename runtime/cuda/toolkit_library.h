// The CUDA toolkit's libraries loaded at run time (cuBLAS, NCCL), so binaries build and start
// where they are missing: the first file name dlopen can open, and symbols bound into typed
// function pointers.
#pragma once

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

namespace towerjit::cuda {

struct ToolkitLibrary {
  void* handle = nullptr;  // null: none of the names opened
  std::string name;        // the one that did
  std::string tried;       // every name tried, for the error message
};

// Tries `files` on the library path, then each under $CUDA_HOME/lib64 and under `dirs` (in
// that order), and keeps the first that opens.
ToolkitLibrary open_toolkit_library(const std::vector<std::string>& files, const std::vector<std::string>& dirs);

// Binds `fn` to `symbol` of `handle`; the first symbol missing goes to `missing`.
template <typename F>
void bind_symbol(void* handle, F& fn, const char* symbol, std::string& missing) {
  fn = reinterpret_cast<std::remove_reference_t<F>>(::dlsym(handle, symbol));
  if (!fn && missing.empty()) missing = symbol;
}

}  // namespace towerjit::cuda
