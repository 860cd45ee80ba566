// The one exception type of towerjit, and the two ways code raises it.
//
// A user's mistake gets `user_check(cond, loc) << ...`: the message names what failed, where
// (the user's file:line, captured by std::source_location in every DSL call), the values
// involved and the likely fix. A broken invariant of ours gets `internal_check`, whose
// message says so, so nobody hunts for a bug in their own model.
#pragma once

#include <exception>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace towerjit {

// One that nothing catches ends the program as an uncaught exception ends a Python one: its
// message on stderr and exit status exit_code(), not std::terminate's abort and core dump
// (dsl/uncaught_errors.cpp; a program's own std::set_terminate handler takes precedence).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  // The status a program stopped by this error exits with (1; 130 or 143 after a signal).
  virtual int exit_code() const { return 1; }
};

// "examples/mlp.cpp:42", shortened to the path below the build's source root when possible.
std::string format_location(const std::source_location& loc);

struct Node;
// The "where" of an error (dsl/call_stack.cpp): the user's call at `loc` with the user's frames
// around it at this moment, or where `node` was built and from which of the user's frames.
std::string where(const std::source_location& loc);
std::string where(const Node& node);

// "1 example", "7 examples": a count and its noun, for messages; `plural` where it is not the
// noun and an s ("batches").
std::string count_of(long long n, const std::string& noun, const std::string& plural = "");

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
