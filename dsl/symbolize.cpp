#include "dsl/symbolize.h"

#include <link.h>
#include <unistd.h>

#include <llvm/DebugInfo/Symbolize/Symbolize.h>
#include <llvm/Support/Error.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace towerjit::detail {

namespace {

struct Module {
  std::string path;
  uintptr_t offset = 0;  // the address's offset in the object (its load bias removed)
  bool found = false;
};

// The loaded object holding `address`: the program itself has an empty name in the loader's
// list, so it is read back from /proc/self/exe.
Module module_of(uintptr_t address) {
  Module m;
  auto visit = [](dl_phdr_info* info, size_t, void* data) -> int {
    auto* m = static_cast<Module*>(data);
    const uintptr_t address = m->offset;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& ph = info->dlpi_phdr[i];
      if (ph.p_type != PT_LOAD) continue;
      const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
      if (address < begin || address >= begin + ph.p_memsz) continue;
      m->path = info->dlpi_name ? info->dlpi_name : "";
      m->offset = address - info->dlpi_addr;
      m->found = true;
      return 1;
    }
    return 0;
  };
  m.offset = address;
  dl_iterate_phdr(visit, &m);
  if (m.found && m.path.empty()) {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    m.path = n > 0 ? std::string(buf, n) : "/proc/self/exe";
  }
  return m;
}

std::vector<SourceFrame> lookup(llvm::symbolize::LLVMSymbolizer& symbolizer, const void* return_address) {
  // The return address is the instruction after the call; one byte back is inside the call,
  // whose line is the caller's.
  const Module m = module_of(reinterpret_cast<uintptr_t>(return_address) - 1);
  if (!m.found) return {};
  auto info = symbolizer.symbolizeInlinedCode(
      m.path, {m.offset, llvm::object::SectionedAddress::UndefSection});
  if (!info) {
    llvm::consumeError(info.takeError());
    return {{.object = m.path}};
  }
  std::vector<SourceFrame> frames;
  for (uint32_t i = 0; i < info->getNumberOfFrames(); ++i) {
    const llvm::DILineInfo& f = info->getFrame(i);
    const bool has_file = f.FileName != llvm::DILineInfo::BadString && f.Line != 0;
    const bool has_function = f.FunctionName != llvm::DILineInfo::BadString;
    frames.push_back({.object = m.path,
                      .file = has_file ? f.FileName : "",
                      .line = static_cast<int>(f.Line),
                      .function_line = static_cast<int>(f.StartLine),
                      .function = has_function ? f.FunctionName : ""});
  }
  if (frames.empty()) frames.push_back({.object = m.path});
  return frames;
}

}  // namespace

std::string object_of(const void* return_address) {
  // Cached as symbolize() is: a dump prints the same few hundred addresses for every node.
  static std::mutex mutex;
  static std::map<const void*, std::string> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(return_address);
  if (it == cache.end()) {
    const Module m = module_of(reinterpret_cast<uintptr_t>(return_address) - 1);
    it = cache.emplace(return_address, m.found ? m.path : "").first;
  }
  return it->second;
}

const std::vector<SourceFrame>& symbolize(const void* return_address) {
  static std::mutex mutex;
  static llvm::symbolize::LLVMSymbolizer* symbolizer = [] {
    llvm::symbolize::LLVMSymbolizer::Options options;
    options.Demangle = true;
    options.PrintFunctions = llvm::symbolize::FunctionNameKind::LinkageName;
    return new llvm::symbolize::LLVMSymbolizer(options);  // lives as long as the process
  }();
  static std::map<const void*, std::vector<SourceFrame>> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(return_address);
  if (it == cache.end()) it = cache.emplace(return_address, lookup(*symbolizer, return_address)).first;
  return it->second;
}

}  // namespace towerjit::detail
