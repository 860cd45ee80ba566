// Loops are emitted with their indices in allocas, and the accumulator of a reduction too:
// O3's mem2reg turns them into SSA, and the loop vectoriser then sees plain counted loops.
// That keeps this emitter a straight walk over the kernel IR.
#include "jit/cpu/llvm_emitter.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <sstream>
#include <utility>

#include "dsl/error.h"
#include "dsl/half_float.h"
#include "dsl/philox.h"
#include "jit/cpu/ir_math.h"
#include "jit/passes/coalesce_axes.h"

namespace towerjit::cpujit {
namespace {

using kir::Expr;

std::string float_literal(double v) { return llvm_float_literal(v); }

// The type a value has while the kernel computes: bf16 and f16 values are held in float.
const char* ty(DType t) { return is_real(t) ? "float" : "i32"; }

// The type an element has in memory.
const char* storage(DType t) {
  switch (t) {
    case DType::bf16: return "i16";  // bf16 as its bits: widened and rounded with integer ops
    case DType::f16: return "half";  // LLVM's half: F16C's conversions where the target has them
    default: return ty(t);
  }
}

class KernelEmitter {
 public:
  KernelEmitter(const kir::Program& p, const kir::Kernel& k, EmittedKernel& info)
      : p_(p), k_(&k), info_(info) {}
  std::string emit();

 private:
  std::string emit_group();
  void emit_part(int j, const kir::Affine& start, const kir::Affine& end);
  std::string tmp() { return "%t" + std::to_string(next_++); }
  std::string i64_affine(const kir::Affine& a);
  std::string address(int access);
  std::string philox_uniform(uint64_t seed, const std::string& index);
  std::string expr(int e);
  std::string unary(const Expr& e, const std::string& x);
  std::string binary(const Expr& e, const std::string& a, const std::string& b);
  std::string pick_nan_first(const char* fp, const std::string& a, const std::string& b, const std::string& v);
  std::string call(const char* fn, const std::string& x);
  IrMath math() { return IrMath(out_, [this] { return tmp(); }); }
  std::string narrow(DType t, const std::string& x);
  std::string widen(DType t, const std::string& bits);
  void open_loop(int axis);
  void close_loop(int axis);
  std::string index(int axis);
  void emit_store(const kir::Kernel::Output& o, const std::string& value);
  void emit_reduction();
  void store_side_outputs();
  std::string combine(int out, const std::string& acc, const std::string& v);
  std::string identity(int out) const;

