#include "dsl/call_stack.h"

#include <execinfo.h>

#include "dsl/error.h"
#include "dsl/node.h"
#include "dsl/symbolize.h"

namespace towerjit {

namespace {

constexpr int kMaxFrames = 64;  // deeper user code keeps its innermost 64 frames

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Objects whose frames are never the user's, told by their path alone: this library's and the
// system's (libc, libstdc++), so their line tables are never read.
bool is_library_object(const std::string& path) {
  if (starts_with(path.substr(path.rfind('/') + 1), "libtowerjit")) return true;
  for (const char* dir : {"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"})
    if (starts_with(path, dir)) return true;
  return false;
}

// This library's code inlined from its headers into the user's program.
bool is_library(const detail::SourceFrame& f) {
  if (f.file.find("/include/towerjit/") != std::string::npos) return true;  // installed headers
#ifdef TOWERJIT_SOURCE_ROOT
  for (const char* dir : {"dsl/", "jit/", "runtime/", "emulator/", "include/"})
    if (starts_with(f.file, TOWERJIT_SOURCE_ROOT "/" + std::string(dir))) return true;
#endif
  return false;
}

// The C++ runtime inlined into the program: std::function's invoker, the test framework's.
bool is_system(const detail::SourceFrame& f) {
  return starts_with(f.file, "/usr/include/") || starts_with(f.file, "/usr/lib/");
}

// Skips a balanced (...), <...> or {...} starting at s[i]; returns the index after it.
size_t skip_group(const std::string& s, size_t i) {
  int depth = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '<' || c == '{') ++depth;
    if (c == ')' || c == '>' || c == '}') --depth;
    if (depth == 0) return i + 1;
  }
  return s.size();
}

// "conv_bn_relu(towerjit::Tensor, int)" -> "conv_bn_relu";
// "main::{lambda(towerjit::Inputs)#1}::operator()(towerjit::Inputs) const" -> "main::{lambda#1}";
// "(anonymous namespace)::block(…)" -> "block".
std::string short_function(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size();) {
    if (starts_with(name.substr(i), "(anonymous namespace)::")) {
      i += 23;  // a file's own helpers: the file is named already
    } else if (starts_with(name.substr(i), "{lambda(")) {
      const size_t params_end = skip_group(name, i + 7);
      out += "{lambda";
      i = params_end;
    } else if (name[i] == '(' && !(out.size() >= 8 && out.compare(out.size() - 8, 8, "operator") == 0)) {
      break;  // the parameter list
    } else if (name[i] == '<') {
      const size_t end = skip_group(name, i);
      out += name.substr(i, end - i);
      i = end;
    } else {
      out += name[i++];
    }
  }
  const std::string call = "}::operator()";
  if (out.size() > call.size() && out.compare(out.size() - call.size(), call.size(), call) == 0)
    out.resize(out.size() - call.size() + 1);
  return out;
}

// One file named two ways: as the compiler was given it ("model.cpp") and as the line tables
// spell it ("/home/me/model.cpp").
bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const auto& [shorter, longer] = a.size() < b.size() ? std::tie(a, b) : std::tie(b, a);
  return longer.size() > shorter.size() && longer[longer.size() - shorter.size() - 1] == '/' &&
         longer.compare(longer.size() - shorter.size(), shorter.size(), shorter) == 0;
}

// Whether `frame` is the call `loc` names: the same file, inside the frame's function, at or
// before the frame's return point (a call's arguments may span lines below its start).
bool holds(const UserFrame& frame, const std::source_location& loc) {
  const int line = static_cast<int>(loc.line());
  return same_file(frame.file, loc.file_name()) && line <= frame.line &&
         (frame.function_line == 0 || frame.function_line <= line);
}

}  // namespace

std::shared_ptr<const CallStack> capture_call_stack() {
  void* buffer[kMaxFrames + 1];
  const int n = backtrace(buffer, kMaxFrames + 1);
  auto stack = std::make_shared<CallStack>();
  stack->return_addresses.assign(buffer + (n > 0 ? 1 : 0), buffer + n);  // not this function
  return stack;
}

std::vector<UserFrame> user_frames(const CallStack& stack) {
  std::vector<UserFrame> frames;
  for (const void* address : stack.return_addresses) {
    if (is_library_object(detail::object_of(address))) {
      if (!frames.empty()) return frames;  // the library called the user's code from here
      continue;
    }
    for (const detail::SourceFrame& f : detail::symbolize(address)) {
      if (is_library(f) || is_system(f)) {
        if (!frames.empty()) return frames;  // the library called the user's code from here
        continue;
      }
      if (f.file.empty()) continue;  // no line tables here: nothing to say about this frame
      frames.push_back({f.file, f.line, f.function_line, short_function(f.function)});
    }
  }
  return frames;
}

std::string format_location(const std::source_location& loc, const CallStack* stack) {
  std::string out = format_location(loc);
  if (!stack) return out;
  const std::vector<UserFrame> frames = user_frames(*stack);
  size_t at = 0;
  while (at < frames.size() && !holds(frames[at], loc)) ++at;
  if (frames.size() - at < 2) return out;  // one frame says no more than the line does
  out += " " + frames[at].function;
  for (size_t i = at + 1; i < frames.size(); ++i)
    out += " ← " + detail::display_path(frames[i].file) + ":" + std::to_string(frames[i].line) + " " +
           frames[i].function;
  return out;
}

std::string format_location(const Node& node) { return format_location(node.loc, node.stack.get()); }

std::string where(const std::source_location& loc) { return format_location(loc, capture_call_stack().get()); }

std::string where(const Node& node) { return format_location(node); }

}  // namespace towerjit
