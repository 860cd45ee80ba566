// The parameter blocks of the library kernels (library_kernels.cu), passed by value. Plain C
// structs compiled by both g++ (the runtime fills them) and NVRTC (the build embeds this file
// ahead of library_kernels.cu), so both sides agree on the layout by construction.
#ifndef TOWERJIT_CUDA_DEVICE_LIBRARY_PARAMS_H
#define TOWERJIT_CUDA_DEVICE_LIBRARY_PARAMS_H

// Convolution geometry, NCHW: x [n, c, h, w], w [o, c, kh, kw], y [n, o, oh, ow].
struct TjConvShape {
  long long n, c, h, w, o, kh, kw, oh, ow;
  int stride_h, stride_w, pad_h, pad_w;
};

// tj_copy_words's jobs: up to TJ_COPY_JOBS copies of 4-byte words within one device, passed by
// value, so a step's many small copies (the model updates written into their variables) are
// one launch. Job j runs on blocks [j * blocks_per_job, (j + 1) * blocks_per_job).
#define TJ_COPY_JOBS 32
struct TjCopyJobs {
  unsigned long long dst[TJ_COPY_JOBS], src[TJ_COPY_JOBS];
  long long words[TJ_COPY_JOBS];
  int count, blocks_per_job;
};

// Pooling geometry: `planes` = n * c planes of h x w in, oh x ow out.
struct TjPoolShape {
  long long planes, h, w, oh, ow;
  int kh, kw, stride_h, stride_w, pad_h, pad_w;
  int relu_mask;  // max pool gradient: nothing where x is not > 0 (Attrs::relu_mask)
};

// A box of `src` placed in `dst` at `origin` (pad, and each part of a concat), row-major,
// rank <= 8, batch dimensions already bound.
struct TjBox {
  int rank;
  long long src[8], dst[8], origin[8];
};

// Fused attention (tj_attention*): `batches` problems of q [tq, d], k [tk, d], v [tk, dv],
// the packed output [tq, dv + 1] (each row, then its log-sum-exp); query i sees keys j <= i
// when `causal`.
struct TjAttentionShape {
  long long batches, tq, tk, d, dv;
  float scale;
  int causal;
};

// Fused layer norm (tj_layer_norm*): `rows` rows of `n` features, epsilon, and whether it is
// rms_norm's (no centring, no bias).
struct TjNormShape {
  long long rows, n;
  float eps;
  int rms;
};

// Row-wise ops over the last axis (tj_softmax*): `rows` rows of `n` elements.
struct TjRowsShape {
  long long rows, n;
};

#endif  // TOWERJIT_CUDA_DEVICE_LIBRARY_PARAMS_H
