// How each function is computed, and where its constants come from:
// - exp: x = n·ln2 + r, |r| <= ln2/2 (n by the 1.5·2^23 rounding trick, ln2 split in a 16-bit
//   head and a tail so n·head is exact); e^r by its Taylor series to r^7 (the first term left
//   out is below 6e-9 relative); 2^n applied in two halves so n = 128 and n = -150 stay in range.
// - log: x = 2^e·m, m in [√½, √2); with f = m - 1 and s = f / (2 + f), log(1 + f) =
//   f - f²/2 + s·(f²/2 + R(s²)), R the series of 2·atanh(s)/s - 2 (|s| <= 0.172, terms to s^10).
// - log1p(x) = log(1 + x)·x / ((1 + x) - 1): the rounding of 1 + x cancels (Goldberg, 1991).
// - erf: below 0.9, x·P(x²); from 0.9, 1 - e^(-x²)·T(v) with T ≈ erfc(x)·e^(x²) a polynomial
//   in v = 1/(1 + x/2) - 1/2; 1 from 3.93 (erfc is below half an ulp of 1 there). P and T were
//   fitted by least squares in double on Chebyshev nodes, each coefficient rounded to float
//   and the rest refitted (P's constant term kept exact as a head and a tail).
// - tanh: below 0.9, x + x³·Q(x²) (Q fitted as P); from 0.9, 1 - 2/(e^(2x) + 1).
// - gelu_grad: (1 + erf(x/√2))/2 + x·e^(-x²/2)/√(2π), one exp shared by erf's tail and the density.
#include "jit/cpu/ir_math.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <iterator>

#include "jit/cpu/exp_constants.h"

