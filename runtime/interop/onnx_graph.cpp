// towerjit's ops in ONNX opset 17, one case each (docs/interop.md#onnx has the table as prose).
// Most map to one ONNX op with the same numpy broadcasting. Those that do not:
//   - comparisons give ONNX a bool, cast back to the node's dtype (towerjit's are 1 or 0);
//   - select's condition is any non-zero number, cast to bool for Where;
//   - rsqrt is Reciprocal(Sqrt), gelu its erf form (Gelu is opset 20);
//   - logsumexp subtracts the maximum first, as towerjit's does, where ONNX's ReduceLogSumExp
//     may overflow;
//   - argmax's int64 is cast to the node's i32;
//   - a shape that holds the batch B (broadcast_to, a constant, count) is computed at run time
//     from the first input that has the batch; a reshape writes B as -1.
// Convolution weights are [O, C, KH, KW] in both, so they go in unchanged; max pooling pads
// with -infinity in both, average pooling counts the padding (count_include_pad = 1). Batch
// norm in inference, recognised (onnx_batch_norm.h), is one BatchNormalization node.
#include "runtime/interop/onnx_graph.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "dsl/error.h"
#include "onnx/onnx.pb.h"
#include "runtime/interop/onnx_batch_norm.h"

namespace towerjit::detail {
namespace {

using onnx::TensorProto_DataType;

TensorProto_DataType onnx_dtype(DType t) {
  return t == DType::f32 ? onnx::TensorProto_DataType_FLOAT : onnx::TensorProto_DataType_INT32;
}

// Why an op cannot be written, for the error; empty when it can.
const char* no_onnx_form(Op op) {
  switch (op) {
    case Op::RandomUniform:
      return "ONNX's random ops draw other numbers than towerjit's Philox streams, so the file "
             "would not compute what predict() computes; draw random numbers only in training "
             "(dropout() and by_phase() leave them out of inference), or export a model without them";
    case Op::Assign: case Op::AllReduce: case Op::Conv2DGradInput: case Op::Conv2DGradFilter:
    case Op::MaxPool2DGrad: case Op::AvgPool2DGrad: case Op::CombineRows: case Op::ScatterRows:
    case Op::AttentionGradQ: case Op::AttentionGradKV: case Op::LayerNormGradInput: case Op::LayerNormGradParams:
    case Op::SoftmaxGrad:
      return "it belongs to training (an update, a collective or a gradient), not to a model's "
             "output; export the model's output tensor (TowerTrainerOptions::logits)";
    case Op::Attention:
      return "the fused attention is one op of towerjit's own; build the model with "
             "scaled_dot_product_attention(q, k, v, {.fused = false}) to export its matmuls and softmax";
    default: return "";
  }
}

class Builder {
 public:
  Builder(const Graph& graph, const HostVariables& values, onnx::GraphProto& out, Loc loc)
      : g_(graph), values_(values), out_(out), loc_(loc), name_(graph.size()) {}

  void build(int output) {
    std::vector<bool> live(g_.size(), false);
    live[output] = true;
    for (int id = output; id >= 0; --id) {
      if (!live[id]) continue;
      // Batch norm's arithmetic becomes one node, which reads x and the four variables only.
      if (auto bn = match_batch_norm(g_, id)) {
        for (int in : {bn->x, bn->gamma, bn->beta, bn->mean, bn->variance}) live[in] = true;
        batch_norms_[id] = *bn;
        continue;
      }
      for (int in : g_.node(id).inputs) live[in] = true;
    }
    for (int id = 0; id <= output; ++id)
      if (live[id] && g_.node(id).op == Op::Input) add_input(id);
    for (int id = 0; id <= output; ++id)
      if (live[id]) emit(id);
    add("Identity", {name_[output]}, g_.node(output), "logits");
    value_info(*out_.add_output(), "logits", g_.node(output));
  }

 private:
  // --- protobuf pieces ------------------------------------------------------------------------
  static void value_info(onnx::ValueInfoProto& v, const std::string& name, const Node& n) {
    v.set_name(name);
    auto* type = v.mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx_dtype(n.dtype));
    auto* shape = type->mutable_shape();
    for (int64_t d : n.shape.dims()) {
      if (d == kBatch) shape->add_dim()->set_dim_param("batch");
      else shape->add_dim()->set_dim_value(d);
    }
  }

