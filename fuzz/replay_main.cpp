// The main of the replay programs (the normal build, no libFuzzer): runs every file under the
// folders (or the files) on the command line through the target's LLVMFuzzerTestOneInput, so
// the test suite keeps the corpus and every input that once crashed passing. A finding aborts
// (the target lets anything but towerjit::Error escape), which fails the ctest entry; the last
// line printed names the input it was running.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg))
        if (entry.is_regular_file() && entry.path().filename() != "README.md") files.push_back(entry.path());
    } else if (fs::exists(arg)) {
      files.push_back(arg);
    } else if (i == 1) {  // the corpus must be there; a regressions folder may not exist yet
      std::fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());  // the same order on every machine
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs under the given paths\n");
    return 2;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, no finding\n", files.size());
  return 0;
}
