#include "runtime/cuda/toolkit_library.h"

#include "jit/knobs.h"

namespace towerjit::cuda {

ToolkitLibrary open_toolkit_library(const std::vector<std::string>& files, const std::vector<std::string>& dirs) {
  if (knobs::cuda_emulated()) {  // the emulated GPU's library has cuBLAS's and NCCL's entry points too
    ToolkitLibrary l;
    l.name = l.tried = knobs::emulator_library();
    l.handle = ::dlopen(l.name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) l.name.clear();
    return l;
  }
  std::vector<std::string> names = files;
  std::vector<std::string> where;
  if (auto home = knobs::cuda_home()) where.push_back(*home + "/lib64/");
  where.insert(where.end(), dirs.begin(), dirs.end());
  for (const std::string& d : where)
    for (const std::string& f : files) names.push_back(d + f);
  ToolkitLibrary l;
  for (const std::string& name : names) {
    l.tried += (l.tried.empty() ? "" : ", ") + name;
    if ((l.handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      l.name = name;
      break;
    }
  }
  return l;
}

}  // namespace towerjit::cuda
