// The two ways code raises towerjit::Error (declared in dsl/exception.h, the public part).
//
// A user's mistake gets `user_check(cond, loc) << ...`: the message names what failed, where
// (the user's file:line, captured by std::source_location in every DSL call), the values
// involved and the likely fix. A broken invariant of ours gets `internal_check`, whose
// message says so, so nobody hunts for a bug in their own model.
#pragma once

#include <exception>
#include <sstream>
#include <string>

#include "dsl/exception.h"

namespace towerjit {
namespace detail {

// A source path shortened to the part below this repository's root, when it is inside it.
std::string display_path(const std::string& file);

// Collects a message with operator<< and throws it when destroyed (after the full
// expression), so a check reads as one line at the call site.
class ErrorBuilder {
 public:
  ErrorBuilder(std::string prefix, std::string suffix)
      : prefix_(std::move(prefix)),
        suffix_(std::move(suffix)),
        uncaught_at_start_(std::uncaught_exceptions()) {}
  ErrorBuilder(const ErrorBuilder&) = delete;
  ~ErrorBuilder() noexcept(false);
  template <typename T>
  ErrorBuilder& operator<<(const T& value) {
    out_ << value;
    return *this;
  }

 private:
  std::string prefix_, suffix_;
  int uncaught_at_start_;
  std::ostringstream out_;
};

}  // namespace detail
}  // namespace towerjit

// Throws towerjit::Error "towerjit: <message> (<file:line>)" unless `cond` holds; `at` is the
// user's call (a std::source_location) or the node the error is about.
#define user_check(cond, at)                                                        \
  if (cond) {                                                                       \
  } else                                                                            \
    ::towerjit::detail::ErrorBuilder("towerjit: ", " (" + ::towerjit::where(at) + ")")

// Throws towerjit::Error marked as a towerjit bug unless `cond` holds.
#define internal_check(cond)                                                          \
  if (cond) {                                                                         \
  } else                                                                              \
    ::towerjit::detail::ErrorBuilder("towerjit internal error: ",                     \
                                     std::string(" [" #cond " failed at ") + __FILE__ + \
                                         ":" + std::to_string(__LINE__) +             \
                                         "; please report this]")
