// The random DAGs of the property tests, as data (so a case can be printed, rebuilt and
// shrunk), their generator, and a runner that builds several into one graph and compares a
// backend with the reference interpreter. Used by the CPU JIT's test
// (tests/jit/test_random_graphs.cpp) and the GPU's (tests_gpu/test_gpu_random_graphs.cpp),
// which draw the same cases from the same seeds. Test-only: one including file per test binary.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>

#include "cpu_test_env.h"
#include "jit/passes/pipeline.h"
#include "jit/reference/interpreter.h"
#include "jit_check.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
using tj::kBatch;
using tj::Shape;
using tj::Tensor;
using namespace tj::testing;

namespace {

constexpr int kCases = 300;
constexpr int kCasesPerProgram = 10;
constexpr int64_t kBatches[] = {1, 2, 7};

// One node of a random DAG, as data, so a case can be printed, rebuilt and shrunk.
struct NodeDesc {
  std::string op{};        // "input", a unary or binary op name, "where", "sum", "transpose", ...
  std::vector<int> in{};   // earlier nodes
  Shape shape{};           // input: its shape; reshape: the new shape
  std::vector<int> axes{};  // reductions: axes; transpose: the permutation
  bool keepdims = false;
  std::vector<int64_t> begin{}, end{};  // slice
  double c = 0;          // addc / mulc: the constant
};

struct Dag {
  uint32_t seed = 0;
  int64_t batch = 1;
  std::vector<NodeDesc> nodes{};
  std::vector<int> fetches{};
};

const std::vector<std::string> kUnary = {"neg", "exp", "tanh", "sigmoid", "relu",
                                         "abs", "softplus", "gelu", "sqrt", "log"};
const std::vector<std::string> kBinary = {"add", "sub", "mul", "div", "maximum",
                                          "minimum", "less", "greater_equal"};

std::string shape_of(const Tensor& t) { return t.shape().str(); }

// Builds a Dag's nodes into the current graph. Every value carries a bound on its magnitude;
// an operand above an op's limit is first squashed with tanh, so values stay well-conditioned
// in f32 (no exp overflow, no huge products, sums of bounded terms, no division near zero).
class Builder {
 public:
  explicit Builder(std::string prefix) : prefix_(std::move(prefix)) {}

  // Appends one node; throws towerjit::Error when the DSL rejects it (shapes).
  void add(const NodeDesc& d) {
    double b = 0;
    tensors_.push_back(apply(d, b));
    bounds_.push_back(b);
  }
  // Appends a node built elsewhere (the graph fuzzer's ops beyond these, fuzz/graph_builder.cpp)
  // with a bound on its magnitude.
  void push(Tensor t, double bound) {
    tensors_.push_back(std::move(t));
    bounds_.push_back(bound);
  }
  const Tensor& operator[](int i) const { return tensors_[i]; }
  int size() const { return static_cast<int>(tensors_.size()); }
  std::string input_name(int i) const { return prefix_ + "n" + std::to_string(i); }

  // Node i as an operand of an op that takes magnitudes up to `limit`: squashed with tanh when
  // its bound is above; `b` receives the operand's bound.
  Tensor operand(int i, double limit, double& b) const {
    Tensor t = tensors_[i];
    b = bounds_[i];
    if (b > limit) t = tj::tanh(t), b = 1;
    return t;
  }

 private:
  Tensor arg(const NodeDesc& d, int k, double limit, double& b) const { return operand(d.in[k], limit, b); }

