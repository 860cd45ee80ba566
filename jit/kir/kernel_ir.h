// The kernel IR: what the fusion pass decides once and every backend emits. A Program is a
// list of steps over buffers; a step is a generated loop kernel (fused elementwise ops, with
// at most one reduction) or a call to a library routine (GEMM, convolution, pooling).
//
// Shapes keep the symbolic batch B (kBatch): one program serves every batch size, so an
// uneven tower slice runs the same compiled code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/node.h"

namespace towerjit::kir {

// A stride, offset or count in elements: c + b * B, with B the batch size known at run time.
// A shape holds B at most once, so every product the IR needs stays of this form.
struct Affine {
  int64_t c = 0;
  int64_t b = 0;
  bool operator==(const Affine&) const = default;
  int64_t at(int64_t batch) const { return c + b * batch; }
  Affine operator+(Affine o) const { return {c + o.c, b + o.b}; }
  Affine operator*(int64_t k) const { return {c * k, b * k}; }
};

struct Buffer {
  enum class Kind { input, variable, temp, constant };
  Kind kind = Kind::temp;
  Shape shape;
  DType dtype = DType::f32;
  std::string name;    // inputs and variables: their name; temps: "t<id>"
  int alias_of = -1;   // a reshape's view of another buffer's elements
  std::vector<int> nodes;  // graph nodes whose value lives here
};

// Where an expression reads: element offset = offset + sum_k stride[k] * i_k over the loop
// axes of the kernel. Broadcasts are stride 0, transposes permuted strides, slices an offset.
struct Access {
  int buffer = -1;  // -1: the row-major index itself (random numbers are keyed by it)
  std::vector<Affine> strides;  // one per loop axis
  Affine offset;
  bool operator==(const Access&) const = default;
};

// An expression node of a loop kernel's body, in a flat list (args index earlier entries).
struct Expr {
  enum class Kind { load, constant, unary, binary, select, loop_index, count, random };
  Kind kind = Kind::constant;
  Op op = Op::Constant;  // unary / binary: which; random: RandomUniform
  DType dtype = DType::f32;
  std::vector<int> args;
  int access = -1;       // load: index into Kernel::accesses
  double value = 0;      // constant
  int axis = -1;         // loop_index: the loop axis
  Affine count;            // count: the number of elements as a term of B
  uint64_t seed = 0;     // random: the node's seed; the element index is the output's offset
};

// A fused loop nest over `space`, or a group of them (see `parts`). Without a reduction, each output is stored at every point.
// With one, the axes in `reduce_axes` are combined (sum, max, mean or log-sum-exp) into the
// output, whose access has stride 0 along them. Sibling reductions over the same space and axes
// (a cross-entropy's log-sum-exp and its label term) share one kernel: the first outputs are
// the reductions, each with its own op; the outputs after them are stored at every point.
struct Kernel {
  std::string name;
  Shape space;
  std::vector<Access> accesses;
  std::vector<Expr> exprs;
  struct Output {
    int access;  // into accesses
    int expr;    // into exprs
    Op reduce = Op::Constant;  // this output's reduction; Constant: stored at every point
  };
  std::vector<Output> outputs;
  Op reduce = Op::Constant;     // the first output's reduction; Constant: none
  std::vector<int> reduce_axes;
  std::vector<int> nodes;       // the graph nodes fused into it, for dumps and errors
  // How many times a point computes `nodes`: 1, or a fused max pool's producer's window of 4
  // (jit/passes/fused_max_pools.h). The cost model's FLOPs are nodes x this x points.
  int evaluations = 1;
  // A group kernel (jit/passes/group_kernels.h): independent elementwise kernels run as one
  // launch over their concatenated points, part j over [start_j, start_j + points_j) of the
  // flat range (starts are terms of B: segment_starts()). A group has no space, accesses,
  // exprs or outputs of its own; `nodes` lists its parts' nodes. Empty: a plain kernel.
  std::vector<Kernel> parts;
  // A reduction's finishers (jit/passes/reduction_finishers.h; the GPU's programs only):
  // elementwise kernels over the reduction's output points, each run at output o by the thread
  // that stores the reductions' results at o, just after it stores them (batch norm's rsqrt,
  // scale and moving statistics from its sums). Empty: none.
  std::vector<Kernel> finishers;
  // The loop kernels this step runs: its parts, or itself and its finishers. Walk these for
  // buffers read/written.
  std::vector<const Kernel*> bodies() const {
    std::vector<const Kernel*> b;
    if (parts.empty()) b.push_back(this);
    for (const Kernel& p : parts) b.push_back(&p);
    for (const Kernel& f : finishers) b.push_back(&f);
    return b;
  }
  // How many outputs, from the first, are reductions.
  int reductions() const {
    int n = 0;
    while (n < static_cast<int>(outputs.size()) && outputs[n].reduce != Op::Constant) ++n;
    return n;
  }
};

// The points of a loop space as c + b*B.
inline Affine points_of(const Shape& space) {
  Affine n{1, 0};
  for (int64_t d : space.dims()) n = d == kBatch ? Affine{0, n.c} : Affine{n.c * d, n.b * d};
  return n;
}

// Row-major strides of `shape`, as the lowering writes an access that walks a whole buffer.
inline std::vector<Affine> row_major_strides(const Shape& shape) {
  std::vector<Affine> strides(shape.rank());
  Affine s{1, 0};
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s = shape[i] == kBatch ? Affine{0, s.c} : Affine{s.c * shape[i], s.b * shape[i]};
  }
  return strides;
}

