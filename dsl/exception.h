// towerjit::Error, the one exception type of towerjit, and the helpers that write the "where"
// of its messages: the part of dsl/error.h a user's code sees (the checks that raise it,
// user_check and internal_check, stay in dsl/error.h, which pulls in <sstream>).
#pragma once

#include <source_location>
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

}  // namespace towerjit