  Tensor apply(const NodeDesc& d, double& b) {
    const std::string& op = d.op;
    double x = 0, y = 0, z = 0;
    if (op == "input") return b = 1, tj::input(input_name(size()), d.shape);
    if (op == "neg") return -arg(d, 0, 8, b);
    if (op == "exp") { auto t = tj::exp(arg(d, 0, 2, x)); b = std::exp(x); return t; }
    if (op == "tanh") return b = 1, tj::tanh(arg(d, 0, 1e9, x));
    if (op == "sigmoid") return b = 1, tj::sigmoid(arg(d, 0, 1e9, x));
    if (op == "relu") return tj::relu(arg(d, 0, 8, b));
    if (op == "abs") return tj::abs(arg(d, 0, 8, b));
    if (op == "gelu") return tj::gelu(arg(d, 0, 8, b));
    if (op == "softplus") { auto t = tj::softplus(arg(d, 0, 8, x)); b = x + 0.7; return t; }
    if (op == "sqrt") {
      auto t = tj::sqrt(tj::softplus(arg(d, 0, 8, x)) + 0.1);
      b = std::sqrt(x + 0.8);
      return t;
    }
    if (op == "log") {
      auto t = tj::log(tj::softplus(arg(d, 0, 8, x)) + 0.1);
      b = std::max(2.31, std::log(x + 0.8));
      return t;
    }
    if (op == "addc") { auto t = arg(d, 0, 8, x) + d.c; b = x + std::abs(d.c); return t; }
    if (op == "mulc") { auto t = arg(d, 0, 8, x) * d.c; b = x * std::abs(d.c); return t; }
    if (op == "add") { auto t = arg(d, 0, 8, x) + arg(d, 1, 8, y); b = x + y; return t; }
    if (op == "sub") { auto t = arg(d, 0, 8, x) - arg(d, 1, 8, y); b = x + y; return t; }
    if (op == "mul") { auto t = arg(d, 0, 3, x) * arg(d, 1, 3, y); b = x * y; return t; }
    if (op == "div") {  // |denominator| >= 0.5
      auto t = arg(d, 0, 8, x) / (tj::abs(arg(d, 1, 8, y)) + 0.5);
      b = 2 * x;
      return t;
    }
    if (op == "maximum" || op == "minimum") {
      auto l = arg(d, 0, 8, x), r = arg(d, 1, 8, y);
      b = std::max(x, y);
      return op == "maximum" ? tj::maximum(l, r) : tj::minimum(l, r);
    }
    if (op == "less") return b = 1, tj::less(arg(d, 0, 8, x), arg(d, 1, 8, y));
    if (op == "greater_equal") return b = 1, tj::greater_equal(arg(d, 0, 8, x), arg(d, 1, 8, y));
    if (op == "where") {
      auto c = arg(d, 0, 8, z) > 0;
      auto t = tj::where(c, arg(d, 1, 8, x), arg(d, 2, 8, y));
      b = std::max(x, y);
      return t;
    }
    if (op == "sum" || op == "mean" || op == "max") {
      Tensor t = arg(d, 0, op == "sum" ? 1 : 8, b);
      int64_t count = 1;
      for (int a : d.axes) {  // an axis out of range is left to the DSL to reject
        const int axis = a < 0 ? a + t.shape().rank() : a;
        if (axis >= 0 && axis < t.shape().rank()) count *= t.shape()[axis] == kBatch ? 7 : t.shape()[axis];
      }
      if (op == "sum") return b *= count, tj::sum(t, d.axes, d.keepdims);
      return op == "mean" ? tj::mean(t, d.axes, d.keepdims) : tj::max(t, d.axes, d.keepdims);
    }
    b = bounds_[d.in[0]];
    const Tensor& t = tensors_[d.in[0]];
    if (op == "transpose") return tj::transpose(t, d.axes);
    if (op == "slice") return tj::slice(t, d.begin, d.end);
    if (op == "reshape") return tj::reshape(t, d.shape);
    if (op == "broadcast_to") return tj::broadcast_to(t, d.shape);
    throw tj::Error("unknown random op " + op);
  }

