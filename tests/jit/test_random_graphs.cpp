// Property tests: random DAGs of elementwise ops, broadcasts, reductions and layout ops, run
// through the CPU JIT and the reference interpreter, every element within its float32 error
// bound (tests/jit/error_bound_check.h). Case k is drawn from std::mt19937(k), so every run sees the same
// graphs; ten cases share one Graph and one CpuProgram to keep compiling cheap. A failing case is
// shrunk greedily (fewer fetches, ops replaced by their inputs or by fresh inputs) and the
// smallest failing case is printed with its graph and kernel IR.
#include "random_dags.h"

namespace {

Outcome run_on_cpu(const std::vector<Dag>& dags) {
  return run_dags(dags, [](auto&&... a) { return run_both(a...); }, "jit");
}

// Drops the nodes no fetch needs and renumbers the rest.
Dag compact(Dag d) {
  std::vector<bool> live(d.nodes.size(), false);
  for (int f : d.fetches) live[f] = true;
  for (int i = static_cast<int>(d.nodes.size()) - 1; i >= 0; --i)
    if (live[i])
      for (int in : d.nodes[i].in) live[in] = true;
  std::vector<int> id(d.nodes.size(), -1);
  Dag out = d;
  out.nodes.clear();
  for (size_t i = 0; i < d.nodes.size(); ++i)
    if (live[i]) {
      id[i] = static_cast<int>(out.nodes.size());
      out.nodes.push_back(d.nodes[i]);
      for (int& in : out.nodes.back().in) in = id[in];
    }
  for (int& f : out.fetches) f = id[f];
  return out;
}

// Smaller variants of `d`: one fetch fewer, one op replaced by one of its inputs (its uses
// rewired), or one op replaced by a fresh input of its shape.
std::vector<Dag> shrink_candidates(const Dag& d) {
  std::vector<Dag> out;
  for (size_t k = 0; d.fetches.size() > 1 && k < d.fetches.size(); ++k) {
    Dag c = d;
    c.fetches.erase(c.fetches.begin() + k);
    out.push_back(compact(c));
  }
  std::vector<Shape> shapes;
  {
    tj::Graph scratch;
    tj::GraphScope use(scratch);
    Builder b("");
    for (const auto& n : d.nodes) b.add(n);
    for (int i = 0; i < b.size(); ++i) shapes.push_back(b[i].shape());
  }
  for (int i = static_cast<int>(d.nodes.size()) - 1; i >= 0; --i) {
    if (d.nodes[i].op == "input") continue;
    for (int in : d.nodes[i].in) {
      Dag c = d;
      for (auto& n : c.nodes)
        for (int& x : n.in) x = x == i ? in : x;
      for (int& f : c.fetches) f = f == i ? in : f;
      if (d.nodes[in].op == "input" && std::count(c.fetches.begin(), c.fetches.end(), in)) continue;
      std::sort(c.fetches.begin(), c.fetches.end());
      c.fetches.erase(std::unique(c.fetches.begin(), c.fetches.end()), c.fetches.end());
      out.push_back(compact(c));
    }
    if (std::count(d.fetches.begin(), d.fetches.end(), i)) continue;
    Dag c = d;
    c.nodes[i] = {.op = "input", .shape = shapes[i]};
    out.push_back(compact(c));
  }
  return out;
}

// Greedy shrink: take the first smaller variant that still fails the same way, until none does.
Dag shrink(Dag d, bool threw) {
  int budget = 400;  // runs; each compiles a small program
  for (bool progress = true; progress && budget > 0;) {
    progress = false;
    for (const Dag& c : shrink_candidates(d)) {
      if (--budget < 0) break;
      const Outcome o = run_on_cpu({c});
      if (o.failed && o.threw == threw) {
        d = c;
        progress = true;
        break;
      }
    }
  }
  return d;
}

// Shrinks a failing case and fails (without stopping) with the smallest one, its graph and IR.
void report_smallest(const Dag& failing) {
  const Outcome first = run_on_cpu({failing});
  Dag small = shrink(failing, first.threw);
  const Outcome o = run_on_cpu({small});
  std::string text;
  {
    tj::Graph scratch;
    tj::GraphScope use(scratch);
    Builder b("");
    for (const auto& n : small.nodes) b.add(n);
    text = describe(small, &b);
  }
  FAIL_CHECK("random DAG differs from the reference interpreter (shrunk from "
             << failing.nodes.size() << " to " << small.nodes.size() << " nodes)\n"
             << text << o.detail << "graph:\n" << o.graph << "kernel IR:\n" << o.ir);
}

}  // namespace

TEST_CASE("random elementwise, broadcast, reduction and layout DAGs match the reference",
          "[cpu][jit][property][isa]") {
  tj::test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");  // random kernels: don't fill the cache
  std::vector<int> failing;  // seeds
  for (int first = 0; first < kCases; first += kCasesPerProgram) {
    const int64_t batch = kBatches[(first / kCasesPerProgram) % 3];
    std::vector<Dag> dags;
    for (int k = first; k < first + kCasesPerProgram; ++k)
      dags.push_back(random_dag(static_cast<uint32_t>(k), batch));
    const Outcome o = run_on_cpu(dags);
    if (!o.failed) continue;
    bool alone = false;
    for (const Dag& d : dags)  // which cases fail on their own
      if (run_on_cpu({d}).failed) {
        alone = true;
        if (failing.size() < 3) report_smallest(d);  // shrinking is slow: the first few only
        failing.push_back(static_cast<int>(d.seed));
      }
    if (!alone)
      FAIL_CHECK("cases " << first << ".." << first + kCasesPerProgram - 1
                          << " fail together but not alone:\n" << o.detail << o.ir);
  }
  std::ostringstream seeds;
  for (int s : failing) seeds << " " << s;
  INFO(kCases << " random DAGs, failing seeds:" << seeds.str());
  CHECK(failing.empty());
}

TEST_CASE("random DAG generation is deterministic and covers multi-output fusion",
          "[cpu][jit][property]") {
  for (uint32_t seed : {0u, 17u, 299u}) {
    const Dag a = random_dag(seed, 2), b = random_dag(seed, 2);
    REQUIRE(describe(a, nullptr) == describe(b, nullptr));
    REQUIRE(a.nodes.size() >= 5);
  }
  // What the cases lower to (lowering only, no compile): the shapes of fusion they exercise.
  int multi_output = 0, reductions = 0, views = 0, kernels = 0;
  for (uint32_t seed = 0; seed < kCases; ++seed) {
    const Dag d = random_dag(seed, 1);
    tj::Graph g;
    tj::GraphScope use(g);
    Builder b("");
    for (const auto& n : d.nodes) b.add(n);
    std::vector<int> ids;
    for (int f : d.fetches) ids.push_back(b[f].id());
    const tj::kir::Program p = tj::lower_graph(g, ids, {}).program;
    for (const auto& k : p.kernels) {
      ++kernels;
      multi_output += k.outputs.size() > 1;
      reductions += k.reduce != tj::Op::Constant;
    }
    for (const auto& buf : p.buffers) views += buf.alias_of >= 0;
  }
  INFO(kernels << " kernels: " << multi_output << " multi-output, " << reductions
               << " reductions, " << views << " views");
  CHECK(multi_output >= 30);
  CHECK(reductions >= 50);
  CHECK(views >= 5);
}
