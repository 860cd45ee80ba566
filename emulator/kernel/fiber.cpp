#include "emulator/kernel/fiber.h"

#include <cstdint>
#include <cstdlib>
#include <new>

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
extern "C" void tj_fiber_run(void (*body)(void*), void* arg) {
  body(arg);
  std::abort();  // a fiber's body switches away for good instead of returning
}

namespace towerjit::emulator {

Fiber::Fiber() = default;

Fiber::Fiber(void (*body)(void*), void* arg, std::size_t stack_bytes) : stack_bytes_(stack_bytes) {
  stack_ = static_cast<char*>(::operator new(stack_bytes, std::align_val_t(64)));
  reset(body, arg);
}

Fiber::~Fiber() {
  if (stack_) ::operator delete(stack_, std::align_val_t(64));
}

void Fiber::reset(void (*body)(void*), void* arg) {
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

void Fiber::switch_to(Fiber& from, Fiber& to) { tj_fiber_switch(&from.sp_, to.sp_); }

}  // namespace towerjit::emulator
