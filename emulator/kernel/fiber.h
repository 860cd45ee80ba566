// Fibers: a stack and a saved stack pointer each, switched by a few instructions of assembly
// (x86-64 System V: the callee-saved registers, MXCSR and the x87 control word), with no
// system call. Every emulated CUDA thread is one (block_scheduler.h); ucontext's swapcontext
// would make a system call per switch, and a block of 256 threads switches at every barrier.
#pragma once

#include <cstddef>
#include <memory>

namespace towerjit::emulator {

class Fiber {
 public:
  // A fiber that will run `body(arg)` on a stack of `stack_bytes` when first switched to.
  // `body` must not return: it ends by switching away for the last time.
  Fiber(void (*body)(void*), void* arg, std::size_t stack_bytes);
  // The caller's own context (no stack of its own): the scheduler's side of every switch.
  Fiber();
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Starts again at body(arg) on its stack, as if new (reusing the stack).
  void reset(void (*body)(void*), void* arg);

  // Saves the running context into `from` and resumes `to`.
  static void switch_to(Fiber& from, Fiber& to);

 private:
  friend struct FiberSanitizer;  // fiber.cpp: what ASan and TSan are told at every switch

  void* sp_ = nullptr;
  char* stack_ = nullptr;
  std::size_t stack_bytes_ = 0;
  // Only for sanitized builds (TOWERJIT_SANITIZE): the stack's bounds as ASan learns them (the
  // caller's own context has no stack_ to name), ASan's fake stack while switched away, and
  // TSan's context for this fiber.
  const void* bottom_ = nullptr;
  std::size_t size_ = 0;
  void* fake_stack_ = nullptr;
  void* tsan_fiber_ = nullptr;
};

}  // namespace towerjit::emulator