  const kir::Program& p_;
  const kir::Kernel* k_;  // the kernel, or the group's part being written
  EmittedKernel& info_;
  std::ostringstream out_;
  int next_ = 0;
  std::string loop_tag_;  // tells apart the labels of a loop nest emitted twice (log-sum-exp's max)
  std::vector<std::string> values_;  // SSA name of each expr, once emitted in this body
  std::vector<std::string> base_;    // base pointer of each kernel-local buffer slot
};

std::string KernelEmitter::i64_affine(const kir::Affine& a) {
  if (a.b == 0) return std::to_string(a.c);
  const std::string m = tmp(), s = tmp();
  out_ << "  " << m << " = mul i64 %batch, " << a.b << "\n";
  out_ << "  " << s << " = add i64 " << m << ", " << a.c << "\n";
  return s;
}

std::string KernelEmitter::index(int axis) {
  const std::string v = tmp();
  out_ << "  " << v << " = load i64, ptr %i" << axis << "\n";
  return v;
}

// Element offset of an access at the current loop indices.
std::string KernelEmitter::address(int access) {
  const kir::Access& a = k_->accesses[access];
  std::string off = i64_affine(a.offset);
  for (int axis = 0; axis < k_->space.rank(); ++axis) {
    if (a.strides[axis] == kir::Affine{}) continue;
    const std::string stride = i64_affine(a.strides[axis]), i = index(axis), m = tmp(), s = tmp();
    out_ << "  " << m << " = mul i64 " << i << ", " << stride << "\n";
    out_ << "  " << s << " = add i64 " << off << ", " << m << "\n";
    off = s;
  }
  return off;
}

// A float as a bf16 (i16 bits) or f16 (half), rounded to nearest even. bf16: add 0x7FFF plus
// the lowest kept bit, then drop the low half (an overflow carries into the exponent: the
// largest values round to infinity); a NaN is made quiet first so that its dropped payload
// cannot turn it into an infinity. f16: LLVM's fptrunc, one vcvtps2ph with F16C.
std::string KernelEmitter::narrow(DType t, const std::string& x) {
  const std::string v = tmp();
  if (t == DType::f16) {
    out_ << "  " << v << " = fptrunc float " << x << " to half\n";
    return v;
  }
  const std::string b = tmp(), lsb = tmp(), odd = tmp(), up = tmp(), r = tmp(), nan = tmp(), q = tmp(), pick = tmp(), hi = tmp();
  out_ << "  " << b << " = bitcast float " << x << " to i32\n";
  out_ << "  " << lsb << " = lshr i32 " << b << ", 16\n";
  out_ << "  " << odd << " = and i32 " << lsb << ", 1\n";
  out_ << "  " << up << " = add i32 " << b << ", 32767\n";
  out_ << "  " << r << " = add i32 " << up << ", " << odd << "\n";
  out_ << "  " << nan << " = fcmp uno float " << x << ", 0.0\n";
  out_ << "  " << q << " = or i32 " << b << ", 4194304\n";  // 0x00400000: the quiet bit
  out_ << "  " << pick << " = select i1 " << nan << ", i32 " << q << ", i32 " << r << "\n";
  out_ << "  " << hi << " = lshr i32 " << pick << ", 16\n";
  out_ << "  " << v << " = trunc i32 " << hi << " to i16\n";
  return v;
}

// A bf16 (i16 bits) or f16 (half) as float, exactly.
std::string KernelEmitter::widen(DType t, const std::string& bits) {
  const std::string v = tmp();
  if (t == DType::f16) {
    out_ << "  " << v << " = fpext half " << bits << " to float\n";
    return v;
  }
  const std::string z = tmp(), s = tmp();
  out_ << "  " << z << " = zext i16 " << bits << " to i32\n";
  out_ << "  " << s << " = shl i32 " << z << ", 16\n";
  out_ << "  " << v << " = bitcast i32 " << s << " to float\n";
  return v;
}

std::string KernelEmitter::call(const char* fn, const std::string& x) {
  const std::string v = tmp();
  out_ << "  " << v << " = call float @" << fn << "(float " << x << ")\n";
  return v;
}

std::string KernelEmitter::unary(const Expr& e, const std::string& x) {
  const std::string v = tmp();
  const bool f = is_real(e.dtype);
  auto line = [&](const std::string& rhs) { out_ << "  " << v << " = " << rhs << "\n"; return v; };
  switch (e.op) {
    case Op::Neg: return line(f ? "fneg float " + x : "sub i32 0, " + x);
    case Op::Exp: return math().exp(x);
    case Op::Log: return math().log(x);
    case Op::Sqrt: return line("call float @llvm.sqrt.f32(float " + x + ")");
    case Op::Rsqrt: {
      const std::string s = call("llvm.sqrt.f32", x);
      return line("fdiv float 1.0, " + s);
    }
    case Op::Abs: return line(f ? "call float @llvm.fabs.f32(float " + x + ")"
                                : "call i32 @llvm.abs.i32(i32 " + x + ", i1 false)");
    case Op::Sign: {
      const std::string zero = f ? "0.0" : "0", gt = tmp(), lt = tmp(), a = tmp(), b = tmp();
      out_ << "  " << gt << " = " << (f ? "fcmp ogt float " : "icmp sgt i32 ") << x << ", " << zero << "\n";
      out_ << "  " << lt << " = " << (f ? "fcmp olt float " : "icmp slt i32 ") << x << ", " << zero << "\n";
      out_ << "  " << a << " = " << (f ? "uitofp i1 " : "zext i1 ") << gt << " to " << ty(e.dtype) << "\n";
      out_ << "  " << b << " = " << (f ? "uitofp i1 " : "zext i1 ") << lt << " to " << ty(e.dtype) << "\n";
      return line(std::string(f ? "fsub float " : "sub i32 ") + a + ", " + b);
    }
    case Op::Relu: {  // NaN stays NaN (as PyTorch's): "unordered or greater" keeps x
      const std::string c = tmp();
      out_ << "  " << c << " = fcmp ugt float " << x << ", 0.0\n";
      return line("select i1 " + c + ", float " + x + ", float 0.0");
    }
    case Op::Sigmoid: {
      const std::string n = tmp();
      out_ << "  " << n << " = fneg float " << x << "\n";
      const std::string ex = math().exp(n), d = tmp();
      out_ << "  " << d << " = fadd float 1.0, " << ex << "\n";
      return line("fdiv float 1.0, " + d);
    }
    case Op::Tanh: return math().tanh(x);
    case Op::Erf: return math().erf(x);
    case Op::Gelu: {
      const std::string s = tmp();
      out_ << "  " << s << " = fmul float " << x << ", " << float_literal(0.70710678118654752) << "\n";
      const std::string er = math().erf(s), a = tmp(), h = tmp();
      out_ << "  " << a << " = fadd float 1.0, " << er << "\n";
      out_ << "  " << h << " = fmul float " << x << ", 0.5\n";
      return line("fmul float " + h + ", " + a);
    }
    case Op::GeluGrad: return math().gelu_grad(x);
    case Op::Softplus: {  // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|
      const std::string ab = call("llvm.fabs.f32", x), n = tmp();
      out_ << "  " << n << " = fneg float " << ab << "\n";
      const std::string ex = math().exp(n), lp = math().log1p(ex), c = tmp(), m = tmp();
      out_ << "  " << c << " = fcmp ogt float " << x << ", 0.0\n";
      out_ << "  " << m << " = select i1 " << c << ", float " << x << ", float 0.0\n";
      return line("fadd float " + m + ", " + lp);
    }
    case Op::Cast: {
      const DType from = k_->exprs[e.args[0]].dtype;
      if (from == e.dtype) return x;
      if (e.dtype == DType::i32) return line("fptosi float " + x + " to i32");
      const std::string real = from == DType::i32 ? line("sitofp i32 " + x + " to float") : x;
      if (!is_half_float(e.dtype)) return real;  // bf16 and f16 values are exact in f32
      // To bf16 / f16: the nearest value of the format, held in float (a store then narrows
      // it exactly).
      return widen(e.dtype, narrow(e.dtype, real));
    }
    default:
      internal_check(false) << "no CPU lowering for unary " << op_name(e.op);
      return x;
  }
}

// max / min of floats: a where `a <fp> b` (ties to a) or a is NaN, else b. A NaN on either
// side is the result, as the reference and PyTorch; the plain ordered compare would drop a NaN
// in a, and LLVM's maxnum drops a NaN on either side.
std::string KernelEmitter::pick_nan_first(const char* fp, const std::string& a, const std::string& b,
                                          const std::string& v) {
  const std::string c = tmp(), n = tmp(), take = tmp();
  out_ << "  " << c << " = fcmp " << fp << " float " << a << ", " << b << "\n";
  out_ << "  " << n << " = fcmp uno float " << a << ", 0.0\n";
  out_ << "  " << take << " = or i1 " << c << ", " << n << "\n";
  out_ << "  " << v << " = select i1 " << take << ", float " << a << ", float " << b << "\n";
  return v;
}

std::string KernelEmitter::binary(const Expr& e, const std::string& a, const std::string& b) {
  const bool f = is_real(k_->exprs[e.args[0]].dtype);
  const std::string v = tmp(), T = ty(k_->exprs[e.args[0]].dtype);
  auto line = [&](const std::string& rhs) { out_ << "  " << v << " = " << rhs << "\n"; return v; };
  auto cmp = [&](const char* fp, const char* in) {
    const std::string c = tmp();
    out_ << "  " << c << " = " << (f ? "fcmp " : "icmp ") << (f ? fp : in) << " " << T << " " << a
         << ", " << b << "\n";
    return line(std::string(f ? "uitofp" : "zext") + " i1 " + c + " to " + T);
  };
  auto pick = [&](const char* fp, const char* in) {
    const std::string c = tmp();
    out_ << "  " << c << " = " << (f ? "fcmp " : "icmp ") << (f ? fp : in) << " " << T << " " << a
         << ", " << b << "\n";
    return line("select i1 " + c + ", " + T + " " + a + ", " + T + " " + b);
  };
  const std::string ab = " " + T + " " + a + ", " + b;
  switch (e.op) {
    case Op::Add: return line((f ? "fadd contract" : "add") + ab);
    case Op::Sub: return line((f ? "fsub contract" : "sub") + ab);
    case Op::Mul: return line((f ? "fmul contract" : "mul") + ab);
    case Op::Div: return line((f ? "fdiv" : "sdiv") + ab);
    case Op::Max: return f ? pick_nan_first("oge", a, b, v) : pick("oge", "sge");
    case Op::Min: return f ? pick_nan_first("ole", a, b, v) : pick("ole", "sle");
    case Op::Pow: return line("call float @llvm.pow.f32(float " + a + ", float " + b + ")");
    case Op::Less: return cmp("olt", "slt");
    case Op::LessEqual: return cmp("ole", "sle");
    case Op::Greater: return cmp("ogt", "sgt");
    case Op::GreaterEqual: return cmp("oge", "sge");
    case Op::Equal: return cmp("oeq", "eq");
    case Op::NotEqual: return cmp("une", "ne");
    default:
      internal_check(false) << "no CPU lowering for binary " << op_name(e.op);
      return v;
  }
}

// Philox 4x32-10 written out in the kernel, round for round as dsl/philox.cpp defines it, for
// element `index` of the stream %step: the seed is a constant, so the whole key schedule is too,
// and the loop vectoriser makes each 32 x 32 -> 64-bit multiply one vpmuludq over a vector of
// elements. (A call into the host per element kept such loops scalar: resnet-bn's dropout mask,
// 200k numbers, took 5-10 ms of a step.) The value: word index % 4 of the block, its top 24
// bits times 2^-24, exact in f32 as philox_uniform's double is.
std::string KernelEmitter::philox_uniform(uint64_t seed, const std::string& index) {
  const auto i32 = [](uint32_t v) { return std::to_string(static_cast<int32_t>(v)); };
  const auto trunc = [&](const std::string& wide) {
    const std::string t = tmp();
    out_ << "  " << t << " = trunc i64 " << wide << " to i32\n";
    return t;
  };
  const auto shift32 = [&](const std::string& wide) {
    const std::string t = tmp();
    out_ << "  " << t << " = lshr i64 " << wide << ", 32\n";
    return t;
  };
  const std::string block = tmp();
  out_ << "  " << block << " = lshr i64 " << index << ", 2\n";
  std::string c[4] = {trunc(block), trunc(shift32(block)), trunc("%step"), trunc(shift32("%step"))};
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  // hi and lo words of multiplier * word, as dsl/philox.cpp's mulhilo
  const auto mulhilo = [&](uint32_t multiplier, const std::string& word, std::string& hi, std::string& lo) {
    const std::string wide = tmp(), product = tmp();
    out_ << "  " << wide << " = zext i32 " << word << " to i64\n";
    out_ << "  " << product << " = mul nuw i64 " << wide << ", " << multiplier << "\n";
    hi = trunc(shift32(product));
    lo = trunc(product);
  };
  const auto xor3 = [&](const std::string& a, const std::string& b, uint32_t key) {
    const std::string t = tmp(), u = tmp();
    out_ << "  " << t << " = xor i32 " << a << ", " << b << "\n";
    out_ << "  " << u << " = xor i32 " << t << ", " << i32(key) << "\n";
    return u;
  };
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kPhiloxWeyl0;
      key1 += kPhiloxWeyl1;
    }
    std::string hi0, lo0, hi1, lo1;
    mulhilo(kPhiloxMul0, c[0], hi0, lo0);
    mulhilo(kPhiloxMul1, c[2], hi1, lo1);
    const std::string next0 = xor3(hi1, c[1], key0), next2 = xor3(hi0, c[3], key1);
    c[0] = next0;
    c[1] = lo1;
    c[2] = next2;
    c[3] = lo0;
  }
  const std::string lane = tmp();
  out_ << "  " << lane << " = and i64 " << index << ", 3\n";
  std::string word = c[0];
  for (int w = 1; w < 4; ++w) {
    const std::string is = tmp(), picked = tmp();
    out_ << "  " << is << " = icmp eq i64 " << lane << ", " << w << "\n";
    out_ << "  " << picked << " = select i1 " << is << ", i32 " << c[w] << ", i32 " << word << "\n";
    word = picked;
  }
  const std::string top = tmp(), as_float = tmp(), v = tmp();
  out_ << "  " << top << " = lshr i32 " << word << ", 8\n";
  out_ << "  " << as_float << " = uitofp i32 " << top << " to float\n";
  out_ << "  " << v << " = fmul float " << as_float << ", 0x3E70000000000000\n";  // 2^-24
  return v;
}

