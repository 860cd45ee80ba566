// An Error nothing catches: its message and exit_code(), as an uncaught exception in Python
// prints its message and exits 1, rather than std::terminate's "terminate called after
// throwing an instance of 'towerjit::Error'", abort and core dump. A Ctrl-C that stops fit()
// in a program with no try block (docs/getting-started.md's first one) then exits 130, as
// the same program stopped by the signal would.
//
// Installed when the library loads, chained to the handler that was there (any other
// exception goes to it); a program that sets a handler of its own later replaces this one.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dsl/error.h"

namespace towerjit {
namespace {

std::terminate_handler previous = nullptr;

[[noreturn]] void on_terminate() {
  if (const std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const Error& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s\n", e.what());
      std::fflush(stderr);
      // _Exit, not exit: terminate may come on any thread while others run, and static
      // destructors would then race them.
      std::_Exit(e.exit_code());
    } catch (...) {
    }
  }
  if (previous) previous();
  std::abort();
}

const bool installed = [] {
  previous = std::set_terminate(on_terminate);
  return true;
}();

}  // namespace
}  // namespace towerjit
