// The user's call stack at the moment a DSL call built a node, JAX-style: captured as return
// addresses (cheap: one unwind, no strings), symbolised only when an error or a dump prints
// it, and filtered to the user's own frames. A helper used five times then reads
//   model.cpp:29 conv_bn_relu ← model.cpp:41 res_block ← model.cpp:60 main::{lambda#1}
// instead of five identical "model.cpp:29".
//
// Symbolising needs line tables in the user's program (-g1 is enough, and keeps inlined
// helpers); without them only the innermost line, which std::source_location gives, is shown.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <vector>

namespace towerjit {

struct Node;

struct CallStack {
  std::vector<const void*> return_addresses;  // innermost first, this library's frames included
};

// The current thread's stack; shared by every node a DSL call builds, and by their gradients.
std::shared_ptr<const CallStack> capture_call_stack();

// One frame of the user's code, as the line tables name it.
struct UserFrame {
  std::string file;      // as the compiler saw it (absolute under CMake)
  int line = 0;
  int function_line = 0; // where the enclosing function starts, 0 where unknown
  std::string function;  // "conv_bn_relu", "main::{lambda#1}"
};

// The user's frames of `stack`, innermost first: the first run of frames that are neither this
// library's nor the system's (std::function's invoker, libc). Empty without line tables.
std::vector<UserFrame> user_frames(const CallStack& stack);

// Where `loc` is: "model.cpp:29", followed by " conv_bn_relu ← model.cpp:41 res_block ← …" when
// `stack` holds the frame `loc` is in and callers of the user's above it.
std::string format_location(const std::source_location& loc, const CallStack* stack);

// Where a node was built: its gradient's forward node's stack for a backward op.
std::string format_location(const Node& node);

}  // namespace towerjit