std::string KernelEmitter::expr(int id) {
  if (!values_[id].empty()) return values_[id];
  const Expr& e = k_->exprs[id];
  std::string v;
  switch (e.kind) {
    case Expr::Kind::constant:
      // A bf16 / f16 constant: its value rounded once, as the reference rounds it.
      v = is_real(e.dtype) ? float_literal(round_to(e.dtype, e.value)) : std::to_string(static_cast<int64_t>(e.value));
      break;
    case Expr::Kind::count: {
      const std::string n = i64_affine(e.count);
      v = tmp();
      out_ << "  " << v << " = sitofp i64 " << n << " to float\n";
      break;
    }
    case Expr::Kind::load: {
      const kir::Access& a = k_->accesses[e.access];
      const int slot = static_cast<int>(std::find(info_.buffers.begin(), info_.buffers.end(), a.buffer) -
                                        info_.buffers.begin());
      const std::string off = address(e.access), ptr = tmp();
      v = tmp();
      const std::string raw = is_half_float(e.dtype) ? tmp() : v;
      out_ << "  " << ptr << " = getelementptr inbounds " << storage(e.dtype) << ", ptr " << base_[slot] << ", i64 " << off << "\n";
      out_ << "  " << raw << " = load " << storage(e.dtype) << ", ptr " << ptr << ", align " << dtype_bytes(e.dtype) << "\n";
      if (is_half_float(e.dtype)) v = widen(e.dtype, raw);
      break;
    }
    case Expr::Kind::random: v = philox_uniform(e.seed, address(e.access)); break;
    case Expr::Kind::unary: v = unary(e, expr(e.args[0])); break;
    case Expr::Kind::binary: {
      const std::string a = expr(e.args[0]), b = expr(e.args[1]);
      v = binary(e, a, b);
      break;
    }
    case Expr::Kind::select: {
      const std::string c = expr(e.args[0]), a = expr(e.args[1]), b = expr(e.args[2]), t = tmp();
      const bool cf = is_real(k_->exprs[e.args[0]].dtype);
      out_ << "  " << t << " = " << (cf ? "fcmp une float " : "icmp ne i32 ") << c << ", " << (cf ? "0.0" : "0") << "\n";
      v = tmp();
      out_ << "  " << v << " = select i1 " << t << ", " << ty(e.dtype) << " " << a << ", " << ty(e.dtype) << " " << b << "\n";
      break;
    }
    case Expr::Kind::loop_index: {
      const std::string i = index(e.axis);
      v = tmp();
      out_ << "  " << v << " = trunc i64 " << i << " to i32\n";
      break;
    }
  }
  return values_[id] = v;
}

