// A Chrome / Perfetto trace (`--trace FILE`, open it at ui.perfetto.dev or chrome://tracing):
// each tower's kernels, the reductions and the applies as spans on their own rows ("threads"),
// so the overlap of compute and communication, and async staleness, can be seen.
//
//   towerjit::report::Trace trace(path);             // or Trace{} (disabled)
//   trace.name_thread(0, "tower 0");
//   { auto s = trace.span("forward+backward", "kernel", 0); ... }   // one "X" event
//   trace.counter("staleness", 3);
//
// The file is {"traceEvents":[...]}: events are streamed to it as they end (buffered), and
// close() (or the destructor) writes the closing "]}", so only a crash leaves it unterminated.
// Timestamps are microseconds from the Trace's construction. All calls are thread-safe.
//
// A disabled Trace (default-constructed or built with an empty path) costs one null check per
// call: the trainer calls it every step. Arguments passed as TraceArgs are still built by the
// caller; on a hot path add them with Span::arg, which a disabled span ignores.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace towerjit {
using Loc = std::source_location;
}

namespace towerjit::report {

// An event argument's value, rendered as JSON when made: a number (a non-finite one as the
// string "nan", "inf" or "-inf", since JSON has no spelling for them) or an escaped string.
class TraceValue {
 public:
  TraceValue(double v);
  TraceValue(int64_t v);
  template <std::integral I>  // int, size_t, long long... without ambiguity
  TraceValue(I v) : TraceValue(static_cast<int64_t>(v)) {}
  TraceValue(std::string_view v);
  TraceValue(const char* v) : TraceValue(std::string_view(v)) {}
  TraceValue(const std::string& v) : TraceValue(std::string_view(v)) {}
  const std::string& json() const { return json_; }

 private:
  std::string json_;
};
using TraceArgs = std::vector<std::pair<std::string, TraceValue>>;

class Trace {
  struct Impl;

 public:
  using Clock = std::chrono::steady_clock;

  // A span from its making to its destruction (or end()): one complete ("X") event on row
  // `tid`. Move-only. A span of a disabled trace holds nothing and writes nothing. It must end
  // before its Trace is destroyed (after close() it ends without writing).
  class Span {
   public:
    Span() = default;
    Span(Span&&) noexcept = default;
    Span& operator=(Span&& other) noexcept {
      end();
      open_ = std::move(other.open_);
      return *this;
    }
    ~Span() { end(); }
    // A template so that a disabled span converts nothing: the value becomes a TraceValue
    // (its JSON text) only after the null check.
    template <typename V>
    void arg(std::string_view key, const V& value) {
      if (open_ != nullptr) open_->args.emplace_back(std::string(key), TraceValue(value));
    }
    void end() {
      if (open_ != nullptr) finish();
    }

   private:
    friend class Trace;
    // Everything an open span needs, behind one pointer, so a disabled span is a null pointer
    // to make, test and destroy.
    struct Open {
      Impl* impl;
      std::string name, category;
      int tid;
      Clock::time_point start;
      TraceArgs args;
    };
    void finish();
    std::unique_ptr<Open> open_;
  };

  Trace();  // disabled
  // Creates (or truncates) `path`; an empty path gives a disabled trace. Errors
  // (towerjit::Error): the path cannot be opened, named with the system's reason and the fix.
  explicit Trace(const std::string& path, Loc loc = Loc::current());
  ~Trace();  // close(), reporting a failure on stderr since a destructor cannot throw
  Trace(Trace&&) noexcept;
  Trace& operator=(Trace&&) noexcept;

  // Built with a path (stays true after close(), when events are dropped).
  bool enabled() const { return impl_ != nullptr; }

  // Names row `tid` ("tower 0", "reduce", "apply") with a metadata ("M") event; rows sort by tid.
  void name_thread(int tid, std::string_view name);

  // Starts a span (see Span) on row `tid`; `category` groups events for filtering ("compute",
  // "communication", "apply").
  Span span(std::string_view name, std::string_view category, int tid) {
    Span s;
    if (impl_ != nullptr) begin(s, name, category, tid, {});
    return s;
  }
  Span span(std::string_view name, std::string_view category, int tid, TraceArgs args) {
    Span s;
    if (impl_ != nullptr) begin(s, name, category, tid, std::move(args));
    return s;
  }
  // A complete event timed by the caller (e.g. measured on a tower's thread); `start` from
  // now(). A non-positive duration is written as 0.
  void complete(std::string_view name, std::string_view category, int tid, Clock::time_point start,
                Clock::time_point end, TraceArgs args = {});
  // A zero-length mark ("i") on row `tid`.
  void instant(std::string_view name, std::string_view category, int tid, TraceArgs args = {});
  // A value over time ("C"), drawn as its own track: staleness, samples/s, loss. A non-finite
  // value is skipped (a gap in the track).
  void counter(std::string_view name, double value);

  static Clock::time_point now() { return Clock::now(); }

  // Writes the closing "]}" and closes the file; later events are dropped, later close() calls
  // do nothing. Errors: a write to the file failed (e.g. a full disk), named with the path.
  void close(Loc loc = Loc::current());

 private:
  void begin(Span& s, std::string_view name, std::string_view category, int tid, TraceArgs args);
  // Impl outlives close(), so spans still open then end safely; it moves with the Trace.
  std::unique_ptr<Impl> impl_;
};

}  // namespace towerjit::report
