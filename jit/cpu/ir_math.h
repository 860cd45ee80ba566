// Float math functions written out as LLVM IR at each use, for the CPU kernels.
//
// libm's expf, logf, erff and tanhf are calls LLVM cannot widen: a loop holding one runs a
// scalar call per element (a GELU kernel spent about 4.5 ms of gpt-small's step in erff). These
// are straight-line code (selects, no branches, no calls), so the loop vectoriser widens them
// like any arithmetic. Each is within 2.7 units of 2^-24·|y| of the exact value over every
// float (checked exhaustively, tests/jit/test_ir_math.cpp and docs/cpu-jit.md), inside the 4
// the reference's error bounds allow a libm function (jit/reference/error_bounds.cpp). They give
// the same bits in a vector lane and in a loop's scalar remainder; with FMA (`llvm.fmuladd`)
// the bits can differ from those without, both within the bound.
//
// Denormal inputs and results follow the kernels' flush-to-zero mode: a subnormal input reads
// as zero, a subnormal result is zero.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace towerjit::cpujit {

// A float's value as LLVM IR writes a float literal (the float's value in double hex).
std::string llvm_float_literal(double v);

// The intrinsics the functions below call; the module declares them once.
extern const char kIrMathDeclarations[];

class IrMath {
 public:
  // Writes instructions to `out`, naming each new value with `fresh()`.
  IrMath(std::ostream& out, std::function<std::string()> fresh) : out_(out), fresh_(std::move(fresh)) {}

  std::string exp(const std::string& x);
  std::string log(const std::string& x);
  std::string log1p(const std::string& x);
  std::string erf(const std::string& x);
  std::string gelu_grad(const std::string& x);  // Phi(x) + x phi(x), gelu's slope
  std::string tanh(const std::string& x);

 private:
  std::string erf_with_tail(const std::string& x, const std::string& bump);
  std::string emit(const std::string& rhs);
  std::string mad(const std::string& a, const std::string& b, const std::string& c);
  std::string horner(const std::string& x, std::initializer_list<float> high_to_low);
  std::string fop(const char* op, const std::string& a, const std::string& b);
  std::string fcmp(const char* pred, const std::string& a, const std::string& b);
  std::string select(const std::string& cond, const std::string& a, const std::string& b);
  std::string iop(const char* op, const std::string& a, const std::string& b);
  std::string to_int(const std::string& f);
  std::string to_float(const std::string& i);
  std::string unary_intrinsic(const char* name, const std::string& x);
  std::string copysign(const std::string& magnitude, const std::string& sign);

  std::ostream& out_;
  std::function<std::string()> fresh_;
};

}  // namespace towerjit::cpujit
