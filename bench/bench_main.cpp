// towerjit_bench: the CPU backend's training step against PyTorch's, on this machine, in one
// run (issue 3, "Speed"), and against today's peers (bench/peers.h: PyTorch 2.x eager and
// torch.compile, JAX). One JSON line per workload on stdout; progress on stderr.
//
//   build/bench/towerjit_bench [--steps 50] [--warmup 10] [--rounds 3] [--workload cnn]...
//                              [--peers torch-eager,torch-compile,jax | --peers none] [--no-torch]
//                              [--precision f32|bf16|f16]
//   build/bench/towerjit_bench --gpu-model h200 --workload mlp|cnn|resnet [--batch N]   (bench/gpu_model.h)
//
// For each workload: compile cold (a fresh TOWERJIT_CACHE_DIR) and warm (the same program
// again: a cache hit); then rounds of PyTorch's settings and our warm-up and timed steps in
// turn, on fixed random data (the same batch every step); each side's figure is the
// median over rounds of a round's median step. The GEMM floor times each sgemm of the step alone on
// its shape. A profiled pass (CpuProgram::step_times) says where the step's time goes, and each
// loop kernel's bytes and GB/s against the machine's measured copy bandwidth (bench/copy_bandwidth.h).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "bench/copy_bandwidth.h"
#include "bench/gemm_floor.h"
#include "bench/gpu_model.h"
#include "bench/peer_isa_cap.h"
#include "bench/peers.h"
#include "jit/compile_options.h"
#include "jit/cpu/cpu_isa.h"
#include "jit/cpu/dedupe_functions.h"
#include "jit/kir/traffic.h"
#include "jit/passes/half_matmuls.h"
#include "runtime/cpu/blas.h"
#include "bench/torch_runner.h"
#include "bench/train_step.h"
#include "dsl/error.h"

namespace tj = towerjit;
namespace bench = towerjit::bench;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kThreads = 2;  // the machine's cores

struct Options {
  int steps = 50, warmup = 10, profile_steps = 20;
  int rounds = 3;  // PyTorch then ours, this many times in turn
  std::vector<std::string> workloads;
  bool torch = true;  // false: no Python baseline at all, Debian's PyTorch nor the peers
  // --precision bf16|f16: towerjit's matrix products take 16-bit operands (the precision policy,
  // jit/passes/half_matmuls.h), and the peers run their own mixed precision (torch.autocast;
  // JAX's products and convolutions on 16-bit operands).
  tj::DType precision = tj::DType::f32;
  std::vector<std::string> peers = bench::peer_names();
};

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    if (end > pos) out.push_back(list.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw tj::Error("towerjit_bench: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--profile-steps") {  // the profile's figures are per step: at least one
      o.profile_steps = std::stoi(value());
      if (o.profile_steps < 1)
        throw tj::Error("towerjit_bench: --profile-steps " + std::to_string(o.profile_steps) +
                        " profiles no step; give 1 or more (the profile is the JSON's per-op figures)");
    }
    else if (a == "--rounds") o.rounds = std::max(1, std::stoi(value()));
    else if (a == "--workload") o.workloads.push_back(value());
    else if (a == "--no-torch") o.torch = false;
    else if (a == "--precision") {
      const std::string v = value();
      const std::optional<tj::DType> t = tj::dtype_from_name(v);
      if (!t || *t == tj::DType::i32) throw tj::Error("towerjit_bench: --precision " + v + " is not f32, bf16 or f16");
      o.precision = *t;
    }
    else if (a == "--peers") {
      const std::string v = value();
      o.peers = v == "none" ? std::vector<std::string>{} : split_commas(v);
      const std::vector<std::string> known = bench::peer_names();
      for (const std::string& p : o.peers)
        if (std::find(known.begin(), known.end(), p) == known.end())
          throw tj::Error("towerjit_bench: unknown peer \"" + p + "\" in --peers " + v +
                          "; name some of torch-eager, torch-compile, jax (commas between), or none");
    } else throw tj::Error("towerjit_bench: unknown argument " + a +
                           "; use --steps N, --warmup N, --profile-steps N, --rounds N, --workload NAME, "
                           "--peers LIST|none, --no-torch, --precision f32|bf16|f16");
  }
  if (o.workloads.empty()) o.workloads = bench::workload_names();
  return o;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// CPU time (user + system) of every thread of this process so far, in ms: unlike wall time it
