// The parts of a CUDA kernel every thread-mapping scheme shares: parameters, extents, element
// offsets and the expression body, written as C for one point of the loop space. Internal to
// jit/cuda (cuda_emitter.cpp picks the scheme and writes the loops around these).
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "jit/cuda/cuda_emitter.h"

namespace towerjit::cuda::detail {

// Where a body is evaluated: a C expression per loop axis for its index, a suffix for the
// names of the values (one per lane of a vector path), and values already loaded for some
// accesses (the lanes of a float4 load).
struct Point {
  std::vector<std::string> index;
  std::string suffix;
  std::map<int, std::string> loaded;
};

class KernelWriter {
 public:
  KernelWriter(const kir::Program& p, const kir::Kernel& k, EmittedKernel& info);

  const kir::Kernel& kernel() const { return k_; }
  // "float* __restrict__ b4, const float* __restrict__ b1, ..., tj_i64 batch,
  //  const tj_u64* __restrict__ step_slot"
  std::string params() const;
  // The body's first line: `step`, read from the device word the runtime writes before each
  // run, so a captured CUDA graph replays with each run's step (runtime/cuda/program_graphs.h).
  static std::string prologue();
  // A loop axis's extent as C: "512" or "batch".
  std::string extent(int axis) const;
  // c + b * batch as C, parenthesised when it is a sum.
  static std::string affine(const kir::Affine& a);
  // The product of the extents of `axes` as c + b * B.
  kir::Affine count(const std::vector<int>& axes) const;
  // Element offset of an access at a point.
  std::string address(int access, const Point& pt) const;
  std::string buffer(int access) const;  // "b4" (the access's buffer parameter)
  // The C type a value has while the kernel computes: bf16 and f16 values are held in float.
  std::string type(DType t) const { return is_real(t) ? "float" : "int"; }
  // The C type of an element in memory: "__nv_bfloat16" and "__half" for the 16-bit floats
  // (cuda_bf16.h / cuda_fp16.h under NVRTC, emulator/kernel/cuda_host.h on the emulated GPU).
  static std::string storage_type(DType t);
  DType buffer_dtype(int access) const;

  // Writes `const T e<id><suffix> = ...;` for every expression `roots` need, in order.
  void body(std::ostream& out, const std::string& indent, const Point& pt,
            const std::vector<int>& roots) const;
  std::string value(int id, const Point& pt) const { return "e" + std::to_string(id) + pt.suffix; }
  // Writes `const tj_i64 i<a> = ...;` for each of `axes` from the flat row-major `flat`.
  void decompose(std::ostream& out, const std::string& indent, const std::string& flat,
                 const std::vector<int>& axes, const std::string& temp) const;
  // Every expression the outputs need, loads included.
  std::vector<int> needed(const std::vector<int>& roots) const;

 private:
  std::string rhs(int id, const Point& pt) const;
  std::string unary(const kir::Expr& e, const std::string& x) const;
  std::string binary(const kir::Expr& e, const std::string& a, const std::string& b) const;

  const kir::Program& p_;
  const kir::Kernel& k_;
  EmittedKernel& info_;
};

// The point whose index along each axis a is the variable "i<a>".
Point point_of(int rank);
// The expression output `output` stores: its own, or for a cast of an f32 value to bf16 / f16
// the f32 value, which the store rounds (once: the same bits as rounding, widening and
// rounding again).
int stored_expr(const kir::Kernel& k, size_t output);
// The kernel's stored expressions (stored_expr) from output `first` on.
std::vector<int> output_exprs(const kir::Kernel& k, size_t first);
// Stores outputs `first`.. at `pt` (each `b<id>[address] = e<id>;`).
void store_outputs(std::ostream& out, const KernelWriter& w, const std::string& indent, const Point& pt,
                   size_t first);
// 0, 1, ..., to - 1 from `from`.
std::vector<int> range(int from, int to);

// A float constant as C that round-trips through f32: "0.5f", "1e-05f", "TJ_INF".
std::string float_literal(double v);

// A float `x` as C rounded to bf16 / f16 storage, round to nearest even
// ("__float2bfloat16_rn(x)"); `x` itself for f32 and i32.
std::string narrow(DType t, const std::string& x);
// A bf16 / f16 element `x` as C widened to float, exactly ("__bfloat162float(x)"); `x` itself
// for f32 and i32.
std::string widen(DType t, const std::string& x);
// Whether a program has bf16 or f16 buffers or values: its module then includes cuda_bf16.h
// and cuda_fp16.h.
bool uses_half_floats(const kir::Program& p);

}  // namespace towerjit::cuda::detail