  // A node computing `output` (default: a fresh name for `from`), named after the scope and op
  // it stands for, with the user's line as its doc string.
  onnx::NodeProto& add(const std::string& op_type, const std::vector<std::string>& inputs, const Node& from,
                       std::string output = "") {
    onnx::NodeProto& n = *out_.add_node();
    n.set_op_type(op_type);
    const int k = counter_++;
    const std::string stem = (from.scope.empty() ? "" : from.scope + "/") + std::string(op_name(from.op));
    n.set_name(stem + "_" + std::to_string(k));
    n.set_doc_string(format_location(from.loc));
    for (const auto& in : inputs) n.add_input(in);
    n.add_output(output.empty() ? "t" + std::to_string(k) : output);
    return n;
  }
  static const std::string& out(const onnx::NodeProto& n) { return n.output(0); }

  static void attr(onnx::NodeProto& n, const char* name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // An initializer of `dims` holding `data` (4- or 8-byte elements, little-endian as x86).
  std::string initializer(const std::string& name, TensorProto_DataType type, const std::vector<int64_t>& dims,
                          const void* data, size_t bytes) {
    onnx::TensorProto& t = *out_.add_initializer();
    t.set_name(name);
    t.set_data_type(type);
    for (int64_t d : dims) t.add_dims(d);
    t.set_raw_data(std::string(static_cast<const char*>(data), bytes));
    return name;
  }
  // An int64 constant: a vector, or a scalar when `scalar`. Shared by value.
  std::string i64(const std::vector<int64_t>& v, bool scalar = false) {
    std::string key = scalar ? "s" : "v";
    for (int64_t x : v) key += "_" + std::to_string(x);
    auto [it, fresh] = i64_.emplace(key, "const/i64" + key);
    if (fresh)
      initializer(it->second, onnx::TensorProto_DataType_INT64,
                  scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(v.size())}, v.data(),
                  v.size() * sizeof(int64_t));
    return it->second;
  }
  std::string scalar(double value, DType t) {
    const std::string name = "const/" + std::to_string(counter_++);
    if (t == DType::f32) {
      const float f = static_cast<float>(value);
      return initializer(name, onnx_dtype(t), {}, &f, 4);
    }
    const int32_t i = static_cast<int32_t>(value);
    return initializer(name, onnx_dtype(t), {}, &i, 4);
  }

  // --- the batch, for shapes that hold it -----------------------------------------------------
  void add_input(int id) {
    const Node& n = g_.node(id);
    value_info(*out_.add_input(), n.attrs.name, n);
    name_[id] = n.attrs.name;
    for (int axis = 0; axis < n.shape.rank() && batch_source_ < 0; ++axis)
      if (n.shape[axis] == kBatch) batch_source_ = id, batch_axis_ = axis;
  }
  // B as an int64 vector of one element, read from an input's shape.
  std::string batch(const Node& from) {
    internal_check(batch_source_ >= 0) << "a shape holds the batch but no input does";
    if (batch_.empty()) {
      auto& n = add("Shape", {name_[batch_source_]}, from);
      attr(n, "start", batch_axis_);
      attr(n, "end", batch_axis_ + 1);
      batch_ = out(n);
    }
    return batch_;
  }
  // `shape` as an int64 vector, at run time when it holds B.
  std::string shape_of(const Shape& shape, const Node& from) {
    if (!shape.has_batch()) return i64(shape.dims());
    std::vector<std::string> pieces;  // made before the Concat, which must follow them
    for (int64_t d : shape.dims()) pieces.push_back(d == kBatch ? batch(from) : i64({d}));
    auto& cat = add("Concat", pieces, from);
    attr(cat, "axis", int64_t{0});
    return out(cat);
  }

  // --- the ops ------------------------------------------------------------------------------
  void emit(int id) {
    const Node& n = g_.node(id);
    if (n.op == Op::Input) return;  // added first, in add_input
    const char* why = no_onnx_form(n.op);
    user_check(*why == '\0', n) << "export_onnx: " << op_name(n.op)
                                << (n.scope.empty() ? "" : " (in \"" + n.scope + "\")")
                                << " has no ONNX form: " << why;
    if (auto bn = batch_norms_.find(id); bn != batch_norms_.end()) {
      const BatchNormMatch& m = bn->second;
      auto& b = add("BatchNormalization", {name_[m.x], name_[m.gamma], name_[m.beta], name_[m.mean], name_[m.variance]},
                    n);
      auto* eps = b.add_attribute();
      eps->set_name("epsilon");
      eps->set_type(onnx::AttributeProto::FLOAT);
      eps->set_f(static_cast<float>(m.epsilon));
      name_[id] = out(b);
      return;
    }
    std::vector<std::string> in;
    for (int i : n.inputs) in.push_back(name_[i]);
    name_[id] = value(id, in);
  }

