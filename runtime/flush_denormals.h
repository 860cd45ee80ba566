// Denormal floats flushed to zero while towerjit computes. Training drives some values into
// the denormal range (Adam's second moments of tiny gradients, momentum decaying towards
// zero), where every x86 float operation on them takes a slow microcode path: the demo's MLP
// fell from 71k to 33k samples/s over 10 epochs, and holds 55-70k with denormals flushed.
// XLA's CPU backend flushes them the same way; values below 1.2e-38 do not change training.
#pragma once

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace towerjit {

// Sets flush-to-zero and denormals-are-zero (MXCSR) for this thread in its scope, and puts the
// caller's mode back after it. A no-op off x86-64.
class FlushDenormals {
 public:
#if defined(__x86_64__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(__x86_64__)
  static constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  unsigned saved_;
#endif
};

}  // namespace towerjit