  std::string prefix_;
  std::vector<Tensor> tensors_;
  std::vector<double> bounds_;
};

std::string describe(const Dag& dag, const Builder* built) {
  std::ostringstream out;
  out << "case seed " << dag.seed << ", batch " << dag.batch << "\n";
  for (size_t i = 0; i < dag.nodes.size(); ++i) {
    const NodeDesc& d = dag.nodes[i];
    out << "  n" << i << " = " << d.op << "(";
    for (size_t k = 0; k < d.in.size(); ++k) out << (k ? ", n" : "n") << d.in[k];
    out << ")";
    if (d.op == "input" || d.op == "reshape" || d.op == "broadcast_to") out << " shape " << d.shape.str();
    if (!d.axes.empty() || d.op == "sum" || d.op == "mean" || d.op == "max") {
      out << (d.op == "transpose" ? " perm" : " axes");
      for (int a : d.axes) out << " " << a;
    }
    if (d.op == "sum" || d.op == "mean" || d.op == "max") out << " keepdims " << d.keepdims;
    if (d.op == "slice")
      for (size_t k = 0; k < d.begin.size(); ++k) out << " [" << d.begin[k] << ":" << (d.end[k] == kBatch ? std::string("B") : std::to_string(d.end[k])) << ")";
    if (d.op == "addc" || d.op == "mulc") out << " c " << d.c;
    if (built && static_cast<int>(i) < built->size()) out << "  : " << shape_of((*built)[i]);
    out << "\n";
  }
  out << "  fetch";
  for (int f : dag.fetches) out << " n" << f;
  return out.str() + "\n";
}

// --- Generating a case -----------------------------------------------------------------------

Shape broadcast_variant(const Shape& s, std::mt19937& rng) {
  std::vector<int64_t> dims = s.dims();
  if (rng() % 6 == 0) return Shape{};  // a scalar
  const int drop = dims.empty() ? 0 : static_cast<int>(rng() % (dims.size() + 1)) / 2;
  dims.erase(dims.begin(), dims.begin() + drop);  // fewer leading dimensions
  for (auto& d : dims)
    if (rng() % 3 == 0) d = 1;
  return Shape(dims);
}

bool broadcasts(const Shape& a, const Shape& b) {
  auto s = tj::broadcast_shapes(a, b);
  return s && std::count(s->dims().begin(), s->dims().end(), kBatch) <= 1;
}

// A random op on the nodes built so far; may append extra inputs to the DAG first.
NodeDesc random_op(Dag& dag, Builder& b, std::mt19937& rng) {
  auto pick = [&] { return rng() % 2 ? b.size() - 1 : static_cast<int>(rng() % b.size()); };
  auto shape = [&](int i) { return b[i].shape(); };
  auto partner = [&](int a) {  // a node broadcasting with `a`, or a fresh input that does
    std::vector<int> ok;
    for (int i = 0; i < b.size(); ++i)
      if (broadcasts(shape(i), shape(a))) ok.push_back(i);
    if (rng() % 4 != 0 && !ok.empty()) return ok[rng() % ok.size()];
    NodeDesc in{.op = "input", .shape = broadcast_variant(shape(a), rng)};
    dag.nodes.push_back(in);
    b.add(in);
    return b.size() - 1;
  };
  NodeDesc d;
  const int a = pick();
  const Shape s = shape(a);
  const int r = s.rank();
  const int roll = static_cast<int>(rng() % 100);
  if (roll < 28) {
    d = {.op = kUnary[rng() % kUnary.size()], .in = {a}};
  } else if (roll < 60) {
    d = {.op = kBinary[rng() % kBinary.size()], .in = {a, partner(a)}};
    if (rng() % 2) std::swap(d.in[0], d.in[1]);
  } else if (roll < 65) {
    d = {.op = "where", .in = {partner(a), a, partner(a)}};
  } else if (roll < 70) {
    d = {.op = rng() % 2 ? "addc" : "mulc", .in = {a}};
    d.c = std::uniform_real_distribution<double>(-1.5, 1.5)(rng);
  } else if (roll < 82 && r > 0) {
    static const char* reds[] = {"sum", "mean", "max"};
    d = {.op = reds[rng() % 3], .in = {a}, .keepdims = rng() % 2 == 0};
    for (int i = 0; i < r; ++i)
      if (rng() % 2) d.axes.push_back(i);
    if (d.axes.empty()) d.axes.push_back(static_cast<int>(rng() % r));
    if (rng() % 4 == 0) d.axes = {};  // every axis
  } else if (roll < 88 && r >= 2) {
    d = {.op = "transpose", .in = {a}};
    for (int i = 0; i < r; ++i) d.axes.push_back(i);
    while (std::is_sorted(d.axes.begin(), d.axes.end())) std::shuffle(d.axes.begin(), d.axes.end(), rng);
  } else if (roll < 91) {  // stretch size-1 dimensions, maybe add a leading one
    d = {.op = "broadcast_to", .in = {a}};
    std::vector<int64_t> dims = s.dims();
    for (auto& x : dims)
      if (x == 1 && rng() % 2) x = rng() % 2 ? 3 : 7;
    if (dims.size() < 3 && rng() % 2) dims.insert(dims.begin(), 3);
    d.shape = Shape(dims);
  } else if (roll < 93 && r > 0) {
    d = {.op = "slice", .in = {a}};
    for (int i = 0; i < r; ++i) {
      const int64_t n = s[i];
      int64_t lo = 0, hi = n;
      if (n > 1 && rng() % 2) lo = rng() % n, hi = lo + 1 + rng() % (n - lo);
      d.begin.push_back(lo), d.end.push_back(hi);
    }
  } else {
    d = {.op = "reshape", .in = {a}};
    std::vector<int64_t> dims = s.dims();
    const bool batch_first_or_none = !s.has_batch() || s[0] == kBatch;
    int64_t rest = 1;
    for (auto x : dims) rest *= x == kBatch ? 1 : x;
    if (batch_first_or_none && rest > 7 && rng() % 4 != 0) {  // moves elements: a view
      std::vector<int64_t> out;
      if (s.has_batch()) out.push_back(kBatch);
      const int64_t f = rest % 3 == 0 && rng() % 2 ? 3 : (rest % 7 == 0 ? 7 : rest);
      out.push_back(f);
      if (rest / f > 1) out.push_back(rest / f);
      d.shape = Shape(out);
    } else {
      auto one = std::find(dims.begin(), dims.end(), 1);
      if (one != dims.end() && rng() % 2) dims.erase(one);
      else dims.insert(dims.begin() + rng() % (dims.size() + 1), 1);
      d.shape = Shape(dims);
    }
  }
  return d;
}

Shape random_frame(std::mt19937& rng) {
  static const int64_t sizes[] = {1, 3, 7, 7};
  const int rank = 1 + static_cast<int>(rng() % 6 + 1) / 3 + (rng() % 3 == 0);  // 1..3, mostly 2
  std::vector<int64_t> dims;
  for (int i = 0; i < std::min(rank, 3); ++i) dims.push_back(sizes[rng() % 4]);
  if (rng() % 5 != 0) dims[rng() % 3 == 0 ? rng() % dims.size() : 0] = kBatch;
  return Shape(dims);
}

Dag random_dag(uint32_t seed, int64_t batch) {
  std::mt19937 rng(seed);
  Dag dag{.seed = seed, .batch = batch};
  tj::Graph scratch;
  tj::GraphScope use(scratch);
  Builder b("");
  const Shape frame = random_frame(rng);
  dag.nodes.push_back({.op = "input", .shape = frame});
  b.add(dag.nodes.back());
  const int ops = 4 + static_cast<int>(rng() % 11);
  while (static_cast<int>(dag.nodes.size()) < ops + 1) {
    NodeDesc d = random_op(dag, b, rng);
    try {
      b.add(d);  // appends nothing when it throws
      dag.nodes.push_back(d);
    } catch (const tj::Error&) {  // shapes the DSL rejects: draw again
    }
  }
  dag.fetches.push_back(b.size() - 1);
  for (int k = 0; k < 2; ++k) {
    const int f = static_cast<int>(rng() % b.size());
    if (rng() % 2 && dag.nodes[f].op != "input" &&
        std::find(dag.fetches.begin(), dag.fetches.end(), f) == dag.fetches.end())
      dag.fetches.push_back(f);
  }
  return dag;
}

// --- Running and comparing -------------------------------------------------------------------

struct Outcome {
  bool failed = false;
  bool threw = false;
  std::string detail;  // what differed, or the exception's message
  std::string ir;      // the kernel IR of the program, when it lowered
  std::string graph;   // the graph's text
};

// Runs a graph's fetches on a backend and through the reference: run_both (CPU JIT) or
// run_gpu_and_reference (tests_gpu/gpu_check.h).
using Runner = std::function<JitRun(const tj::Graph&, const std::vector<Tensor>&, const tj::reference::Feeds&,
                                    tj::reference::Variables&)>;

// Builds `dags` into one graph, runs it on `backend` (named `name` in messages) and through the
// reference, and compares every fetch.
Outcome run_dags(const std::vector<Dag>& dags, const Runner& backend, const char* name) {
  Outcome o;
  tj::Graph g;
  tj::GraphScope use(g);
  std::vector<Tensor> fetches;
  tj::reference::Feeds feeds;
  std::vector<std::string> owner;  // which case each fetch belongs to
  try {
    for (size_t k = 0; k < dags.size(); ++k) {
      Builder b("d" + std::to_string(k) + "_");
      for (size_t i = 0; i < dags[k].nodes.size(); ++i) {
        b.add(dags[k].nodes[i]);
        if (dags[k].nodes[i].op == "input")
          feeds[b.input_name(static_cast<int>(i))] =
              random_array(b[i].shape().bind(dags[k].batch), dags[k].seed * 1000 + i);
      }
      for (int f : dags[k].fetches)
        fetches.push_back(b[f]), owner.push_back("seed " + std::to_string(dags[k].seed) + " n" + std::to_string(f));
    }
  } catch (const tj::Error& e) {
    o.detail = std::string("graph not buildable: ") + e.what();
    return o;  // not a failure: a shrink step made an invalid graph
  }
  o.graph = g.str();
  std::vector<int> ids;
  for (const Tensor& t : fetches) ids.push_back(t.id());
  try {
    o.ir = tj::kir::to_string(tj::lower_graph(g, ids, {}).program);  // what CpuProgram runs
    tj::reference::Variables vars;
    JitRun r = backend(g, fetches, feeds, vars);
    for (size_t i = 0; i < r.ref.size(); ++i) {
      if (auto violation = bound_violation(r.jit[i], r.ref[i], r.bound[i])) {
        o.failed = true;
        o.detail += owner[i] + " (" + name + "): " + *violation + "\n";
      }
    }
  } catch (const std::exception& e) {
    o.failed = o.threw = true;
    o.detail = std::string("exception: ") + e.what();
  }
  return o;
}

}  // namespace