std::string KernelEmitter::identity(int out) const {
  const bool f = is_real(k_->exprs[k_->outputs[out].expr].dtype);
  const Op op = k_->outputs[out].reduce;
  if (op == Op::ReduceMax || op == Op::ReduceLogSumExp) return f ? "0xFFF0000000000000" : "-2147483648";
  return f ? "0.0" : "0";
}

std::string KernelEmitter::combine(int out, const std::string& acc, const std::string& v) {
  const DType t = k_->exprs[k_->outputs[out].expr].dtype;
  const std::string r = tmp();
  if (k_->outputs[out].reduce == Op::ReduceMax) {
    // The new value wins when strictly greater or NaN; a NaN acc then stays (nothing is greater),
    // so a NaN anywhere in the slice is the maximum, as the reference's.
    std::string c = tmp();
    out_ << "  " << c << " = " << (is_real(t) ? "fcmp ogt float " : "icmp sgt i32 ") << v << ", " << acc << "\n";
    if (is_real(t)) {
      const std::string n = tmp(), take = tmp();
      out_ << "  " << n << " = fcmp uno float " << v << ", 0.0\n";
      out_ << "  " << take << " = or i1 " << c << ", " << n << "\n";
      c = take;
    }
    out_ << "  " << r << " = select i1 " << c << ", " << ty(t) << " " << v << ", " << ty(t) << " " << acc << "\n";
  } else {
    // reassoc lets the vectoriser keep several partial sums; the order is still fixed by the
    // code, so a run is bitwise reproducible.
    out_ << "  " << r << " = " << (is_real(t) ? "fadd reassoc contract float " : "add i32 ") << acc << ", " << v << "\n";
  }
  return r;
}

