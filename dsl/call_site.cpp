#include "dsl/call_site.h"

#include <vector>

#include "dsl/error.h"

namespace towerjit {

CallSite::CallSite(const std::source_location& loc) : loc_(loc), stack_(capture_call_stack()) {}

bool is_system_header(const std::string& file) {
  return file.rfind("/usr/include/", 0) == 0 || file.rfind("/usr/lib/", 0) == 0 ||
         file.find("/bits/") != std::string::npos;
}

std::string CallSite::str() const {
  if (!is_system_header(loc_.file_name())) return format_location(loc_, stack_.get());
  // Made through a standard-library template: the user's frames are the truth.
  const std::vector<UserFrame> frames = user_frames(*stack_);
  if (frames.empty()) return format_location(loc_);  // no line tables: the header's line is all there is
  std::string out = detail::display_path(frames[0].file) + ":" + std::to_string(frames[0].line);
  if (frames.size() < 2) return out;
  out += " " + frames[0].function;
  for (size_t i = 1; i < frames.size(); ++i)
    out += " ← " + detail::display_path(frames[i].file) + ":" + std::to_string(frames[i].line) + " " +
           frames[i].function;
  return out;
}

std::string where(const CallSite& site) { return site.str(); }

}  // namespace towerjit