// hardly grows when other processes share the cores, so a cold compile measured on a busy
// machine still says what it costs.
double process_cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double round3(double v) { return std::round(v * 1000) / 1000; }

// The 1-, 5- and 15-minute load averages: the machine is shared, and its load says how far
// a run's figures can be trusted.
json load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return nullptr;
  return {round3(l[0]), round3(l[1]), round3(l[2])};
}

// A step of the program in words: "MatMul [256,512]", "kernel k12 [B,512] (7 ops)", "copy".
std::string describe(const tj::kir::Program& p, const tj::kir::Step& s, int64_t batch) {
  using K = tj::kir::Step::Kind;
  if (s.kind == K::library) {
    const auto& c = p.calls[s.index];
    std::string t = std::string(tj::op_name(c.op)) + " -> " + p.buffers[c.output].shape.bind(batch).str();
    if (c.op == tj::Op::MatMul) t += std::string(" ") + (c.transpose_a ? "T" : "N") + (c.transpose_b ? "T" : "N");
    if (c.codes >= 0) t += c.op == tj::Op::Conv2D ? " (max pooled)" : " (dy routed by codes)";
    return t;
  }
  if (s.kind == K::copy) return "copy -> " + p.buffers[p.copies[s.index].to].name;
  const auto& k = p.kernels[s.index];
  if (!k.parts.empty()) return "kernel " + k.name + " (" + std::to_string(k.parts.size()) + " parts)";
  return "kernel " + k.name + " " + k.space.bind(batch).str() + (k.reduce != tj::Op::Constant ? " reduce" : "") +
         " (" + std::to_string(k.nodes.size()) + " nodes)";
}

// Each loop kernel's bytes and rate against the machine's copy bandwidth on the pool's
// threads, the slowest first, and their total: the memory roofline of the loop kernels.
json loop_kernel_rates(const tj::kir::Program& p, const std::vector<double>& ms_per_step, int64_t batch,
                       const bench::CopyBandwidth& bw) {
  double total_ms = 0, total_bytes = 0;
  std::vector<std::pair<double, int>> order;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].kind == tj::kir::Step::Kind::kernel) order.push_back({ms_per_step[i], static_cast<int>(i)});
  std::sort(order.rbegin(), order.rend());
  json each = json::array();
  for (const auto& [ms, i] : order) {
    const tj::kir::Kernel& k = p.kernels[p.steps[i].index];
    const double bytes = static_cast<double>(tj::kir::bytes_moved(p, k).at(batch));
    const double gbps = ms > 0 ? bytes / (ms * 1e6) : 0;
    total_ms += ms, total_bytes += bytes;
    each.push_back({{"step", i}, {"what", describe(p, p.steps[i], batch)}, {"ms", round3(ms)},
                    {"mb", round3(bytes / 1e6)}, {"gbps", round3(gbps)}, {"of_copy_bandwidth", round3(gbps / bw.pool)}});
  }
  const double gbps = total_ms > 0 ? total_bytes / (total_ms * 1e6) : 0;
  return {{"ms", round3(total_ms)}, {"mb", round3(total_bytes / 1e6)}, {"gbps", round3(gbps)},
          {"of_copy_bandwidth", round3(gbps / bw.pool)}, {"kernels", each}};
}