void KernelEmitter::open_loop(int axis) {
  const bool split = axis == info_.split_axis;
  const std::string a = std::to_string(axis);
  const std::string end = split ? "%end" : k_->space[axis] == kBatch ? "%batch" : std::to_string(k_->space[axis]);
  const std::string L = "L" + a + loop_tag_;
  out_ << "  store i64 " << (split ? "%begin" : "0") << ", ptr %i" << a << "\n";
  out_ << "  br label %" << L << ".head\n" << L << ".head:\n";
  const std::string i = index(axis), c = tmp();
  out_ << "  " << c << " = icmp slt i64 " << i << ", " << end << "\n";
  out_ << "  br i1 " << c << ", label %" << L << ".body, label %" << L << ".exit\n" << L << ".body:\n";
}

void KernelEmitter::close_loop(int axis) {
  const std::string a = std::to_string(axis), i = index(axis), n = tmp(), L = "L" + a + loop_tag_;
  out_ << "  " << n << " = add i64 " << i << ", 1\n";
  out_ << "  store i64 " << n << ", ptr %i" << a << "\n";
  out_ << "  br label %" << L << ".head\n" << L << ".exit:\n";
  values_.assign(values_.size(), "");  // values of the loop body do not dominate what follows
}

void KernelEmitter::emit_store(const kir::Kernel::Output& o, const std::string& value) {
  const kir::Access& a = k_->accesses[o.access];
  const int slot = static_cast<int>(std::find(info_.buffers.begin(), info_.buffers.end(), a.buffer) -
                                    info_.buffers.begin());
  const DType t = k_->exprs[o.expr].dtype;
  const std::string off = address(o.access), ptr = tmp();
  const std::string stored = is_half_float(t) ? narrow(t, value) : value;
  out_ << "  " << ptr << " = getelementptr inbounds " << storage(t) << ", ptr " << base_[slot] << ", i64 " << off << "\n";
  out_ << "  store " << storage(t) << " " << stored << ", ptr " << ptr << ", align " << dtype_bytes(t) << "\n";
}

// Outputs after the reductions are producers fused into this kernel whose values other steps read
// too (multi-output fusion); they are stored at every point of the loop space.
void KernelEmitter::store_side_outputs() {
  for (size_t i = k_->reductions(); i < k_->outputs.size(); ++i) emit_store(k_->outputs[i], expr(k_->outputs[i].expr));
}

