#include "runtime/data/whole_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace towerjit::data {

std::string read_whole_file(const std::string& path, std::source_location loc) {
  std::error_code ec;
  user_check(std::filesystem::is_regular_file(path, ec), loc)
      << "\"" << path << "\" does not exist or is not a file; check the path";
  std::ifstream in(path, std::ios::binary);
  user_check(in.good(), loc) << "cannot open \"" << path << "\"; check its permissions";
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace towerjit::data