// What by_kind_ms files a step under: "loop kernels", "copies", or the library call's op.
std::string step_kind(const tj::kir::Program& p, const tj::kir::Step& s) {
  if (s.kind == tj::kir::Step::Kind::kernel) return "loop kernels";
  if (s.kind == tj::kir::Step::Kind::copy) return "copies";
  return std::string(tj::op_name(p.calls[s.index].op));
}

// Where the time of a step goes: the top steps, totals by kind of step, and the loop kernels'
// bytes and GB/s.
json profile(tj::CpuProgram& program, const tj::HostFeeds& feeds, tj::HostVariables& vars,
             int64_t batch, int steps, const bench::CopyBandwidth& bw) {
  // One step first, unprofiled, as every timed round warms up: the profile follows the products'
  // timing (time_gemms), which leaves the caches full of its own matrices and the pool's
  // threads asleep, and its first step had taken twice the steady one in its first kernels.
  program.run(feeds, vars, 0);
  std::vector<double> times;
  program.step_times = &times;
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) program.run(feeds, vars, i);
  const double step_ms = ms_since(start) / steps;
  program.step_times = nullptr;
  const auto& p = program.program();
  std::map<std::string, double> by_kind;
  std::vector<std::pair<double, int>> order;
  double covered = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    const double ms = times[i] / steps;
    covered += ms;
    order.push_back({ms, static_cast<int>(i)});
    by_kind[step_kind(p, p.steps[i])] += ms;
  }
  by_kind["outside steps (bind, plan, fetch)"] = std::max(0.0, step_ms - covered);
  std::sort(order.rbegin(), order.rend());
  json top = json::array();
  for (size_t i = 0; i < order.size() && i < 10; ++i)
    top.push_back({{"step", order[i].second}, {"what", describe(p, p.steps[order[i].second], batch)},
                   {"ms", round3(order[i].first)}});
  json kinds = json::object();
  for (const auto& [k, v] : by_kind) kinds[k] = round3(v);
  int kernels = 0, calls = 0;
  for (const auto& s : p.steps) (s.kind == tj::kir::Step::Kind::kernel ? kernels : calls)++;
  std::vector<double> per_step(times.size());
  for (size_t i = 0; i < times.size(); ++i) per_step[i] = times[i] / steps;
  return {{"profiled_step_ms", round3(step_ms)}, {"steps", p.steps.size()}, {"loop_kernels", kernels}, {"other_steps", calls},
          {"by_kind_ms", kinds}, {"top_steps", top}, {"loop_kernel_rates", loop_kernel_rates(p, per_step, batch, bw)}};
}

// Each convolution op's share of the pool's sgemm peak, paired: one more profiled step, then a
// sample of the peak at once (bench::sgemm_pool_sample), `steps` times; each op's rate in a
// step against the sample beside it, the median over the pairs. A shared machine's speed
// swings by up to 2x from one minute to the next, so the run's best peak (the roof of
// `of_sgemm_peak`) may come from a quieter stretch than the step's: a pair sees one stretch.
std::map<std::string, double> paired_conv_shares(tj::CpuProgram& program, const tj::HostFeeds& feeds,
                                                 tj::HostVariables& vars, tj::ThreadPool& pool,
                                                 const std::map<std::string, double>& conv_flops, int steps) {
  const auto& p = program.program();
  std::map<std::string, std::vector<double>> shares;
  for (int i = 0; i < steps; ++i) {
    // A step untimed first, so that the timed one finds the caches as steps leave them for
    // each other, not as the last sample's matrices did.
    program.run(feeds, vars, 2 * i);
    std::vector<double> times;
    program.step_times = &times;
    program.run(feeds, vars, 2 * i + 1);
    program.step_times = nullptr;
    const double peak = bench::sgemm_pool_sample(pool);
    std::map<std::string, double> ms;
    for (size_t s = 0; s < times.size(); ++s) ms[step_kind(p, p.steps[s])] += times[s];
    for (const auto& [op, f] : conv_flops)
      if (ms[op] > 0) shares[op].push_back(f / (ms[op] * 1e6) / peak);
  }
  std::map<std::string, double> out;
  for (const auto& [op, v] : shares) out[op] = median(v);
  return out;
}