// The reduced axes that end the loop nest (a trailing block: the classes of a row-wise
// softmax, H and W of a convolution's bias gradient) accumulate in a register. Any reduced axes
// before them (the batch of a bias gradient) accumulate in the output itself, in the natural
// loop order, so column sums stay contiguous and vectorisable: the first such iteration
// initialises the output, the last one scales it for a mean. A log-sum-exp keeps two values
// (running maximum and scaled sum) that one output cannot hold, so its loops are reordered to
// put every reduced axis in the register block.
void KernelEmitter::emit_reduction() {
  const int rank = k_->space.rank(), nred = k_->reductions();
  bool lse = false;
  for (int j = 0; j < nred; ++j) lse = lse || k_->outputs[j].reduce == Op::ReduceLogSumExp;
  auto reduced = [&](int a) {
    return std::find(k_->reduce_axes.begin(), k_->reduce_axes.end(), a) != k_->reduce_axes.end();
  };
  std::vector<int> outer, inner;  // loop order: outer axes, then the register block
  int block = rank;  // without reordering, the trailing block of reduced axes is [block, rank)
  while (!lse && block > 0 && reduced(block - 1)) --block;
  for (int a = 0; a < rank; ++a) {
    const bool in_block = lse ? reduced(a) : a >= block;
    (in_block ? inner : outer).push_back(a);
  }
  kir::Affine count{1, 0};
  for (int a : k_->reduce_axes)
    count = k_->space[a] == kBatch ? kir::Affine{0, count.c} : kir::Affine{count.c * k_->space[a], count.b * k_->space[a]};
  auto type_of = [&](int j) { return k_->exprs[k_->outputs[j].expr].dtype; };
  auto acc = [](int j) { return "%acc" + std::to_string(j); };
  auto is_lse = [&](int j) { return k_->outputs[j].reduce == Op::ReduceLogSumExp; };

  for (int a : outer) open_loop(a);
  std::vector<std::string> value(nred);
  if (!inner.empty()) {
    for (int j = 0; j < nred; ++j) {
      out_ << "  store " << ty(type_of(j)) << " " << identity(j) << ", ptr " << acc(j) << "\n";
      if (is_lse(j)) out_ << "  store float 0.0, ptr " << acc(j) << "s\n";
    }
    // A log-sum-exp takes two passes over its block: the maximum M (NaN-propagating), then the
    // sum of exp(x - M). Both loops vectorise, the block's values are still in cache for the
    // second, and its producers are recomputed there (an online maximum kept each exp in a
    // chain from one element to the next, and scalar).
    std::vector<std::string> top(nred);
    if (lse) {
      loop_tag_ = "m";
      for (int a : inner) open_loop(a);
      for (int j = 0; j < nred; ++j) {
        if (!is_lse(j)) continue;
        const std::string x = expr(k_->outputs[j].expr), old = tmp(), m = tmp();
        out_ << "  " << old << " = load float, ptr " << acc(j) << "\n";
        out_ << "  " << m << " = call float @llvm.maximum.f32(float " << old << ", float " << x << ")\n";
        out_ << "  store float " << m << ", ptr " << acc(j) << "\n";
      }
      for (auto a = inner.rbegin(); a != inner.rend(); ++a) close_loop(*a);
      loop_tag_.clear();
      for (int j = 0; j < nred; ++j)
        if (is_lse(j)) out_ << "  " << (top[j] = tmp()) << " = load float, ptr " << acc(j) << "\n";
    }
    for (int a : inner) open_loop(a);
    std::vector<std::string> v(nred);
    for (int j = 0; j < nred; ++j) v[j] = expr(k_->outputs[j].expr);
    store_side_outputs();
    for (int j = 0; j < nred; ++j) {
      const std::string old = tmp();
      if (is_lse(j)) {
        const std::string d = tmp(), s = tmp();
        out_ << "  " << d << " = fsub float " << v[j] << ", " << top[j] << "\n";
        const std::string e = math().exp(d);
        out_ << "  " << old << " = load float, ptr " << acc(j) << "s\n";
        out_ << "  " << s << " = fadd reassoc contract float " << old << ", " << e << "\n";
        out_ << "  store float " << s << ", ptr " << acc(j) << "s\n";
      } else {
        out_ << "  " << old << " = load " << ty(type_of(j)) << ", ptr " << acc(j) << "\n";
        const std::string sum = combine(j, old, v[j]);
        out_ << "  store " << ty(type_of(j)) << " " << sum << ", ptr " << acc(j) << "\n";
      }
    }
    for (auto a = inner.rbegin(); a != inner.rend(); ++a) close_loop(*a);
    for (int j = 0; j < nred; ++j) {
      value[j] = tmp();
      out_ << "  " << value[j] << " = load " << ty(type_of(j)) << ", ptr " << acc(j) << "\n";
      if (is_lse(j)) {  // M + log(sum of exp(x - M)); M = ±inf is the result itself
        const std::string s = tmp(), r = tmp(), inf = tmp(), pick = tmp();
        out_ << "  " << s << " = load float, ptr " << acc(j) << "s\n";
        const std::string l = math().log(s);
        out_ << "  " << r << " = fadd float " << value[j] << ", " << l << "\n";
        out_ << "  " << inf << " = call float @llvm.fabs.f32(float " << value[j] << ")\n";
        out_ << "  " << pick << " = fcmp oeq float " << inf << ", 0x7FF0000000000000\n";
        value[j] = tmp();
        out_ << "  " << value[j] << " = select i1 " << pick << ", float " << top[j] << ", float " << r << "\n";
      }
    }
  } else {
    for (int j = 0; j < nred; ++j) value[j] = expr(k_->outputs[j].expr);
    store_side_outputs();
  }
  // first / last: at the first / last iteration of every reduced axis outside the block.
  std::string first = "true", last = "true";
  for (int a : k_->reduce_axes) {
    if (std::find(outer.begin(), outer.end(), a) == outer.end()) continue;
    const std::string i = index(a), f = tmp(), l = tmp(), f2 = tmp(), l2 = tmp(), m = tmp();
    const std::string ext = k_->space[a] == kBatch ? "%batch" : std::to_string(k_->space[a]);
    out_ << "  " << f << " = icmp eq i64 " << i << ", 0\n";
    out_ << "  " << m << " = sub i64 " << ext << ", 1\n";
    out_ << "  " << l << " = icmp eq i64 " << i << ", " << m << "\n";
    out_ << "  " << f2 << " = and i1 " << first << ", " << f << "\n";
    out_ << "  " << l2 << " = and i1 " << last << ", " << l << "\n";
    first = f2, last = l2;
  }
  for (int j = 0; j < nred; ++j) {
    const kir::Kernel::Output& o = k_->outputs[j];
    const DType t = type_of(j);
    std::string result = value[j];
    if (first != "true") {
      const kir::Access& a = k_->accesses[o.access];
      const int slot = static_cast<int>(std::find(info_.buffers.begin(), info_.buffers.end(), a.buffer) - info_.buffers.begin());
      const std::string off = address(o.access), ptr = tmp(), old = tmp(), pick = tmp();
      out_ << "  " << ptr << " = getelementptr inbounds " << ty(t) << ", ptr " << base_[slot] << ", i64 " << off << "\n";
      out_ << "  " << old << " = load " << ty(t) << ", ptr " << ptr << ", align 4\n";
      const std::string comb = combine(j, old, value[j]);
      out_ << "  " << pick << " = select i1 " << first << ", " << ty(t) << " " << value[j] << ", " << ty(t) << " " << comb << "\n";
      result = pick;
    }
    if (o.reduce == Op::ReduceMean) {
      const std::string n = i64_affine(count), nf = tmp(), scaled = tmp(), fin = tmp();
      out_ << "  " << nf << " = sitofp i64 " << n << " to float\n";
      out_ << "  " << scaled << " = fdiv float " << result << ", " << nf << "\n";
      out_ << "  " << fin << " = select i1 " << last << ", float " << scaled << ", float " << result << "\n";
      result = fin;
    }
    emit_store(o, result);
  }
  for (auto a = outer.rbegin(); a != outer.rend(); ++a) close_loop(*a);
}