  // The name of the value that stands for `n`, whose inputs are `in`.
  std::string value(int id, const std::vector<std::string>& in) {
    const Node& n = g_.node(id);
    auto unary = [&](const char* t) { return out(add(t, in, n)); };
    auto compare = [&](const char* t) {
      auto& cast = add("Cast", {out(add(t, in, n))}, n);
      attr(cast, "to", int64_t{onnx_dtype(n.dtype)});
      return out(cast);
    };
    switch (n.op) {
      case Op::Variable: return variable(id);
      case Op::Constant: return constant(n);
      case Op::Neg: return unary("Neg");
      case Op::Exp: return unary("Exp");
      case Op::Log: return unary("Log");
      case Op::Sqrt: return unary("Sqrt");
      case Op::Rsqrt: return out(add("Reciprocal", {out(add("Sqrt", in, n))}, n));
      case Op::Abs: return unary("Abs");
      case Op::Sign: return unary("Sign");
      case Op::Relu: return unary("Relu");
      case Op::Sigmoid: return unary("Sigmoid");
      case Op::Tanh: return unary("Tanh");
      case Op::Erf: return unary("Erf");
      case Op::Softplus: return unary("Softplus");
      case Op::Gelu: {  // 0.5 x (1 + erf(x / sqrt 2))
        const std::string e = out(add("Erf", {out(add("Mul", {in[0], scalar(1 / std::sqrt(2.0), DType::f32)}, n))}, n));
        const std::string half_x = out(add("Mul", {in[0], scalar(0.5, DType::f32)}, n));
        return out(add("Mul", {half_x, out(add("Add", {e, scalar(1, DType::f32)}, n))}, n));
      }
      case Op::Cast: {
        auto& cast = add("Cast", in, n);
        attr(cast, "to", int64_t{onnx_dtype(n.dtype)});
        return out(cast);
      }
      case Op::StopGradient: return unary("Identity");
      case Op::Add: return unary("Add");
      case Op::Sub: return unary("Sub");
      case Op::Mul: return unary("Mul");
      case Op::Div: return unary("Div");
      case Op::Max: return unary("Max");
      case Op::Min: return unary("Min");
      case Op::Pow: return unary("Pow");
      case Op::Less: return compare("Less");
      case Op::LessEqual: return compare("LessOrEqual");
      case Op::Greater: return compare("Greater");
      case Op::GreaterEqual: return compare("GreaterOrEqual");
      case Op::Equal: return compare("Equal");
      case Op::NotEqual: {
        auto& cast = add("Cast", {out(add("Not", {out(add("Equal", in, n))}, n))}, n);
        attr(cast, "to", int64_t{onnx_dtype(n.dtype)});
        return out(cast);
      }
      case Op::Select: {
        auto& cond = add("Cast", {in[0]}, n);
        attr(cond, "to", int64_t{onnx::TensorProto_DataType_BOOL});
        return out(add("Where", {out(cond), in[1], in[2]}, n));
      }
      case Op::ReduceSum: case Op::ReduceMean: case Op::ReduceMax: case Op::ReduceLogSumExp:
        return reduce(n, in[0]);
      case Op::Count: return count(n);
      case Op::Reshape: {
        std::vector<int64_t> dims = n.shape.dims();
        for (int64_t& d : dims) d = d == kBatch ? -1 : d;
        return out(add("Reshape", {in[0], i64(dims)}, n));
      }
      case Op::Transpose: {
        auto& t = add("Transpose", in, n);
        if (!n.attrs.axes.empty()) attr(t, "perm", std::vector<int64_t>(n.attrs.axes.begin(), n.attrs.axes.end()));
        return out(t);
      }
      case Op::BroadcastTo: return out(add("Expand", {in[0], shape_of(n.shape, n)}, n));
      case Op::Slice: {
        std::vector<int64_t> ends = n.attrs.end, axes;
        for (int64_t& e : ends) e = e == kBatch ? std::numeric_limits<int64_t>::max() : e;
        for (size_t a = 0; a < ends.size(); ++a) axes.push_back(static_cast<int64_t>(a));
        return out(add("Slice", {in[0], i64(n.attrs.begin), i64(ends), i64(axes)}, n));
      }
      case Op::Pad: {
        std::vector<int64_t> pads = n.attrs.begin;
        pads.insert(pads.end(), n.attrs.end.begin(), n.attrs.end.end());
        return out(add("Pad", {in[0], i64(pads)}, n));
      }
      case Op::Concat: {
        auto& c = add("Concat", in, n);
        attr(c, "axis", int64_t{n.attrs.axis});
        return out(c);
      }
      case Op::MatMul: return unary("MatMul");
      case Op::OneHot: {
        const float off_on[2] = {0, 1};
        const std::string values = initializer("const/" + std::to_string(counter_++), onnx::TensorProto_DataType_FLOAT,
                                               {2}, off_on, sizeof off_on);
        // The depth in the indices' int32: ONNX Runtime has no kernel for int32 indices with an
        // int64 depth.
        return out(add("OneHot", {in[0], scalar(static_cast<double>(n.attrs.depth), DType::i32), values}, n));
      }
      case Op::ArgMax: {
        auto& arg = add("ArgMax", in, n);
        attr(arg, "axis", int64_t{n.attrs.axis});
        attr(arg, "keepdims", int64_t{0});
        auto& cast = add("Cast", {out(arg)}, n);
        attr(cast, "to", int64_t{onnx_dtype(n.dtype)});
        return out(cast);
      }
      case Op::LayerNorm: return layer_norm(n, in);
      case Op::Softmax: {  // ONNX's Softmax (opset 13 on) normalises along one axis, as ours
        auto& softmax = add("Softmax", in, n);
        attr(softmax, "axis", int64_t{-1});
        return out(softmax);
      }
      case Op::Conv2D: return window("Conv", n, in);
      case Op::MaxPool2D: return window("MaxPool", n, in);
      case Op::AvgPool2D: return window("AveragePool", n, in);
      default: break;
    }
    internal_check(false) << "export_onnx: no case for " << op_name(n.op);
    return "";
  }

