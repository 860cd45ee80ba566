// The world's transport as the rest of towerjit sees it: every failure of a call is a
// towerjit::Error that says what failed (the transport's own message: the call, its size, what
// it waited for), where (this rank, and the user's call in progress: UserCall below) and what
// to do. The transports themselves throw std::runtime_error (the MPI plugin is a library of
// its own, loaded with dlopen), so world() wraps each in this one place, and callers never
// catch and rewrap a transport's failure.
#pragma once

#include <memory>
#include <source_location>

#include "runtime/dist/transport.h"

namespace towerjit::dist {

// `inner` with every call's std::runtime_error turned into towerjit::Error.
std::unique_ptr<Transport> checked_transport(std::unique_ptr<Transport> inner);

// While one lives, a transport failure names `loc` as where it happened: the public entry
// points (TowerTrainer's constructor and step(), fit(), resume_from()) set it, so a failure deep
// in a collective names the user's line that led there. Nested scopes restore the outer one.
// Process-wide, not per thread: collectives run on the trainer's threads, not the caller's.
class UserCall {
 public:
  explicit UserCall(std::source_location loc);
  ~UserCall();
  UserCall(const UserCall&) = delete;
  UserCall& operator=(const UserCall&) = delete;

 private:
  std::source_location outer_;
  bool had_outer_;
};

}  // namespace towerjit::dist
