// Fuzz target: the DSL, the graph passes and the CPU JIT. The bytes become a short sequence of
// DSL calls: the random-DAG ops of tests/jit/random_dags.h (elementwise, broadcasting,
// reductions, layout), built through its Builder so values stay well-conditioned, plus
// matmul, layers (dense, conv2d), pooling, softmax, casts to i32 and back, argmax, concat, pad
// and grad. Shapes, axes, sizes and options come from the bytes and are often invalid: the
// DSL must reject those with towerjit::Error. A graph that builds runs through the CPU JIT
// and the reference interpreter, every fetched element within the error bound the
// interpreter derives for it (tests/jit/error_bound_check.h), as the random-DAG tests check.
//
// Graphs stay small (kMaxNodes calls, dimensions up to 5, batch up to 3): each run compiles a
// program, the slow part, and the compile cache (in the scratch folder) spares the recompile
// of a kernel seen before.
#include "fuzz_util.h"
#include "random_dags.h"

namespace {

namespace fz = towerjit::fuzz;
using fz::Bytes;

constexpr int kMaxNodes = 12;

// Small dimensions, the batch, and 0 (empty tensors).
Shape read_shape(Bytes& in, int max_rank = 4) {
  static const int64_t dims[] = {kBatch, 1, 2, 3, 5, 0, 4, 1};
  std::vector<int64_t> s(in.u8() % (max_rank + 1));
  for (auto& d : s) d = dims[in.u8() % 8];
  return Shape(s);
}

// An axis in [-5, 4]: in range for most tensors, out of range for the rest.
int read_axis(Bytes& in) { return static_cast<int>(in.u8() % 10) - 5; }

std::vector<int> read_axes(Bytes& in) {
  std::vector<int> axes(in.u8() % 4);
  for (int& a : axes) a = read_axis(in);
  return axes;
}

std::vector<int64_t> read_sizes(Bytes& in, int n, int lo, int hi) {
  std::vector<int64_t> v(n);
  for (auto& x : v) x = lo + in.u8() % (hi - lo + 1);
  return v;
}

// The random-DAG ops, by name (random_dags.h builds them).
const std::vector<std::string>& dag_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> all = {"input", "where", "addc", "mulc", "sum", "mean", "max",
                                    "transpose", "slice", "reshape", "broadcast_to"};
    all.insert(all.end(), kUnary.begin(), kUnary.end());
    all.insert(all.end(), kBinary.begin(), kBinary.end());
    return all;
  }();
  return ops;
}

// One random-DAG node from the bytes; operands are earlier nodes.
NodeDesc read_dag_node(const std::string& op, Bytes& in, const Builder& b) {
  NodeDesc d{.op = op};
  auto node = [&] { return static_cast<int>(in.u8() % b.size()); };
  const int args = op == "where" ? 3 : std::count(kBinary.begin(), kBinary.end(), op) ? 2 : op == "input" ? 0 : 1;
  for (int k = 0; k < args; ++k) d.in.push_back(node());
  if (op == "input" || op == "reshape" || op == "broadcast_to") d.shape = read_shape(in);
  if (op == "sum" || op == "mean" || op == "max" || op == "transpose") d.axes = read_axes(in);
  d.keepdims = in.u8() & 1;
  if (op == "slice") {
    const int r = in.u8() % 4;
    d.begin = read_sizes(in, r, -1, 3);
    d.end = read_sizes(in, r, -1, 5);  // -1 is kBatch: the whole batch axis
  }
  if (op == "addc" || op == "mulc") d.c = (static_cast<int>(in.u8()) - 128) / 64.0;
  return d;
}

