#include "emulator/kernel/fiber.h"

#include <cstdint>
#include <cstdlib>
#include <new>

// A sanitizer that follows stacks must be told of every switch, or it takes a fiber's frames
// for the thread's: ASan would unpoison or check the wrong stack, TSan would mix the fibers'
// call stacks and miss that a fiber runs after the switch that resumed it.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(__x86_64__)
#error "the emulator's fibers are written for x86-64"
#endif

// tj_fiber_switch(void** save, void* next): pushes the callee-saved registers and the
// floating-point control words on the current stack, stores the stack pointer in *save, loads
// `next` and pops the same from there. tj_fiber_start is where a new fiber's first switch
// "returns" to: it calls tj_fiber_run(body, arg), kept in r12 and r13 of its initial frame.
asm(R"(
  .text
  .globl tj_fiber_switch
  .type tj_fiber_switch, @function
tj_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tj_fiber_switch, .-tj_fiber_switch

  .globl tj_fiber_start
  .type tj_fiber_start, @function
tj_fiber_start:
  movq %r12, %rdi
  movq %r13, %rsi
  andq $-16, %rsp
  call tj_fiber_run
  ud2
  .size tj_fiber_start, .-tj_fiber_start
)");

extern "C" void tj_fiber_switch(void** save, void* next);
extern "C" void tj_fiber_start();

namespace towerjit::emulator {

// Empty unless the build is sanitized. ASan: start_switch names the stack about to run, and
// finish_switch, first thing on the resumed side, gives the bounds of the one left, which is
// how the caller's own context (no stack of ours) gets known. The fake stack is ASan's only
// with detect_stack_use_after_return, off by default in g++ 12; a fiber abandoned mid-kernel
// (a fault, a deadlock) would keep its fake frames until the process ends.
struct FiberSanitizer {
  static inline thread_local Fiber* leaving = nullptr;  // the fiber the last switch left

  static void before(Fiber& from, Fiber& to) {
    leaving = &from;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(&from.fake_stack_, to.bottom_, to.size_);
#endif
#if defined(__SANITIZE_THREAD__)
    from.tsan_fiber_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(to.tsan_fiber_, 0);  // flags 0: the switch orders the two fibers
#endif
    (void)to;
  }

  // On the side a switch resumed; `self` is null for a fiber's first run (no fake stack yet).
  static void after(Fiber* self) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(self ? self->fake_stack_ : nullptr, &leaving->bottom_, &leaving->size_);
#endif
    (void)self;
  }
};

}  // namespace towerjit::emulator

extern "C" void tj_fiber_run(void (*body)(void*), void* arg) {
  towerjit::emulator::FiberSanitizer::after(nullptr);
  body(arg);
  std::abort();  // a fiber's body switches away for good instead of returning
}

namespace towerjit::emulator {

Fiber::Fiber() = default;

Fiber::Fiber(void (*body)(void*), void* arg, std::size_t stack_bytes) : stack_bytes_(stack_bytes) {
  stack_ = static_cast<char*>(::operator new(stack_bytes, std::align_val_t(64)));
  bottom_ = stack_;
  size_ = stack_bytes;
#if defined(__SANITIZE_THREAD__)
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
  reset(body, arg);
}

Fiber::~Fiber() {
#if defined(__SANITIZE_THREAD__)
  if (stack_) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (stack_) ::operator delete(stack_, std::align_val_t(64));
}

void Fiber::reset(void (*body)(void*), void* arg) {
#if defined(__SANITIZE_ADDRESS__)
  // The frames of the last run never returned (a body ends by switching away, a faulted one is
  // abandoned): their redzones are still poisoned and would read as overflows of the new run.
  ASAN_UNPOISON_MEMORY_REGION(stack_, stack_bytes_);
#endif
  // The frame tj_fiber_switch pops: control words, r15..r12, rbx, rbp, then the return address.
  auto* top = reinterpret_cast<std::uintptr_t*>(stack_ + stack_bytes_) - 2;  // 16 bytes spare
  *--top = reinterpret_cast<std::uintptr_t>(&tj_fiber_start);
  *--top = 0;                                          // rbp
  *--top = 0;                                          // rbx
  *--top = reinterpret_cast<std::uintptr_t>(body);    // r12
  *--top = reinterpret_cast<std::uintptr_t>(arg);     // r13
  *--top = 0;                                          // r14
  *--top = 0;                                          // r15
  // MXCSR: every exception masked, round to nearest, denormals kept (NVRTC's default,
  // -ftz=false); x87: the default 0x037f.
  *--top = 0x1f80;
  *--top = 0x037f;
  sp_ = top;
}

void Fiber::switch_to(Fiber& from, Fiber& to) {
  FiberSanitizer::before(from, to);
  tj_fiber_switch(&from.sp_, to.sp_);
  FiberSanitizer::after(&from);  // `from` runs again: some fiber switched back to it
}

}  // namespace towerjit::emulator