namespace towerjit::cpujit {

std::string llvm_float_literal(double v) {
  const double d = static_cast<float>(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(std::bit_cast<uint64_t>(d)));
  return buf;
}

const char kIrMathDeclarations[] =
    "declare float @llvm.fmuladd.f32(float, float, float)\n"
    "declare float @llvm.copysign.f32(float, float)\n";

namespace {

std::string lit(float v) { return llvm_float_literal(v); }

using namespace exp_constants;
constexpr int32_t kSqrtHalfBits = 0x3f3504f3;    // √½: log's mantissa is taken in [√½, √2)

}  // namespace

std::string IrMath::emit(const std::string& rhs) {
  std::string v = fresh_();
  out_ << "  " << v << " = " << rhs << "\n";
  return v;
}

std::string IrMath::mad(const std::string& a, const std::string& b, const std::string& c) {
  return emit("call float @llvm.fmuladd.f32(float " + a + ", float " + b + ", float " + c + ")");
}

std::string IrMath::horner(const std::string& x, std::initializer_list<float> high_to_low) {
  auto c = high_to_low.begin();
  std::string acc = lit(*c);
  for (++c; c != high_to_low.end(); ++c) acc = mad(acc, x, lit(*c));
  return acc;
}

std::string IrMath::fop(const char* op, const std::string& a, const std::string& b) {
  return emit(std::string(op) + " float " + a + ", " + b);
}

std::string IrMath::fcmp(const char* pred, const std::string& a, const std::string& b) {
  return emit(std::string("fcmp ") + pred + " float " + a + ", " + b);
}

std::string IrMath::select(const std::string& cond, const std::string& a, const std::string& b) {
  return emit("select i1 " + cond + ", float " + a + ", float " + b);
}

std::string IrMath::iop(const char* op, const std::string& a, const std::string& b) {
  return emit(std::string(op) + " i32 " + a + ", " + b);
}

std::string IrMath::to_int(const std::string& f) { return emit("bitcast float " + f + " to i32"); }
std::string IrMath::to_float(const std::string& i) { return emit("bitcast i32 " + i + " to float"); }

std::string IrMath::unary_intrinsic(const char* name, const std::string& x) {
  return emit(std::string("call float @") + name + "(float " + x + ")");
}

std::string IrMath::copysign(const std::string& magnitude, const std::string& sign) {
  return emit("call float @llvm.copysign.f32(float " + magnitude + ", float " + sign + ")");
}

std::string IrMath::exp(const std::string& x) {
  // Clamped so n stays in [-150, 128]: below -104 the result is under the smallest float, above
  // 88.75 it overflows to infinity by itself. A NaN passes both compares and is put back last.
  const std::string lo = fcmp("olt", x, lit(kLowest));
  const std::string x1 = select(lo, lit(kLowest), x);
  const std::string hi = fcmp("ogt", x1, lit(kHighest));
  const std::string xc = select(hi, lit(kHighest), x1);
  const std::string t = mad(xc, lit(kLog2E), lit(kRoundMagic));  // x·log2(e), rounded
  const std::string n = fop("fsub", t, lit(kRoundMagic));
  const std::string ni = iop("sub", to_int(t), std::to_string(kRoundMagicBits));
  const std::string r1 = mad(n, lit(-kLn2Head), xc);
  const std::string r = mad(n, lit(-kLn2Tail), r1);
  std::string q = lit(kPoly[0]);
  for (size_t i = 1; i < std::size(kPoly); ++i) q = mad(q, r, lit(kPoly[i]));
  const std::string p = fop("fadd", mad(q, fop("fmul", r, r), r), lit(1.0f));
  const std::string n1 = iop("ashr", ni, "1");
  const std::string n2 = iop("sub", ni, n1);
  const std::string s1 = to_float(iop("shl", iop("add", n1, "127"), "23"));
  const std::string s2 = to_float(iop("shl", iop("add", n2, "127"), "23"));
  const std::string y = fop("fmul", fop("fmul", p, s1), s2);
  return select(fcmp("uno", x, lit(0.0f)), x, y);
}

std::string IrMath::log(const std::string& x) {
  const std::string ix = iop("sub", to_int(x), std::to_string(kSqrtHalfBits));
  const std::string e = emit("sitofp i32 " + iop("ashr", ix, "23") + " to float");
  const std::string m = to_float(iop("add", iop("and", ix, "8388607"), std::to_string(kSqrtHalfBits)));
  const std::string f = fop("fsub", m, lit(1.0f));
  const std::string s = fop("fdiv", f, fop("fadd", lit(2.0f), f));
  const std::string z = fop("fmul", s, s);
  const std::string R = fop("fmul", horner(z, {2.0f / 11, 2.0f / 9, 2.0f / 7, 2.0f / 5, 2.0f / 3}), z);
  const std::string hfsq = fop("fmul", fop("fmul", lit(0.5f), f), f);
  const std::string tail = mad(s, fop("fadd", hfsq, R), fop("fmul", e, lit(kLn2Tail)));
  const std::string y = mad(e, lit(kLn2Head), fop("fsub", f, fop("fsub", hfsq, tail)));
  // Zero (a subnormal too: it compares equal to zero under the kernels' DAZ) is -inf, a
  // negative x NaN, +inf itself, a NaN itself.
  const std::string y1 = select(fcmp("oeq", x, lit(0.0f)), "0xFFF0000000000000", y);
  const std::string y2 = select(fcmp("olt", x, lit(0.0f)), "0x7FF8000000000000", y1);
  const std::string y3 = select(fcmp("oeq", x, "0x7FF0000000000000"), x, y2);
  return select(fcmp("uno", x, lit(0.0f)), x, y3);
}

std::string IrMath::log1p(const std::string& x) {
  const std::string w = fop("fadd", x, lit(1.0f));
  const std::string d = fop("fsub", w, lit(1.0f));
  const std::string scaled = fop("fmul", log(w), fop("fdiv", x, d));
  // 1 + x rounded to 1: log1p(x) is x to within float precision; +inf stays +inf.
  const std::string y = select(fcmp("oeq", d, lit(0.0f)), x, scaled);
  return select(fcmp("oeq", x, "0x7FF0000000000000"), x, y);
}

std::string IrMath::erf(const std::string& x) { return erf_with_tail(x, ""); }

// Phi(x) + x phi(x) = (1 + erf(x/√2)) / 2 + x e^(-x²/2) / √(2π): erf's tail takes the same
// e^(-x²/2) as phi (e^(-s²) at s = x/√2, unclamped: past erf's clamp it only makes a term that
// rounds away smaller still), so the slope costs one exp an element, not two.
std::string IrMath::gelu_grad(const std::string& x) {
  const std::string bump = exp(fop("fmul", fop("fmul", x, x), lit(-0.5f)));
  const std::string cdf = fop("fmul", fop("fadd", erf_with_tail(fop("fmul", x, lit(0.70710678118654752f)), bump),
                                          lit(1.0f)),
                              lit(0.5f));
  return mad(x, fop("fmul", bump, lit(0.39894228040143268f)), cdf);
}

// erf(x); its tail's e^(-x²) is `bump` when given, else computed here from |x| clamped.
std::string IrMath::erf_with_tail(const std::string& x, const std::string& bump) {
  const std::string a = unary_intrinsic("llvm.fabs.f32", x);
  const std::string u = fop("fmul", x, x);
  // |x| < 0.9: x·(2/√π + u·P1(u)), 2/√π's float head times x added last.
  const std::string q = horner(u, {-0x1.41f892p-11f, 0x1.493172p-8f, -0x1.b6e3c8p-6f, 0x1.ce20f6p-4f,
                                   -0x1.812714p-2f, -0x1.f7ac92p-25f});
  // The sign put back: at x = -0 the sum is +0.
  const std::string small = copysign(mad(x, lit(0x1.20dd76p+0f), fop("fmul", x, q)), x);
  // 0.9 <= |x|: 1 - e^(-a²)·T(v).
  const std::string ac = select(fcmp("ogt", a, lit(3.93f)), lit(3.93f), a);  // a NaN stays
  const std::string v = fop("fsub", fop("fdiv", lit(1.0f), mad(ac, lit(0.5f), lit(1.0f))), lit(0.5f));
  const std::string T = horner(v, {0x1.1ac96cp-3f, 0x1.bff10ap-4f, -0x1.015ffcp-4f, -0x1.c940a6p-3f,
                                   0x1.eaeccep-5f, 0x1.437deap-1f, 0x1.eeea42p-1f, 0x1.b57036p-1f,
                                   0x1.058672p-2f});
  const std::string g = bump.empty() ? exp(emit("fneg float " + fop("fmul", ac, ac))) : bump;
  const std::string big = copysign(fop("fsub", lit(1.0f), fop("fmul", g, T)), x);
  // A NaN fails `a < 0.9` and the large branch carries it.
  return select(fcmp("olt", a, lit(0.9f)), small, big);
}

std::string IrMath::tanh(const std::string& x) {
  const std::string a = unary_intrinsic("llvm.fabs.f32", x);
  const std::string u = fop("fmul", x, x);
  const std::string q = horner(u, {-0x1.1fd54cp-11f, 0x1.734880p-9f, -0x1.1747bcp-7f, 0x1.650e28p-6f,
                                   -0x1.ba0d14p-5f, 0x1.11110cp-3f, -0x1.555556p-2f});
  const std::string small = copysign(mad(fop("fmul", x, u), q, x), x);  // tanh(-0) = -0
  // From 0.9: 1 - 2/(e^(2a) + 1); a clamped at 10, where it is 1 in float already.
  const std::string ac = select(fcmp("ogt", a, lit(10.0f)), lit(10.0f), a);
  const std::string e = exp(fop("fmul", lit(2.0f), ac));
  const std::string big = copysign(fop("fsub", lit(1.0f), fop("fdiv", lit(2.0f), fop("fadd", e, lit(1.0f)))), x);
  const std::string y = select(fcmp("olt", a, lit(0.9f)), small, big);
  return select(fcmp("uno", x, lit(0.0f)), x, y);
}

}  // namespace towerjit::cpujit