// A group kernel: one function over [begin, end) of the parts' concatenated points. Each part
// loops over its share of that range, as one flat counted loop whose index is split back into
// the part's loop indices (the grouping pass has coalesced what it could: usually one axis).
std::string KernelEmitter::emit_group() {
  const kir::Kernel& group = *k_;
  int rank = 0;
  for (const kir::Kernel& part : group.parts) {
    rank = std::max(rank, part.space.rank());
    for (const auto& a : part.accesses)
      if (a.buffer >= 0 && std::find(info_.buffers.begin(), info_.buffers.end(), a.buffer) == info_.buffers.end())
        info_.buffers.push_back(a.buffer);
  }
  info_.symbol = group.name;
  const std::vector<kir::Affine> starts = kir::segment_starts(group);
  info_.flat = true;
  info_.points = starts.back();
  out_ << "; " << group.name << ": a group of " << group.parts.size() << " parts over one flat range, graph nodes";
  for (int n : group.nodes) out_ << " %" << n;
  out_ << "\ndefine void @" << group.name
       << "(ptr noalias nocapture readonly %args, i64 %batch, i64 %begin, i64 %end, i64 %step) {\nentry:\n";
  for (int a = 0; a < std::max(rank, 1); ++a) out_ << "  %i" << a << " = alloca i64\n";
  out_ << "  %p = alloca i64\n";
  for (size_t s = 0; s < info_.buffers.size(); ++s) {
    const std::string pp = tmp(), b = "%b" + std::to_string(s);
    out_ << "  " << pp << " = getelementptr inbounds ptr, ptr %args, i64 " << s << "\n";
    out_ << "  " << b << " = load ptr, ptr " << pp << "\n";
    base_.push_back(b);
  }
  for (size_t j = 0; j < group.parts.size(); ++j) {
    k_ = &group.parts[j];
    values_.assign(k_->exprs.size(), "");
    emit_part(static_cast<int>(j), starts[j], starts[j + 1]);
  }
  k_ = &group;
  out_ << "  ret void\n}\n\n";
  return out_.str();
}

// Part j covers [start, end) of the flat range: here [max(begin, start), min(end, end_j)).
// The range is walked a row (the last axis) at a time: the loop indices come from dividing
// the flat index once per row, and the row itself is a plain counted loop the vectoriser
// takes, where dividing at every point (a 64-bit division per axis) kept it scalar.
void KernelEmitter::emit_part(int j, const kir::Affine& start, const kir::Affine& end) {
  const std::string P = "%P" + std::to_string(j), L = "P" + std::to_string(j);
  const std::string s = i64_affine(start), e = i64_affine(end);
  const std::string c1 = tmp(), m1 = tmp(), lo = tmp(), c2 = tmp(), m2 = tmp(), hi = tmp();
  out_ << "  " << c1 << " = icmp sgt i64 %begin, " << s << "\n";
  out_ << "  " << m1 << " = select i1 " << c1 << ", i64 %begin, i64 " << s << "\n";
  out_ << "  " << lo << " = sub i64 " << m1 << ", " << s << "\n";
  out_ << "  " << c2 << " = icmp slt i64 %end, " << e << "\n";
  out_ << "  " << m2 << " = select i1 " << c2 << ", i64 %end, i64 " << e << "\n";
  out_ << "  " << hi << " = sub i64 " << m2 << ", " << s << "\n";
  out_ << "  store i64 " << lo << ", ptr %p\n";
  out_ << "  br label " << P << ".head\n" << L << ".head:\n";
  const std::string p = tmp(), c = tmp();
  out_ << "  " << p << " = load i64, ptr %p\n";
  out_ << "  " << c << " = icmp slt i64 " << p << ", " << hi << "\n";
  out_ << "  br i1 " << c << ", label " << P << ".row, label " << P << ".exit\n" << L << ".row:\n";
  const int rank = k_->space.rank();
  const int last = rank - 1;
  // The row's first index along the last axis (`from`) and where the row ends (`to`).
  std::string from = p, to = hi;
  if (rank == 0) {
    out_ << "  store i64 " << p << ", ptr %i0\n";  // a scalar part: one point, no index read
    from = p;
  } else if (rank > 1) {
    std::string rest = p;  // row-major: the last axis varies fastest
    for (int a = last; a >= 0; --a) {
      if (a == 0) {
        out_ << "  store i64 " << rest << ", ptr %i0\n";
        break;
      }
      const std::string ext = k_->space[a] == kBatch ? "%batch" : std::to_string(k_->space[a]);
      const std::string r = tmp(), q = tmp();
      out_ << "  " << r << " = urem i64 " << rest << ", " << ext << "\n";
      if (a != last) out_ << "  store i64 " << r << ", ptr %i" << a << "\n";
      else from = r;
      out_ << "  " << q << " = udiv i64 " << rest << ", " << ext << "\n";
      rest = q;
    }
    const std::string ext = k_->space[last] == kBatch ? "%batch" : std::to_string(k_->space[last]);
    const std::string left = tmp(), want = tmp(), cut = tmp();
    to = tmp();
    out_ << "  " << left << " = sub i64 " << hi << ", " << p << "\n";
    out_ << "  " << want << " = add i64 " << from << ", " << left << "\n";
    out_ << "  " << cut << " = icmp slt i64 " << want << ", " << ext << "\n";
    out_ << "  " << to << " = select i1 " << cut << ", i64 " << want << ", i64 " << ext << "\n";
  }
  const std::string iv = "%i" + std::to_string(std::max(last, 0));
  out_ << "  store i64 " << from << ", ptr " << iv << "\n";
  out_ << "  br label " << P << ".in\n" << L << ".in:\n";
  const std::string i = tmp(), ci = tmp();
  out_ << "  " << i << " = load i64, ptr " << iv << "\n";
  out_ << "  " << ci << " = icmp slt i64 " << i << ", " << (rank == 0 ? hi : to) << "\n";
  out_ << "  br i1 " << ci << ", label " << P << ".body, label " << P << ".next\n" << L << ".body:\n";
  for (const auto& o : k_->outputs) emit_store(o, expr(o.expr));
  values_.assign(values_.size(), "");  // the body's values do not dominate what follows
  const std::string i2 = tmp(), n = tmp();
  out_ << "  " << i2 << " = load i64, ptr " << iv << "\n";
  out_ << "  " << n << " = add i64 " << i2 << ", 1\n";
  out_ << "  store i64 " << n << ", ptr " << iv << "\n";
  out_ << "  br label " << P << ".in\n" << L << ".next:\n";
  // The next row starts where this one ended: p + (to - from) points on.
  const std::string i3 = tmp(), done = tmp(), np = tmp();
  out_ << "  " << i3 << " = load i64, ptr " << iv << "\n";
  out_ << "  " << done << " = sub i64 " << i3 << ", " << from << "\n";
  out_ << "  " << np << " = add i64 " << p << ", " << done << "\n";
  out_ << "  store i64 " << np << ", ptr %p\n";
  out_ << "  br label " << P << ".head\n" << L << ".exit:\n";
}

