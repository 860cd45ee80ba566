#include "runtime/towers/dump_programs.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/error.h"
#include "jit/cuda/cuda_dump.h"
#include "runtime/towers/trainer_internals.h"

namespace towerjit {

std::vector<std::string> dump_cuda(const TowerTrainer& trainer, const std::string& dir, Loc loc) {
  std::error_code ec, is_dir;
  std::filesystem::create_directories(dir, ec);
  // Checked here, at the caller's line, before any program's files are written.
  user_check(std::filesystem::is_directory(dir, is_dir), loc)
      << "dump_cuda: cannot make the directory \"" << dir << "\"" << (ec ? ": " + ec.message() : std::string())
      << "; pass a writable directory";
  std::vector<std::string> paths;
  std::ostringstream summary;
  summary << trainer.towers().str() << "\n";
  for (const detail::ProgramView& p : detail::programs(trainer)) {
    const auto written = cuda::dump_cuda_of(dir, *p.graph, *p.program, p.name);
    paths.insert(paths.end(), written.begin(), written.end());
    summary << p.name << ": " << p.runs << "; " << p.program->kernels.size() << " kernels, "
            << p.program->calls.size() << " library calls\n";
  }
  const std::string path = dir + "/programs.txt";
  std::ofstream out(path);
  out << summary.str();
  user_check(out.good(), loc)
      << "dump_cuda: cannot write \"" << path << "\"; pass a writable directory";
  paths.push_back(path);
  return paths;
}

}  // namespace towerjit