// A group kernel's flat range: where each part starts, then the total (parts.size() + 1 terms).
inline std::vector<Affine> segment_starts(const Kernel& group) {
  std::vector<Affine> s{Affine{}};
  for (const Kernel& p : group.parts) {
    const Affine n = points_of(p.space);
    s.push_back({s.back().c + n.c, s.back().b + n.b});
  }
  return s;
}

// What a MatMul or a Conv2D applies to each element of its f32 result before storing it, with
// the bias (inputs[2], f32) added first: out = act(sum + bias[col]) for a product (one value
// per output column, the same for every row and batch), act(sum + bias[o]) for a convolution
// (one value per output channel, the same for every image and pixel). Set by
// jit/passes/epilogues.h; every backend computes the same float operations as the loop kernel
// it replaces (cuBLASLt's CUBLASLT_EPILOGUE_BIAS and RELU_BIAS for products on the GPU, a
// kernel after the convolution there; a pass over each product's rows or each image's output
// while it is in cache on the CPU).
enum class Epilogue { none, bias, bias_relu };

// "bias", "bias+relu": how dumps and the kernel IR's text name it ("none" for none).
const char* epilogue_name(Epilogue e);

// A library routine over whole buffers: MatMul (with transposes folded in), Conv2D and its
// gradients, pools and their gradients, OneHot, ArgMax.
struct LibraryCall {
  Op op;
  std::vector<int> inputs;   // buffer ids
  int output = -1;           // buffer id
  Attrs attrs;
  bool transpose_a = false, transpose_b = false;  // MatMul: operands read transposed
  // MatMul: the batch of products summed into one matrix (jit/passes/fold_batch_sums.h).
  bool sum_batches = false;
  // MatMul, Conv2D: the epilogue; not none only with the bias as a third input.
  Epilogue epilogue = Epilogue::none;
  std::vector<int> epilogue_nodes;  // the graph nodes its epilogue computes, for dumps and errors
  // 2x2, stride-2 max pools taken into convolutions (the CPU's programs,
  // jit/passes/conv_pools.h); -1 where none:
  // - Conv2D: `output` holds the pooled values [N, O, OH/2, OW/2] and `codes` each window's
  //   winner, one byte a window in the pooled values' order, four to an i32 element
  //   ([N, pool_code_words(O * OH/2 * OW/2)]: an image's codes start on an element); the
  //   convolution's own result is never stored;
  // - MaxPool2DGrad: inputs {codes, dy}, dy routed by the codes;
  // - Conv2DGradInput, Conv2DGradFilter: their dy operand is such a gradient, never stored: the
  //   pooled dy stands in its place and the codes are a third input, each image routed as it
  //   is read (with attrs.relu_mask, only to codes below 4).
  int codes = -1;
  int node = -1;

  // The buffers the call writes: its output, and a pooling convolution's codes.
  std::vector<int> written() const {
    if (op == Op::Conv2D && codes >= 0) return {output, codes};
    return {output};
  }
};

// The i32 elements that hold an image's codes of `windows` pooled windows, a byte each: a
// code (0-7) needs no more, and a quarter of an i32's bytes is what the cnn's first layer
// writes and reads the less at the copy bandwidth.
inline int64_t pool_code_words(int64_t windows) { return (windows + 3) / 4; }

// The shape of a convolution's result (Conv2D's output, its gradients' dy) from the buffer that
// stands for it: that buffer's own, or where a pool is taken in (`codes`), twice its rows and
// columns.
inline Shape conv_result_shape(const Shape& stand_in, const LibraryCall& c) {
  if (c.codes < 0) return stand_in;
  return Shape{stand_in[0], stand_in[1], stand_in[2] * 2, stand_in[3] * 2};
}

struct Step {
  enum class Kind { kernel, library, copy };
  Kind kind;
  int index;  // kernels[index], calls[index]; copy: copies[index]
};

// A buffer copy: an update op's value into its variable once everything has read the old one.
struct Copy {
  int from, to;
};

struct Program {
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<LibraryCall> calls;
  std::vector<Copy> copies;
  std::vector<Step> steps;
  std::vector<int> fetches;  // buffer of each fetched tensor
};

// Human-readable text of a program, stable enough for golden tests.
std::string to_string(const Program& program);
std::string to_string(const Program& program, const Kernel& kernel);

}  // namespace towerjit::kir
