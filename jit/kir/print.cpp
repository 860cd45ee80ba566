// The text form of the kernel IR: what golden fusion tests compare and dumps show.
#include <sstream>

#include "jit/kir/kernel_ir.h"

namespace towerjit::kir {
namespace {

std::string affine_str(const Affine& a) {
  if (a.b == 0) return std::to_string(a.c);
  std::string s = (a.b == 1 ? "" : std::to_string(a.b) + "*") + "B";
  if (a.c != 0) s += "+" + std::to_string(a.c);
  return s;
}

std::string access_str(const Access& a) {
  std::string s = a.buffer < 0 ? "index[" : "b" + std::to_string(a.buffer) + "[";
  bool any = false;
  for (size_t k = 0; k < a.strides.size(); ++k) {
    if (a.strides[k] == Affine{}) continue;
    s += (any ? " + i" : "i") + std::to_string(k);
    if (!(a.strides[k] == Affine{1, 0})) s += "*" + affine_str(a.strides[k]);
    any = true;
  }
  if (!(a.offset == Affine{}) || !any) s += (any ? " + " : "") + affine_str(a.offset);
  return s + "]";
}

std::string expr_str(const Kernel& k, const Expr& e) {
  std::ostringstream out;
  switch (e.kind) {
    case Expr::Kind::load: out << "load " << access_str(k.accesses[e.access]); break;
    case Expr::Kind::constant: out << "const " << e.value; break;
    case Expr::Kind::count: out << "count " << affine_str(e.count); break;
    case Expr::Kind::loop_index: out << "index i" << e.axis; break;
    case Expr::Kind::random:
      out << "random seed=" << e.seed << " " << access_str(k.accesses[e.access]);
      break;
    default:
      out << op_name(e.op);
      for (size_t i = 0; i < e.args.size(); ++i) out << (i ? ", e" : " e") << e.args[i];
  }
  return out.str();
}

const char* buffer_kind(Buffer::Kind kind) {
  switch (kind) {
    case Buffer::Kind::input: return "input";
    case Buffer::Kind::variable: return "variable";
    case Buffer::Kind::constant: return "constant";
    default: return "temp";
  }
}

}  // namespace

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::bias: return "bias";
    case Epilogue::bias_relu: return "bias+relu";
    default: return "none";
  }
}

// A group prints as "kernel k7_group of 3 parts", then each part as a kernel headed "part"; a
// reduction's finishers follow it, each headed "finisher".
std::string to_string(const Program& program, const Kernel& k) {
  std::ostringstream out;
  if (!k.parts.empty()) {
    out << "kernel " << k.name << " of " << k.parts.size() << " parts\n";
    for (const Kernel& part : k.parts) out << "part" << to_string(program, part).substr(6);
    return out.str();
  }
  out << "kernel " << k.name << " over " << k.space.str();
  if (k.reduce != Op::Constant) {
    // Sibling reductions: each reduced output's op, in the order of the stores.
    for (int i = 0; i < k.reductions(); ++i) out << (i ? ", " : " ") << op_name(k.outputs[i].reduce);
    out << " axes";
    for (int a : k.reduce_axes) out << " " << a;
  }
  out << "\n";
  for (size_t i = 0; i < k.exprs.size(); ++i)
    out << "  e" << i << " = " << expr_str(k, k.exprs[i]) << " : "
        << dtype_name(k.exprs[i].dtype) << "\n";
  for (const auto& o : k.outputs)
    out << "  store " << access_str(k.accesses[o.access]) << " = e" << o.expr << "\n";
  for (const Kernel& f : k.finishers) out << "finisher" << to_string(program, f).substr(6);
  return out.str();
}

std::string to_string(const Program& program) {
  std::ostringstream out;
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    out << "b" << i << " = " << buffer_kind(b.kind) << " \"" << b.name << "\" "
        << dtype_name(b.dtype) << b.shape.str();
    if (b.alias_of >= 0) out << " view of b" << b.alias_of;
    out << "\n";
  }
  for (const Step& s : program.steps) {
    if (s.kind == Step::Kind::kernel) {
      out << to_string(program, program.kernels[s.index]);
    } else if (s.kind == Step::Kind::library) {
      const LibraryCall& c = program.calls[s.index];
      out << "call " << op_name(c.op);
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        out << (i ? ", b" : " b") << c.inputs[i];
        if ((i == 0 && c.transpose_a) || (i == 1 && c.transpose_b)) out << "^T";
      }
      out << " -> b" << c.output << (c.sum_batches ? " (batches summed)" : "");
      if (c.epilogue != Epilogue::none) out << " (epilogue " << epilogue_name(c.epilogue) << ")";
      if (c.op == Op::Conv2D && c.codes >= 0) out << " (max pool 2x2, codes b" << c.codes << ")";
      if (c.op == Op::MaxPool2DGrad && c.codes >= 0) out << " (routed by codes)";
      if ((c.op == Op::Conv2DGradInput || c.op == Op::Conv2DGradFilter) && c.codes >= 0)
        out << " (dy routed by codes b" << c.codes << ")";
      if (c.attrs.relu_mask) out << " (relu mask)";
      out << "\n";
    } else {
      const Copy& c = program.copies[s.index];
      out << "copy b" << c.from << " -> b" << c.to << "\n";
    }
  }
  out << "fetch";
  for (int f : program.fetches) out << " b" << f;
  return out.str() + "\n";
}

}  // namespace towerjit::kir