  std::string variable(int id) {
    const VariableInfo* info = g_.variable_of_node(id);
    internal_check(info != nullptr) << "a variable node without its variable";
    auto it = values_.find(info->name);
    user_check(it != values_.end(), loc_)
        << "export_onnx: no value for the variable \"" << info->name << "\" that the model reads; "
        << "pass every variable (e.g. trainer.variables(), or load_variables() of a checkpoint)";
    const HostTensor& v = it->second;
    user_check(v.shape == info->shape && v.dtype == info->dtype, loc_)
        << "export_onnx: the variable \"" << info->name << "\" is " << dtype_name(v.dtype) << v.shape.str()
        << " in the values given but " << dtype_name(info->dtype) << info->shape.str()
        << " in the model; pass the values of this model's variables";
    return initializer(info->name, onnx_dtype(v.dtype), v.shape.dims(), v.data(), static_cast<size_t>(v.size()) * 4);
  }

  // value broadcast to the node's shape: a scalar, expanded when the shape has axes.
  std::string constant(const Node& n) {
    const std::string s = scalar(n.attrs.value, n.dtype);
    if (n.shape.rank() == 0) return s;
    return out(add("Expand", {s, shape_of(n.shape, n)}, n));
  }

  std::string reduce(const Node& n, const std::string& x) {
    const std::vector<int64_t> axes(n.attrs.axes.begin(), n.attrs.axes.end());  // empty: all
    auto op = [&](const char* type, const std::string& input, bool keep) -> onnx::NodeProto& {
      // Opset 13 moved ReduceSum's axes to an input; the others follow only in opset 18.
      const bool axes_input = std::string(type) == "ReduceSum";
      auto& r = add(type, {input}, n);
      if (axes_input && !axes.empty()) r.add_input(i64(axes));
      if (!axes_input && !axes.empty()) attr(r, "axes", axes);
      attr(r, "keepdims", int64_t{keep});
      return r;
    };
    switch (n.op) {
      case Op::ReduceSum: return out(op("ReduceSum", x, n.attrs.keepdims));
      case Op::ReduceMean: return out(op("ReduceMean", x, n.attrs.keepdims));
      case Op::ReduceMax: return out(op("ReduceMax", x, n.attrs.keepdims));
      default: break;
    }
    // log(sum(exp(x - m))) + m with m the maximum, kept to broadcast; a window of -inf only
    // gives NaN in both.
    const std::string m = out(op("ReduceMax", x, true));
    const std::string e = out(add("Exp", {out(add("Sub", {x, m}, n))}, n));
    const std::string l = out(add("Log", {out(op("ReduceSum", e, n.attrs.keepdims))}, n));
    const std::string m_out = n.attrs.keepdims ? m : out(add("Reshape", {m, shape_of(n.shape, n)}, n));
    return out(add("Add", {l, m_out}, n));
  }

