// Philox 4x32-10 as one __host__ __device__ function, in plain C++ that g++ and NVRTC both
// compile. NVRTC gets this exact text at the top of every CUDA module (the build embeds the
// file), and tests/jit/test_cuda_philox.cpp compiles the same file on the host and checks it
// against dsl/philox.cpp, the readable definition, so GPU random numbers equal the CPU's.
#ifndef TOWERJIT_CUDA_DEVICE_PHILOX_H
#define TOWERJIT_CUDA_DEVICE_PHILOX_H

#if defined(__CUDACC__)
#define TJ_HD __host__ __device__ __forceinline__
#else
#define TJ_HD inline
#endif

typedef unsigned int tj_u32;
typedef unsigned long long tj_u64;

// 32 random bits for element `index` of `stream`: word index % 4 of the block with counter
// {lo(index / 4), hi(index / 4), lo(stream), hi(stream)} and key {lo(seed), hi(seed)}.
TJ_HD tj_u32 tj_philox_bits(tj_u64 seed, tj_u64 stream, tj_u64 index) {
  const tj_u64 block = index / 4;
  tj_u32 c0 = (tj_u32)block, c1 = (tj_u32)(block >> 32);
  tj_u32 c2 = (tj_u32)stream, c3 = (tj_u32)(stream >> 32);
  tj_u32 k0 = (tj_u32)seed, k1 = (tj_u32)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the key is bumped between rounds, not before the first
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const tj_u64 p0 = (tj_u64)0xD2511F53u * c0, p1 = (tj_u64)0xCD9E8D57u * c2;
    const tj_u32 n0 = (tj_u32)(p1 >> 32) ^ c1 ^ k0, n2 = (tj_u32)(p0 >> 32) ^ c3 ^ k1;
    c1 = (tj_u32)p1;
    c3 = (tj_u32)p0;
    c0 = n0;
    c2 = n2;
  }
  const tj_u32 w = (tj_u32)(index % 4);
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}

// A float in [0, 1) from the top 24 bits: k * 2^-24, exact in f32, the same on every backend.
TJ_HD float tj_philox_uniform(tj_u64 seed, tj_u64 stream, tj_u64 index) {
  return (float)(tj_philox_bits(seed, stream, index) >> 8) * (1.0f / 16777216.0f);
}

#endif  // TOWERJIT_CUDA_DEVICE_PHILOX_H
