#include "dsl/error.h"

namespace towerjit {

std::string format_location(const std::source_location& loc) {
  return detail::display_path(loc.file_name()) + ":" + std::to_string(loc.line());
}

namespace detail {

std::string display_path(const std::string& file) {
#ifdef TOWERJIT_SOURCE_ROOT
  // Paths inside this repository read better relative to its root.
  const std::string root = TOWERJIT_SOURCE_ROOT "/";
  if (file.rfind(root, 0) == 0) return file.substr(root.size());
#endif
  return file;
}

ErrorBuilder::~ErrorBuilder() noexcept(false) {
  // Never throw while another exception is unwinding the stack.
  if (std::uncaught_exceptions() > uncaught_at_start_) return;
  throw Error(prefix_ + out_.str() + suffix_);
}

}  // namespace detail
std::string count_of(long long n, const std::string& noun, const std::string& plural) {
  return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

}  // namespace towerjit