std::string KernelEmitter::emit() {
  internal_check(k_->finishers.empty()) << k_->name << ": reduction finishers are the GPU's alone (jit/passes/reduction_finishers.h)";
  if (!k_->parts.empty()) return emit_group();
  for (const auto& a : k_->accesses)
    if (a.buffer >= 0 && std::find(info_.buffers.begin(), info_.buffers.end(), a.buffer) == info_.buffers.end())
      info_.buffers.push_back(a.buffer);
  info_.symbol = k_->name;
  info_.space = k_->space;
  const int rank = k_->space.rank();
  // Threads split the first axis that is not reduced: each then owns its outputs outright.
  for (int a = 0; a < rank && info_.split_axis < 0; ++a)
    if (std::find(k_->reduce_axes.begin(), k_->reduce_axes.end(), a) == k_->reduce_axes.end()) info_.split_axis = a;
  values_.assign(k_->exprs.size(), "");

  out_ << "; " << k_->name << ": loop over " << k_->space.str() << ", graph nodes";
  for (int n : k_->nodes) out_ << " %" << n;
  out_ << "\ndefine void @" << k_->name
       << "(ptr noalias nocapture readonly %args, i64 %batch, i64 %begin, i64 %end, i64 %step) {\nentry:\n";
  for (int a = 0; a < rank; ++a) out_ << "  %i" << a << " = alloca i64\n";
  for (int j = 0; j < k_->reductions(); ++j) {
    out_ << "  %acc" << j << " = alloca " << ty(k_->exprs[k_->outputs[j].expr].dtype) << "\n";
    if (k_->outputs[j].reduce == Op::ReduceLogSumExp) out_ << "  %acc" << j << "s = alloca float\n";
  }
  for (size_t s = 0; s < info_.buffers.size(); ++s) {
    const std::string pp = tmp(), b = "%b" + std::to_string(s);
    out_ << "  " << pp << " = getelementptr inbounds ptr, ptr %args, i64 " << s << "\n";
    out_ << "  " << b << " = load ptr, ptr " << pp << "\n";
    base_.push_back(b);
  }
  if (k_->reduce != Op::Constant) {
    emit_reduction();
  } else {
    for (int a = 0; a < rank; ++a) open_loop(a);
    for (const auto& o : k_->outputs) emit_store(o, expr(o.expr));
    for (int a = rank - 1; a >= 0; --a) close_loop(a);
  }
  out_ << "  ret void\n}\n\n";
  return out_.str();
}

}  // namespace

std::string emit_llvm_module(const kir::Program& program, std::vector<EmittedKernel>* kernels) {
  std::string text =
      "; towerjit CPU kernels\n"
      "declare float @llvm.sqrt.f32(float)\n"
      "declare float @llvm.fabs.f32(float)\n"
      "declare float @llvm.maximum.f32(float, float)\n"
      "declare float @llvm.pow.f32(float, float)\n"
      "declare i32 @llvm.abs.i32(i32, i1)\n";
  text += kIrMathDeclarations;
  text += "\n";
  kernels->clear();
  for (const auto& kernel : program.kernels) {
    EmittedKernel info;
    const kir::Kernel k = coalesce_axes(kernel);  // long contiguous inner loops to vectorise
    text += KernelEmitter(program, k, info).emit();
    kernels->push_back(std::move(info));
  }
  return text;
}

}  // namespace towerjit::cpujit