// Compiles and times one workload. The timed steps come in o.rounds rounds of o.steps, each
// after a call of before_round(round) (which times PyTorch), so that both sides sample the
// same stretches of this noisy machine; step_ms is the median over rounds of each round's
// median.
json run_workload(const std::string& name, const Options& o, tj::ThreadPool& pool,
                  const bench::SgemmPeak& peak, const bench::CopyBandwidth& bw,
                  const bench::CopyBandwidth& bw_cache, const std::function<void(int)>& before_round) {
  bench::TrainStep step = bench::build_train_step(name);
  const tj::HostFeeds feeds = bench::random_feeds(step, 42);
  tj::HostVariables vars = bench::initial_variables(step, 1);

  auto t0 = Clock::now();
  const double cpu0 = process_cpu_ms();
  auto cold = std::make_unique<tj::CpuProgram>(*step.graph, std::vector<tj::Tensor>{step.loss}, true, &pool);
  const double cold_ms = ms_since(t0);
  const double cold_cpu_ms = process_cpu_ms() - cpu0;
  const bool cold_hit = cold->compile_stats().cache_hit;
  cold.reset();
  t0 = Clock::now();
  tj::CpuProgram program(*step.graph, {step.loss}, true, &pool);
  const double warm_ms = ms_since(t0);

  std::vector<float> losses;
  int64_t step_index = 0;
  auto run_step = [&] { losses.push_back(program.run(feeds, vars, step_index++)[0].f32[0]); };
  std::vector<double> times, round_ms;
  for (int r = 0; r < o.rounds; ++r) {
    before_round(r);
    // Warm-up steps in every round, after the peers' processes have had the cores, as each peer
    // warms up in its own run before it is timed.
    for (int i = 0; i < o.warmup; ++i) run_step();
    std::vector<double> round;
    for (int i = 0; i < o.steps; ++i) {
      t0 = Clock::now();
      run_step();
      round.push_back(ms_since(t0));
    }
    round_ms.push_back(median(round));
    times.insert(times.end(), round.begin(), round.end());
  }
  const double step_ms = median(round_ms);

  const auto gemms = bench::time_gemms(bench::gemm_shapes(program.program(), step.batch), pool);
  double floor_ms = 0, flops = 0;
  json gemm_list = json::array();
  for (const auto& g : gemms) {
    floor_ms += g.total_ms();
    flops += g.shape.flops();
    gemm_list.push_back({{"op", g.shape.op}, {"mnk", {g.shape.m, g.shape.n, g.shape.k}},
                         {"trans", std::string(g.shape.transpose_a ? "T" : "N") + (g.shape.transpose_b ? "T" : "N")},
                         {"count", g.shape.count}, {"ms", round3(g.total_ms())},
                         {"openblas_threads_ms", round3(g.openblas_ms)}, {"split_ms", round3(g.split_ms)}});
  }

  json j;
  j["workload"] = name;
  j["precision"] = std::string(tj::dtype_name(tj::precision_policy().matmul_operands));
  j["batch"] = step.batch;
  j["samples_per_s"] = round3(step.batch / step_ms * 1e3);
  j["step_ms"] = round3(step_ms);
  j["step_ms_min"] = round3(*std::min_element(times.begin(), times.end()));
  j["step_ms_max"] = round3(*std::max_element(times.begin(), times.end()));
  j["steps"] = o.steps;
  j["rounds"] = o.rounds;
  json rounds = json::array();
  for (double ms : round_ms) rounds.push_back(round3(ms));
  j["round_step_ms"] = rounds;
  j["gemm_floor_ms"] = round3(floor_ms);
  j["gemm_gflop"] = round3(flops / 1e9);
  j["step_over_floor"] = round3(step_ms / floor_ms);
  j["compile_cold_ms"] = round3(cold_ms);
  j["compile_cold_cpu_ms"] = round3(cold_cpu_ms);
  j["compile_warm_ms"] = round3(warm_ms);
  j["cold_cache_hit"] = cold_hit;
  // Kernels the LLVM module defines, and those compiled: the rest equal one of these but for
  // their names and share its code (jit/cpu/dedupe_functions.h).
  const tj::cpujit::DedupedModule deduped = tj::cpujit::dedupe_functions(program.llvm_ir());
  j["compiled_functions"] = {{"defined", deduped.functions}, {"compiled", deduped.distinct}};
  j["warm_cache_hit"] = program.compile_stats().cache_hit;
  j["peak_bytes"] = program.peak_bytes(step.batch);
  j["loss_first"] = losses.front();
  j["loss_last"] = losses.back();
  // OpenBLAS picks its kernels by CPU model at load time; an unknown model falls back to the
  // SSE3 "Prescott" kernels (see docs/performance.md). OPENBLAS_CORETYPE overrides it.
  j["openblas_core"] = towerjit::cpujit::blas().core;
  j["openblas_threads"] = 1;  // towerjit's setting; the pool splits products (runtime/cpu/gemm.h)
  j["gemms"] = gemm_list;
  j["profile"] = profile(program, feeds, vars, step.batch, o.profile_steps, bw);
  // Each convolution op's rate in its profiled time, against the sgemm peak on as many threads.
  std::map<std::string, double> conv_flops;
  for (const auto& g : gemms)
    if (g.shape.op != "matmul") conv_flops[g.shape.op] += g.shape.flops();
  const std::map<std::string, double> paired =
      conv_flops.empty() ? std::map<std::string, double>{}
                         : paired_conv_shares(program, feeds, vars, pool, conv_flops, std::max(o.profile_steps, 5));
  // The steps of each op that do a max pool's work too (jit/passes/conv_pools.h: the pool, or
  // routing its gradient), whose time is then the convolution's and the pool's.
  std::map<std::string, int> pooling;
  for (const auto& s : program.program().steps)
    if (s.kind == tj::kir::Step::Kind::library && program.program().calls[s.index].codes >= 0)
      ++pooling[step_kind(program.program(), s)];
  json conv = json::object();
  for (const auto& [op, f] : conv_flops) {
    const double ms = j["profile"]["by_kind_ms"].value(op, 0.0);
    if (ms <= 0) continue;
    conv[op] = {{"ms", round3(ms)}, {"gflops", round3(f / (ms * 1e6))},
                {"of_sgemm_peak", round3(f / (ms * 1e6) / peak.pool)}};
    if (paired.count(op)) conv[op]["of_paired_sgemm_peak"] = round3(paired.at(op));
    if (pooling.count(op)) conv[op]["steps_with_pools"] = pooling.at(op);
  }
  if (!conv.empty()) j["convolutions"] = conv;
  j["sgemm_peak_gflops"] = {{"one_thread", round3(peak.one_thread)}, {"pool", round3(peak.pool)}};
  j["copy_bandwidth_gbps"] = {{"one_thread", round3(bw.one_thread)}, {"pool", round3(bw.pool)},
                              {"buffer_mb", round3(bw.buffer_bytes / 1e6)}};
  j["copy_bandwidth_cache_gbps"] = {{"one_thread", round3(bw_cache.one_thread)}, {"pool", round3(bw_cache.pool)},
                                    {"buffer_mb", round3(bw_cache.buffer_bytes / 1e6)}};
  {  // the loop kernels' total against the cache-sized copy too
    json& lk = j["profile"]["loop_kernel_rates"];
    lk["of_cache_copy_bandwidth"] = round3(lk["gbps"].get<double>() / bw_cache.pool);
  }
  j["cpu_isa"] = tj::cpujit::isa_name(tj::cpujit::cpu_isa());
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  // The GPU cost model's step (bench/gpu_model.h): a command of its own.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--gpu-model") return bench::gpu_model_main(argc, argv);
  const Options o = parse(argc, argv);
  tj::set_precision_policy({.matmul_operands = o.precision});  // every workload compiles under it
  // A fresh compile cache: the first program of each workload compiles cold, the second hits.
  std::string tmpl = (std::filesystem::temp_directory_path() / "towerjit-bench-XXXXXX").string();
  const char* cache_dir = mkdtemp(tmpl.data());
  if (!cache_dir) throw tj::Error("towerjit_bench: cannot create a temporary cache directory");
  tj::set_compile_options({.cache_dir = cache_dir});  // TOWERJIT_CACHE_DIR still overrides it

  const std::string precision_flag = "--precision " + std::string(tj::dtype_name(o.precision));
  std::string torch_missing;
  std::optional<std::string> python;
  if (!o.torch) torch_missing = "skipped (--no-torch)";
  else python = bench::find_torch_python(&torch_missing);
  std::vector<bench::Peer> peers;
  if (o.torch && !o.peers.empty()) {
    std::cerr << "towerjit_bench: looking for the peers (" << TOWERJIT_BENCH_DIR "/peer_probe.py)...\n";
    peers = bench::choose_peers(bench::probe_pythons(TOWERJIT_BENCH_DIR), o.peers, TOWERJIT_BENCH_DIR);
    // Under --precision bf16 / f16 each peer takes its own mixed precision: torch.autocast, and
    // JAX's products and convolutions on 16-bit operands (bench/jax_baseline.py).
    for (bench::Peer& p : peers) p.args += (p.args.empty() ? "" : " ") + precision_flag;
    for (const bench::Peer& p : peers)
      std::cerr << "towerjit_bench: peer " << p.name << ": "
                << (p.unavailable.empty() ? p.version + " (" + p.python + ")" : "unavailable: " + p.unavailable) << "\n";
  }

  // Read before towerjit loads OpenBLAS, which sets OPENBLAS_CORETYPE in this process.
  const char* user_core = std::getenv("OPENBLAS_CORETYPE");  // null: unset
  std::vector<bench::TorchSetting> settings = bench::torch_settings(user_core, tj::cpujit::blas().core);
  // Under TOWERJIT_CPU_ISA below this CPU's widest level, every PyTorch and JAX run is held to
  // the same level (bench/peer_isa_cap.h).
  const std::string isa_cap =
      bench::peer_isa_cap(tj::cpujit::cpu_isa(), tj::cpujit::widest_isa(), std::getenv("XLA_FLAGS"));
  if (!isa_cap.empty()) {
    std::cerr << "towerjit_bench: the peers held to " << tj::cpujit::isa_name(tj::cpujit::cpu_isa()) << ": " << isa_cap
              << "\n";
    for (bench::TorchSetting& s : settings) s.env += " " + isa_cap;
    for (bench::Peer& p : peers)
      for (bench::TorchSetting& s : p.settings) s.env += " " + isa_cap;
  }
  tj::ThreadPool pool(kThreads);
  // The peak and the bandwidths are what the machine can do: measured again before each
  // workload, the best so far kept. A slow stretch of a shared machine during one measurement
  // (a pool's sgemm peak once read 105 GFLOP/s, one thread's rate, against 180-200 in every
  // other run) would otherwise put every rate of the run against too low a roof.
  bench::SgemmPeak peak;
  bench::CopyBandwidth bw, bw_cache;
  for (const std::string& name : o.workloads) {
    peak = bench::best_of(peak, bench::sgemm_peak(pool));
    bw = bench::best_of(bw, bench::copy_bandwidth(pool));
    bw_cache = bench::best_of(bw_cache, bench::copy_bandwidth(pool, int64_t{8} << 20));
    // PyTorch and ours in turn, round by round, so both see the same machine load.
    std::map<std::string, std::vector<double>> torch_rounds;  // setting -> each round's step ms
    // peer -> setting -> each round's step ms; peer -> its first step (compile) in round 1.
    std::map<std::string, std::map<std::string, std::vector<double>>> peer_rounds;
    std::map<std::string, double> peer_first_ms;
    std::map<std::string, std::string> peer_capability;  // the PyTorch peers' vector level, as reported
    // peer -> setting -> the attention each round's figure used (gpt-small on PyTorch 2.x)
    std::map<std::string, std::map<std::string, std::vector<std::string>>> peer_attention;
    const json load_before = load_average();
    auto torch_round = [&](int round) {
      for (const bench::Peer& peer : peers) {
        if (!peer.unavailable.empty()) continue;
        std::cerr << "towerjit_bench: " << name << ": round " << round + 1 << ": " << peer.name << " ("
                  << peer.version << ", " << peer.settings.size() << " settings)...\n";
        const bench::TorchResults r = bench::run_torch(peer.python, peer.script, peer.settings, {name}, o.steps,
                                                       o.warmup, peer.args);
        for (const auto& [setting, per] : r)
          if (per.count(name)) {
            peer_rounds[peer.name][setting].push_back(per.at(name).step_ms);
            if (round == 0) peer_first_ms[peer.name] = std::max(peer_first_ms[peer.name], per.at(name).first_step_ms);
            if (!per.at(name).cpu_capability.empty()) peer_capability[peer.name] = per.at(name).cpu_capability;
            if (!per.at(name).attention.empty()) peer_attention[peer.name][setting].push_back(per.at(name).attention);
          }
      }
      if (!python) return;
      std::cerr << "towerjit_bench: " << name << ": round " << round + 1 << ": PyTorch (" << *python << ", "
                << settings.size() << " settings)...\n";
      const bench::TorchResults torch = bench::run_torch(*python, TOWERJIT_BENCH_DIR "/torch_baseline.py",
                                                         settings, {name}, o.steps, o.warmup, precision_flag);
      for (const auto& [setting, per] : torch)
        if (per.count(name)) torch_rounds[setting].push_back(per.at(name).step_ms);
      std::cerr << "towerjit_bench: " << name << ": round " << round + 1 << ": towerjit...\n";
    };
    json j = run_workload(name, o, pool, peak, bw, bw_cache, torch_round);
    if (python && torch_rounds.empty()) torch_missing = "the baseline script produced no figures (see stderr)";
    const double batch = j["batch"].get<double>();
    json all = json::object();
    std::map<std::string, double> torch_ms;  // setting -> median over rounds
    std::string best[2];  // the best setting as installed, and with our kernels
    for (const bench::TorchSetting& setting : settings) {
      auto it = torch_rounds.find(setting.name);
      if (it == torch_rounds.end()) continue;
      const double ms = torch_ms[setting.name] = median(it->second);
      json per_round = json::array();
      for (double r : it->second) per_round.push_back(round3(r));
      all[setting.name] = {{"samples_per_s", round3(batch / ms * 1e3)}, {"step_ms", round3(ms)}, {"round_step_ms", per_round}};
      std::string& b = best[setting.same_kernels];
      if (b.empty() || ms < torch_ms[b]) b = setting.name;
    }
    const double ours = j["samples_per_s"].get<double>();
    if (best[0].empty()) {
      j["torch_samples_per_s"] = nullptr;
      j["torch_config"] = nullptr;
      j["ratio"] = nullptr;
      j["torch_unavailable"] = torch_missing.empty() ? "no figure for this workload" : torch_missing;
    } else {
      const double t = batch / torch_ms[best[0]] * 1e3;
      j["torch_samples_per_s"] = round3(t);
      j["torch_config"] = best[0];
      j["ratio"] = round3(ours / t);
    }
    if (!best[1].empty()) {
      const double t = batch / torch_ms[best[1]] * 1e3;
      j["torch_same_kernels"] = {{"samples_per_s", round3(t)}, {"config", best[1]}, {"ratio", round3(ours / t)}};
    }
    j["torch_all"] = all;
    // Today's peers: each at its best setting, and towerjit against the best of them. A peer
    // without a figure is named with the reason in "missing", never silently left out.
    json peer_json = json::object(), ratios = json::object(), missing = json::object();
    std::string best_peer;
    double best_peer_ms = 0;
    for (const bench::Peer& peer : peers) {
      std::string why = peer.unavailable;
      const auto pr = peer_rounds.find(peer.name);
      if (why.empty() && pr == peer_rounds.end()) why = "its script produced no figures for this workload (see stderr)";
      if (!why.empty()) {
        peer_json[peer.name] = {{"unavailable", why}};
        ratios[peer.name] = nullptr;
        missing[peer.name] = why;
        continue;
      }
      json per_setting = json::object();
      std::string best;
      double best_ms = 0;
      for (const auto& [setting, rounds] : pr->second) {
        const double ms = median(rounds);
        json per_round = json::array();
        for (double r : rounds) per_round.push_back(round3(r));
        per_setting[setting] = {{"step_ms", round3(ms)}, {"round_step_ms", per_round}};
        if (const auto& forms = peer_attention[peer.name][setting]; !forms.empty())
          per_setting[setting]["round_attention"] = forms;
        if (best.empty() || ms < best_ms) best = setting, best_ms = ms;
      }
      const double t = batch / best_ms * 1e3;
      peer_json[peer.name] = {{"version", peer.version}, {"python", peer.python}, {"config", best},
                              {"step_ms", round3(best_ms)}, {"samples_per_s", round3(t)}, {"ratio", round3(ours / t)},
                              {"first_step_ms", round3(peer_first_ms[peer.name])}, {"all", per_setting}};
      if (peer_capability.count(peer.name)) peer_json[peer.name]["cpu_capability"] = peer_capability[peer.name];
      if (!isa_cap.empty()) {  // held to towerjit's level?
        const std::string why = bench::peer_not_held(peer.name, peer_capability[peer.name], tj::cpujit::cpu_isa(),
                                                     tj::cpujit::widest_isa());
        peer_json[peer.name]["held_to_level"] = why.empty();
        if (!why.empty()) {
          peer_json[peer.name]["not_held"] = why;
          std::cerr << "towerjit_bench: " << name << ": " << peer.name << " is not held to "
                    << tj::cpujit::isa_name(tj::cpujit::cpu_isa()) << ": " << why << "\n";
        }
      }
      ratios[peer.name] = round3(ours / t);
      if (best_peer.empty() || best_ms < best_peer_ms) best_peer = peer.name, best_peer_ms = best_ms;
    }
    if (!peers.empty()) {
      j["peers"] = peer_json;
      j["peer_ratios"] = ratios;
      j["vs_best_peer"] = best_peer.empty()
          ? json{{"peer", nullptr}, {"ratio", nullptr}, {"missing", missing}}
          : json{{"peer", best_peer}, {"step_ms", round3(best_peer_ms)},
                 {"ratio", round3(ours / (batch / best_peer_ms * 1e3))}, {"missing", missing}};
    }
    j["load_average"] = {{"before", load_before}, {"after", load_average()}};
    j["peer_isa_cap"] = isa_cap.empty() ? json(nullptr) : json(isa_cap);
    // The headline fields first, then the detail.
    json line;
    for (const char* k : {"workload", "samples_per_s", "step_ms", "torch_samples_per_s", "torch_config", "ratio",
                          "torch_same_kernels", "peer_ratios", "vs_best_peer", "gemm_floor_ms", "compile_cold_ms", "compile_warm_ms", "peak_bytes"})
      line[k] = j[k];
    for (auto& [k, v] : j.items()) if (!line.contains(k) && j.contains(k)) line[k] = v;
    std::cout << line.dump() << std::endl;
  }
  std::filesystem::remove_all(cache_dir);
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
