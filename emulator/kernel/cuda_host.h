// CUDA C's device-side vocabulary for a host compiler: what g++ needs to compile the exact
// source NVRTC is given (the emitted kernels, jit/cuda/device/*.cu) into a shared object the
// emulator runs, one fiber per CUDA thread (block_scheduler.h). The source first goes through
// host_module.cpp's small textual pre-pass (__shared__ declarations, float4 casts); everything
// else is spelled here. Builtins that need the block or the warp (threadIdx, __syncthreads,
// shuffles, shared memory) call the emulator through one table, tj_emu_api, which the loader
// fills in when it opens the object, so the object needs no symbol from the process.
//
// Included first in the host translation unit (g++ -include); not a header of towerjit's own
// code. Plain C++17, no CUDA headers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict

#include "cuda_host_api.h"
#include "cuda_host_half.h"  // __nv_bfloat16, __half and their conversions

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

extern "C" {
TjEmuApi* tj_emu_api = nullptr;
}

#define threadIdx (tj_emu_api->self()->threadIdx)
#define blockIdx (tj_emu_api->self()->blockIdx)
#define blockDim (tj_emu_api->self()->blockDim)
#define gridDim (tj_emu_api->self()->gridDim)
#define warpSize 32
#define __syncthreads() tj_emu_api->syncthreads(__LINE__)
// Serial work a thread does, counted for the launch records; a no-op under NVRTC (preamble.cuh).
#define TJ_WORK(n) tj_emu_api->work(n)
#define TJ_TAIL_WORK(n) tj_emu_api->tail_work(n)
// Kernels of other streams run on other host threads at once: a fence is a real one.
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)

namespace tj_emu {

template <typename T>
inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
inline T from_bits(unsigned long long bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <typename T>
inline T shuffle(int kind, unsigned mask, T v, int arg, int width, int line) {
  return from_bits<T>(tj_emu_api->shuffle(kind, mask, to_bits(v), arg, width, line));
}

// The pre-pass turns `__shared__ T name[N]...;` into `T (&name)[N]... = tj_emu::shared<T[N]...>(__LINE__);`.
template <typename A>
inline A& shared(int line) {
  return *static_cast<A*>(tj_emu_api->shared(sizeof(A), alignof(A), line));
}
template <typename T>
inline T* dynamic_shared() {
  return static_cast<T*>(tj_emu_api->dynamic_shared());
}

// The pre-pass turns reinterpret_cast<... float4*>(p) (and tj_bf16x4*, tj_f16x4*) into this: the GPU faults on a vector
// access that is not aligned to its size, so the emulator does too.
template <typename P, typename Q>
inline P vector_cast(int line, Q* p) {
  using V = typename std::remove_cv<typename std::remove_pointer<P>::type>::type;
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(V) != 0) tj_emu_api->fail("misaligned vector access", p, line);
  return reinterpret_cast<P>(p);
}

}  // namespace tj_emu

#define __shfl_sync(mask, v, lane, ...) tj_emu::shuffle(0, mask, v, lane, tj_emu_width(__VA_ARGS__), __LINE__)
#define __shfl_up_sync(mask, v, delta, ...) tj_emu::shuffle(1, mask, v, delta, tj_emu_width(__VA_ARGS__), __LINE__)
#define __shfl_down_sync(mask, v, delta, ...) tj_emu::shuffle(2, mask, v, delta, tj_emu_width(__VA_ARGS__), __LINE__)
#define __shfl_xor_sync(mask, v, lanes, ...) tj_emu::shuffle(3, mask, v, lanes, tj_emu_width(__VA_ARGS__), __LINE__)
inline int tj_emu_width(int width = 32) { return width; }

inline float __int_as_float(int i) { return tj_emu::from_bits<float>(static_cast<unsigned>(i)); }
inline int __float_as_int(float f) { return static_cast<int>(tj_emu::to_bits(f)); }
inline unsigned __float_as_uint(float f) { return static_cast<unsigned>(tj_emu::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return tj_emu::from_bits<float>(u); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
template <typename T>
inline T __ldcg(const T* p) { return *p; }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// Atomics are real: blocks run on several host threads at once.
template <typename T>
inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float* p, float v) {
  float old, sum;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  do sum = old + v;
  while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <typename T>
inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicCAS(T* p, T compare, T v) {
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