  // The fused layer norm (and rms_norm) as the ops it fuses, which opset 17 has all of:
  // d = x - mean (rms: x), d / sqrt(mean(d^2) + eps) * gain (+ bias), over the last axis.
  std::string layer_norm(const Node& n, const std::vector<std::string>& in) {
    const std::vector<int64_t> last{n.shape.rank() - 1};
    auto mean = [&](const std::string& v) {
      auto& r = add("ReduceMean", {v}, n);
      attr(r, "axes", last);
      attr(r, "keepdims", int64_t{1});
      return out(r);
    };
    const std::string d = n.attrs.rms ? in[0] : out(add("Sub", {in[0], mean(in[0])}, n));
    const std::string var = mean(out(add("Mul", {d, d}, n)));
    const std::string ve = out(add("Add", {var, scalar(n.attrs.value, DType::f32)}, n));
    const std::string rstd = out(add("Reciprocal", {out(add("Sqrt", {ve}, n))}, n));
    const std::string y = out(add("Mul", {out(add("Mul", {d, rstd}, n)), in[1]}, n));
    return n.attrs.rms ? y : out(add("Add", {y, in[2]}, n));
  }

  // The number of elements of the input along the axes, as an f32 scalar.
  std::string count(const Node& n) {
    const Shape& shape = g_.node(n.inputs[0]).shape;
    double fixed = 1;
    bool batched = false;
    for (int a = 0; a < shape.rank(); ++a) {
      bool counted = n.attrs.axes.empty();
      for (int axis : n.attrs.axes) counted = counted || normalize_axis(axis, shape.rank()) == a;
      if (!counted) continue;
      if (shape[a] == kBatch) batched = true;
      else fixed *= static_cast<double>(shape[a]);
    }
    if (!batched) return scalar(fixed, DType::f32);
    auto& b = add("Cast", {batch(n)}, n);
    attr(b, "to", int64_t{onnx::TensorProto_DataType_FLOAT});
    const std::string scaled = out(add("Mul", {out(b), scalar(fixed, DType::f32)}, n));
    return out(add("Reshape", {scaled, i64({})}, n));
  }

  // Conv and the pools: NCHW, square attrs per axis, symmetric padding.
  std::string window(const char* type, const Node& n, const std::vector<std::string>& in) {
    auto& w = add(type, in, n);
    const Attrs& a = n.attrs;
    if (n.op == Op::Conv2D) {
      const Shape& k = g_.node(n.inputs[1]).shape;
      attr(w, "kernel_shape", std::vector<int64_t>{k[2], k[3]});
    } else {
      attr(w, "kernel_shape", std::vector<int64_t>{a.kernel[0], a.kernel[1]});
    }
    attr(w, "strides", std::vector<int64_t>{a.stride[0], a.stride[1]});
    attr(w, "pads", std::vector<int64_t>{a.pad[0], a.pad[1], a.pad[0], a.pad[1]});
    if (n.op == Op::AvgPool2D) attr(w, "count_include_pad", int64_t{1});
    return out(w);
  }

  const Graph& g_;
  const HostVariables& values_;
  onnx::GraphProto& out_;
  Loc loc_;
  std::vector<std::string> name_;  // node id -> the ONNX value that holds it
  std::map<std::string, std::string> i64_;
  std::map<int, BatchNormMatch> batch_norms_;  // by the id of the node that ends each
  std::string batch_;
  int batch_source_ = -1, batch_axis_ = 0;
  int counter_ = 0;
};

}  // namespace

void build_onnx_graph(const Graph& graph, Tensor output, const HostVariables& values, onnx::GraphProto& out,
                      Loc loc) {
  out.set_name("towerjit");
  Builder(graph, values, out, loc).build(output.id());
}

}  // namespace towerjit::detail