// The ops random_dags.h does not build; appends one node to `b`. Bounds as Builder's: a
// magnitude each value stays below, operands squashed with tanh above their op's limit.
void add_extra_op(int which, Bytes& in, Builder& b) {
  auto node = [&] { return static_cast<int>(in.u8() % b.size()); };
  const int a = node();
  double x = 0, y = 0;
  const Tensor t = b.operand(a, 3, x);
  const Shape& s = t.shape();
  const int64_t last = s.rank() > 0 && s[s.rank() - 1] > 0 ? s[s.rank() - 1] : 7;
  switch (which) {
    case 0: {
      const Tensor u = b.operand(node(), 3, y);
      return b.push(tj::matmul(t, u), x * y * last);
    }
    case 1: {  // glorot weights lie within sqrt(6 / (in + out)) <= 1.8
      const int64_t units = 1 + in.u8() % 3;
      const std::string name = "dense" + std::to_string(in.u8() % 2);  // a repeated name reuses
      return b.push(tj::dense(t, units, name), x * last * 1.8 + 1);
    }
    case 2: {
      const int64_t filters = 1 + in.u8() % 2;
      const int k = 1 + in.u8() % 3;
      const tj::Conv2DLayerOptions o{.stride = 1 + in.u8() % 2, .pad = in.u8() % 2};
      return b.push(tj::conv2d(t, filters, k, "conv" + std::to_string(in.u8() % 2), o), x * 2 * 45 + 1);
    }
    case 3: {
      const tj::Pool2DOptions o{.kernel = in.u8() % 4, .stride = in.u8() % 3, .pad = in.u8() % 2};
      return b.push(in.u8() & 1 ? tj::max_pool2d(t, o) : tj::avg_pool2d(t, o), x);
    }
    case 4: return b.push(tj::softmax(t, read_axis(in)), 1);
    case 5: return b.push(tj::log_softmax(t, read_axis(in)), 2 * x + 5);
    case 6: {
      const std::vector<int> axes = read_axes(in);
      return b.push(tj::logsumexp(t, axes, in.u8() & 1), x + 5);
    }
    case 7: {  // to i32 and, unless the byte says to stay there, back
      Tensor i = tj::cast(t * 4.0, tj::DType::i32);
      return b.push(in.u8() & 1 ? i : tj::cast(i, tj::DType::f32), 4 * x + 1);
    }
    case 8: return b.push(tj::cast(tj::argmax(t, read_axis(in)), tj::DType::f32), 5);
    case 9: {
      const Tensor u = b.operand(node(), 3, y);
      return b.push(tj::concat({t, u}, read_axis(in)), std::max(x, y));
    }
    case 10: {
      const int r = s.rank();
      const auto low = read_sizes(in, r, -1, 2), high = read_sizes(in, r, 0, 2);
      return b.push(tj::pad(t, low, high), x);
    }
    default: {  // grad of a scalar loss with respect to one or two earlier nodes
      const Tensor loss = tj::sum(t * t);
      std::vector<Tensor> wrt = {b[node()]};
      if (in.u8() & 1) wrt.push_back(b[node()]);
      for (const Tensor& g : tj::grad(loss, wrt)) b.push(g, 1e3);
      return;
    }
  }
}
constexpr int kExtraOps = 12;

// Runs the fetches both ways; a difference beyond the bounds is a finding.
void compare(const tj::Graph& g, const std::vector<Tensor>& fetches, const tj::reference::Feeds& feeds) {
  tj::reference::Variables vars = tj::reference::initialize_variables(g, 1);
  const JitRun r = run_both(g, fetches, feeds, vars);
  for (size_t i = 0; i < r.ref.size(); ++i)
    if (auto violation = bound_violation(r.jit[i], r.ref[i], r.bound[i]))
      fz::finding("the CPU JIT differs from the reference in fetch " + std::to_string(i) + ": " + *violation +
                  "\ngraph:\n" + g.str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A compile cache of the target's own: recompiling a kernel seen before costs a file read.
  static const bool cache_set = [] {
    ::setenv("TOWERJIT_CACHE_DIR", (fz::scratch_dir() / "cache").c_str(), 1);
    ::unsetenv("TOWERJIT_CACHE");
    return true;
  }();
  (void)cache_set;
  Bytes in(data, size);
  const int64_t batch = 1 + in.u8() % 3;
  tj::Graph g;
  tj::GraphScope use(g);
  Builder b("");
  tj::reference::Feeds feeds;
  std::vector<Tensor> fetches;
  std::vector<int> inputs;  // the nodes fed, by index
  try {
    inputs.push_back(0);
    b.add({.op = "input", .shape = read_shape(in, 3)});
    for (int n = 0; n < kMaxNodes && !in.empty(); ++n) {
      const int which = in.u8() % (dag_ops().size() + kExtraOps);
      if (which >= static_cast<int>(dag_ops().size())) {
        add_extra_op(which - static_cast<int>(dag_ops().size()), in, b);
        continue;
      }
      const NodeDesc d = read_dag_node(dag_ops()[which], in, b);
      if (d.op == "input") inputs.push_back(b.size());
      b.add(d);
    }
    for (int i : inputs) feeds[b.input_name(i)] = random_array(b[i].shape().bind(batch), 1000 + i);
    fetches.push_back(b[b.size() - 1]);
    if (b.size() > 1) fetches.push_back(b[in.u8() % (b.size() - 1)]);
  } catch (const tj::Error& e) {
    fz::expect_user_error(e);  // a call the DSL rejects: the case ends here
    return 0;
  }
  // Triage: TOWERJIT_FUZZ_VERBOSE=1 prints each graph that built (with TOWERJIT_DUMP, its kernels).
  static const bool verbose = std::getenv("TOWERJIT_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "batch %lld, graph:\n%s", static_cast<long long>(batch), g.str().c_str());
  try {
    compare(g, fetches, feeds);
  } catch (const tj::Error& e) {
    fz::expect_user_error(e);
  }
  return 0;
}
