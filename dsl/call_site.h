// Where a user's call is, for an error raised later than the call (a hook's evaluation during
// fit), and even when a forwarding template of the standard library made the call: through
// std::make_unique, std::make_shared or emplace_back, a defaulted std::source_location
// parameter names the template's line in <bits/unique_ptr.h>, not the user's. A CallSite then
// takes the first of the user's frames on the stack (dsl/call_stack.h) as the line.
#pragma once

#include <memory>
#include <source_location>
#include <string>

#include "dsl/call_stack.h"

namespace towerjit {

class CallSite {
 public:
  // Captures the stack now (cheap: return addresses); symbolised only when printed.
  explicit CallSite(const std::source_location& loc);
  // "tests/x.cpp:42", with the user's callers ("… ← main.cpp:9 main") where line tables have
  // them; the user's frame in place of a standard-library header's line.
  std::string str() const;
  const std::source_location& loc() const { return loc_; }

 private:
  std::source_location loc_;
  std::shared_ptr<const CallStack> stack_;
};

// For user_check(cond, site): the "where" of an error (dsl/exception.h has the others).
std::string where(const CallSite& site);

// Whether `file` is a header of the C++ standard library (or another system header), which
// a user's call is never in.
bool is_system_header(const std::string& file);

}  // namespace towerjit
