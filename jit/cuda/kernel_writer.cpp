// Expression bodies as C. Each op is written to compute exactly what the CPU emitter
// (jit/cpu/llvm_emitter.cpp) computes: the same formulas in the same order, the same
// comparison semantics for NaN, truncating casts, and Philox keyed by the row-major index.
#include "jit/cuda/kernel_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "dsl/error.h"
#include "dsl/half_float.h"

namespace towerjit::cuda::detail {

using kir::Expr;

std::string float_literal(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "TJ_NAN";
  if (std::isinf(f)) return f > 0 ? "TJ_INF" : "(-TJ_INF)";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return (f < 0 ? "(" + s + "f)" : s + "f");
}

std::vector<int> range(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

Point point_of(int rank) {
  Point pt;
  for (int a = 0; a < rank; ++a) pt.index.push_back("i" + std::to_string(a));
  return pt;
}

int stored_expr(const kir::Kernel& k, size_t output) {
  const int id = k.outputs[output].expr;
  const Expr& e = k.exprs[id];
  if (is_half_float(e.dtype) && e.kind == Expr::Kind::unary && e.op == Op::Cast && k.exprs[e.args[0]].dtype == DType::f32)
    return e.args[0];
  return id;
}

std::vector<int> output_exprs(const kir::Kernel& k, size_t first) {
  std::vector<int> roots;
  for (size_t i = first; i < k.outputs.size(); ++i) roots.push_back(stored_expr(k, i));
  return roots;
}

std::string narrow(DType t, const std::string& x) {
  if (t == DType::bf16) return "__float2bfloat16_rn(" + x + ")";
  if (t == DType::f16) return "__float2half_rn(" + x + ")";
  return x;
}

std::string widen(DType t, const std::string& x) {
  if (t == DType::bf16) return "__bfloat162float(" + x + ")";
  if (t == DType::f16) return "__half2float(" + x + ")";
  return x;
}

void store_outputs(std::ostream& out, const KernelWriter& w, const std::string& ind, const Point& pt, size_t first) {
  const kir::Kernel& k = w.kernel();
  for (size_t i = first; i < k.outputs.size(); ++i)
    out << ind << w.buffer(k.outputs[i].access) << "[" << w.address(k.outputs[i].access, pt) << "] = "
        << narrow(w.buffer_dtype(k.outputs[i].access), w.value(stored_expr(k, i), pt)) << ";\n";
}

bool uses_half_floats(const kir::Program& p) {
  for (const kir::Buffer& b : p.buffers)
    if (is_half_float(b.dtype)) return true;
  for (const kir::Kernel& k : p.kernels)
    for (const kir::Kernel* part : k.bodies())
      for (const kir::Expr& e : part->exprs)
        if (is_half_float(e.dtype)) return true;  // a cast to bf16 fused between f32 loads and stores
  return false;
}

KernelWriter::KernelWriter(const kir::Program& p, const kir::Kernel& k, EmittedKernel& info)
    : p_(p), k_(k), info_(info) {
  for (const auto& a : k_.accesses)
    if (a.buffer >= 0 && std::find(info_.buffers.begin(), info_.buffers.end(), a.buffer) == info_.buffers.end())
      info_.buffers.push_back(a.buffer);
  // resize, not assign: the parts of a group kernel share one parameter list (`info`).
  info_.written.resize(info_.buffers.size(), false);
  for (const auto& o : k_.outputs) {
    const int b = k_.accesses[o.access].buffer;
    info_.written[std::find(info_.buffers.begin(), info_.buffers.end(), b) - info_.buffers.begin()] = true;
  }
}

std::string KernelWriter::params() const {
  std::string s;
  for (size_t i = 0; i < info_.buffers.size(); ++i) {
    const kir::Buffer& b = p_.buffers[info_.buffers[i]];
    s += std::string(info_.written[i] ? "" : "const ") + storage_type(b.dtype) + "* __restrict__ b" +
         std::to_string(info_.buffers[i]) + ", ";
  }
  return s + "tj_i64 batch, const tj_u64* __restrict__ step_slot";
}

std::string KernelWriter::prologue() { return "  const tj_u64 step = *step_slot;  // read, not passed: a CUDA graph replays\n"; }

std::string KernelWriter::extent(int axis) const {
  return k_.space[axis] == kBatch ? "batch" : std::to_string(k_.space[axis]);
}

std::string KernelWriter::affine(const kir::Affine& a) {
  if (a.b == 0) return std::to_string(a.c);
  const std::string bb = a.b == 1 ? "batch" : std::to_string(a.b) + " * batch";
  if (a.c == 0) return a.b == 1 ? bb : "(" + bb + ")";
  return "(" + std::to_string(a.c) + " + " + bb + ")";
}

kir::Affine KernelWriter::count(const std::vector<int>& axes) const {
  kir::Affine n{1, 0};
  for (int a : axes)
    n = k_.space[a] == kBatch ? kir::Affine{0, n.c} : kir::Affine{n.c * k_.space[a], n.b * k_.space[a]};
  return n;
}

std::string KernelWriter::address(int access, const Point& pt) const {
  const kir::Access& a = k_.accesses[access];
  std::string s;
  for (int axis = 0; axis < k_.space.rank(); ++axis) {
    if (a.strides[axis] == kir::Affine{}) continue;
    s += (s.empty() ? "" : " + ") + pt.index[axis];
    if (!(a.strides[axis] == kir::Affine{1, 0})) s += " * " + affine(a.strides[axis]);
  }
  if (!(a.offset == kir::Affine{}) || s.empty()) s += (s.empty() ? "" : " + ") + affine(a.offset);
  return s;
}

std::string KernelWriter::buffer(int access) const {
  return "b" + std::to_string(k_.accesses[access].buffer);
}

std::string KernelWriter::storage_type(DType t) {
  switch (t) {
    case DType::bf16: return "__nv_bfloat16";
    case DType::f16: return "__half";
    case DType::i32: return "int";
    case DType::f32: break;
  }
  return "float";
}

DType KernelWriter::buffer_dtype(int access) const {
  return p_.buffers[k_.accesses[access].buffer].dtype;
}

std::vector<int> KernelWriter::needed(const std::vector<int>& roots) const {
  std::set<int> seen;
  std::vector<int> stack = roots;
  while (!stack.empty()) {
    const int e = stack.back();
    stack.pop_back();
    if (!seen.insert(e).second) continue;
    for (int a : k_.exprs[e].args) stack.push_back(a);
  }
  return {seen.begin(), seen.end()};  // ascending: arguments before their users
}

void KernelWriter::body(std::ostream& out, const std::string& indent, const Point& pt,
                        const std::vector<int>& roots) const {
  out << indent << "TJ_WORK(1);\n";  // a point: the emulated GPU counts each thread's serial work
  for (int id : needed(roots))
    out << indent << "const " << type(k_.exprs[id].dtype) << " " << value(id, pt) << " = "
        << rhs(id, pt) << ";\n";
}

void KernelWriter::decompose(std::ostream& out, const std::string& indent, const std::string& flat,
                             const std::vector<int>& axes, const std::string& temp) const {
  if (axes.empty()) return;
  if (axes.size() == 1) {
    out << indent << "const tj_i64 i" << axes[0] << " = " << flat << ";\n";
    return;
  }
  out << indent << "tj_i64 " << temp << " = " << flat << ";\n";
  for (size_t j = axes.size() - 1; j > 0; --j) {
    const std::string n = extent(axes[j]);
    out << indent << "const tj_i64 i" << axes[j] << " = " << temp << " % " << n << ";\n";
    out << indent << temp << " /= " << n << ";\n";
  }
  out << indent << "const tj_i64 i" << axes[0] << " = " << temp << ";\n";
}

std::string KernelWriter::rhs(int id, const Point& pt) const {
  const Expr& e = k_.exprs[id];
  auto arg = [&](int i) { return value(e.args[i], pt); };
  switch (e.kind) {
    case Expr::Kind::constant:  // a bf16 / f16 constant: its value rounded once, as the reference rounds it
      return is_real(e.dtype) ? float_literal(round_to(e.dtype, e.value)) : std::to_string(static_cast<int64_t>(e.value));
    case Expr::Kind::count: return "(float)" + affine(e.count);
    case Expr::Kind::loop_index: return "(int)" + pt.index[e.axis];
    case Expr::Kind::load: {
      auto it = pt.loaded.find(e.access);
      if (it != pt.loaded.end()) return it->second;
      return widen(buffer_dtype(e.access), buffer(e.access) + "[" + address(e.access, pt) + "]");  // exact
    }
    case Expr::Kind::random:
      return "tj_philox_uniform(" + std::to_string(e.seed) + "ull, step, (tj_u64)(" +
             address(e.access, pt) + "))";
    case Expr::Kind::unary: return unary(e, arg(0));
    case Expr::Kind::binary: return binary(e, arg(0), arg(1));
    case Expr::Kind::select: {
      const bool cf = is_real(k_.exprs[e.args[0]].dtype);
      return arg(0) + (cf ? " != 0.0f ? " : " != 0 ? ") + arg(1) + " : " + arg(2);
    }
  }
  return "";
}

std::string KernelWriter::unary(const Expr& e, const std::string& x) const {
  const bool f = is_real(e.dtype);
  switch (e.op) {
    case Op::Neg: return "-" + x;
    case Op::Exp: return "expf(" + x + ")";
    case Op::Log: return "logf(" + x + ")";
    case Op::Sqrt: return "sqrtf(" + x + ")";
    case Op::Rsqrt: return "1.0f / sqrtf(" + x + ")";  // not rsqrtf: the CPU divides exactly
    case Op::Abs: return f ? "fabsf(" + x + ")" : "abs(" + x + ")";
    case Op::Sign:
      return f ? "(" + x + " > 0.0f ? 1.0f : 0.0f) - (" + x + " < 0.0f ? 1.0f : 0.0f)"
               : "(" + x + " > 0) - (" + x + " < 0)";
    case Op::Relu: return "!(" + x + " <= 0.0f) ? " + x + " : 0.0f";  // NaN stays NaN
    case Op::Sigmoid: return "1.0f / (1.0f + expf(-" + x + "))";
    case Op::Tanh: return "tanhf(" + x + ")";
    case Op::Erf: return "erff(" + x + ")";
    case Op::Gelu: return x + " * 0.5f * (1.0f + erff(" + x + " * " + float_literal(0.70710678118654752) + "))";
    case Op::GeluGrad:  // Phi(x) + x phi(x)
      return "0.5f * (1.0f + erff(" + x + " * " + float_literal(0.70710678118654752) + ")) + " + x + " * " +
             float_literal(0.39894228040143268) + " * expf(-0.5f * " + x + " * " + x + ")";
    case Op::Softplus:  // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|
      return "(" + x + " > 0.0f ? " + x + " : 0.0f) + log1pf(expf(-fabsf(" + x + ")))";
    case Op::Cast: {
      const DType from = k_.exprs[e.args[0]].dtype;
      if (from == e.dtype) return x;
      if (e.dtype == DType::i32) return "(int)" + x;  // a real -> i32 truncates
      const std::string real = from == DType::i32 ? "(float)" + x : x;  // bf16 / f16 values are exact in float
      // To bf16 / f16: the nearest value of the format (ties to even), held in float; a store
      // then narrows it again, exactly.
      return is_half_float(e.dtype) ? widen(e.dtype, narrow(e.dtype, real)) : real;
    }
    default:
      internal_check(false) << "no CUDA lowering for unary " << op_name(e.op);
      return x;
  }
}

std::string KernelWriter::binary(const Expr& e, const std::string& a, const std::string& b) const {
  const bool f = is_real(k_.exprs[e.args[0]].dtype);
  const std::string one = f ? " ? 1.0f : 0.0f" : " ? 1 : 0";
  auto cmp = [&](const char* op) { return a + " " + op + " " + b + one; };
  switch (e.op) {
    case Op::Add: return a + " + " + b;
    case Op::Sub: return a + " - " + b;
    case Op::Mul: return a + " * " + b;
    case Op::Div: return a + " / " + b;
    // Ties and a NaN a give a, a NaN b fails the compare: a NaN on either side is the result,
    // as the CPU backend's and the reference's (fmaxf / fminf would drop it).
    case Op::Max: return "(" + a + " >= " + b + " || " + a + " != " + a + ") ? " + a + " : " + b;
    case Op::Min: return "(" + a + " <= " + b + " || " + a + " != " + a + ") ? " + a + " : " + b;
    case Op::Pow: return "powf(" + a + ", " + b + ")";
    case Op::Less: return cmp("<");
    case Op::LessEqual: return cmp("<=");
    case Op::Greater: return cmp(">");
    case Op::GreaterEqual: return cmp(">=");
    case Op::Equal: return cmp("==");
    case Op::NotEqual: return cmp("!=");  // true for NaN, as the CPU's une
    default:
      internal_check(false) << "no CUDA lowering for binary " << op_name(e.op);
      return a;
  }
}

}  // namespace towerjit::cuda::detail
