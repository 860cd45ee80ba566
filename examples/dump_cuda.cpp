// Writes the CUDA C of a whole training step (forward, backward and an SGD-momentum apply
// written as update ops) and its index, on any machine: no GPU needed, and NVRTC only to add
// the PTX. With several towers (or async), the two programs the towers run instead: the tower
// step (loss and gradients, on each tower's slice) and the apply (fed the reduced gradients).
//
//   dump_cuda --model mlp --out /tmp/cuda     # mlp_train_step.cu, .ptx, .index.json, .kir
//   dump_cuda --model cnn | less              # the .cu, then the index, on standard output
//   dump_cuda --model gpt --out /tmp/cuda     # examples/char_lm's GPT (examples/gpt.h)
//   dump_cuda --towers 2 --out /tmp/cuda      # mlp_tower_step.*, mlp_apply.*, mlp_towers.txt
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "dsl/tower_program.h"
#include "examples/gpt.h"
#include "jit/cuda/cuda_dump.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/module_parts.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/passes/cut_collectives.h"
#include "jit/passes/pipeline.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {

// 784-512-512-10 on flat Fashion-MNIST images.
tj::Tensor mlp(tj::Tensor image) {
  auto h = tj::relu(tj::dense(image, 512, "fc1"));
  h = tj::relu(tj::dense(h, 512, "fc2"));
  return tj::dense(h, 10, "logits");
}

// conv3x3 1->16 + relu + maxpool2, conv3x3 16->32 + relu + maxpool2, dense 1568->10.
tj::Tensor cnn(tj::Tensor image) {
  auto x = tj::reshape(image, {tj::kBatch, 1, 28, 28});
  x = tj::max_pool2d(tj::relu(tj::conv2d(x, 16, 3, "conv1", {.pad = 1})));
  x = tj::max_pool2d(tj::relu(tj::conv2d(x, 32, 3, "conv2", {.pad = 1})));
  return tj::dense(tj::reshape(x, {tj::kBatch, 32 * 7 * 7}), 10, "logits");
}

// TF's MomentumOptimizer as update ops: m = momentum * m + g; v -= lr * m.
void sgd_momentum(tj::Tensor loss, double lr, double momentum) {
  auto vars = tj::trainable_variables();
  auto grads = tj::grad(loss, vars);
  for (size_t i = 0; i < vars.size(); ++i) {
    auto m = tj::variable(vars[i].node().attrs.name + "/momentum", vars[i].shape(),
                          {.init = tj::init::zeros(), .trainable = false});
    auto m_next = momentum * m + grads[i];
    tj::assign(m, m_next);
    tj::assign(vars[i], vars[i] - lr * m_next);
  }
}

struct Options {
  std::string out, model = "mlp", arch, strategy = "sync";
  int towers = 1;
};

// One program to dump: its lowered kernel IR and CUDA.
struct Module {
  std::string name, runs;  // runs: when the towers run it
  tj::LoweredProgram lowered;
  tj::cuda::CudaModule cuda;
};

Module make_module(const tj::Graph& graph, const std::string& name, std::string runs,
                   const std::vector<int>& fetches, const std::vector<int>& updates) {
  Module m{name, std::move(runs), tj::lower_graph_for_gpu(graph, fetches, updates), {}};
  m.cuda = tj::cuda::emit_cuda_module(m.lowered.graph, m.lowered.program, name);
  return m;
}

// One tower, sync: the whole step (forward, backward, apply) as one program. Several towers,
// or async: the tower step each tower runs on its slice, and the apply the collectives' results
// feed (the graph cut at its all_reduce nodes), as runtime/towers/tower_trainer.h runs them;
// the collectives themselves are the runtime's (listed in <model>_towers.txt).
std::vector<Module> build_modules(const Options& o, tj::Graph& graph, tj::Tensor loss, std::string& plan) {
  const bool one_program = o.towers == 1 && o.strategy == "sync";
  if (one_program) {
    sgd_momentum(loss, 0.05, 0.9);
    std::vector<Module> modules;
    modules.push_back(make_module(graph, o.model + "_train_step", "once per step", {loss.id()}, graph.update_ops));
    return modules;
  }
  std::vector<tj::Device> devices;
  for (int t = 0; t < o.towers; ++t) devices.push_back(tj::gpu(t));
  auto towers = tj::Towers(devices);
  if (o.strategy == "async") towers = towers.reduce(tj::AsyncApply{});
  const auto program = tj::build_tower_program(graph, loss, tj::momentum(0.05, 0.9));
  const auto slices = towers.slices(256);
  const auto weights = towers.weights(256);
  std::ostringstream text;
  text << towers.str() << "\nA batch of 256 is split into";
  for (auto n : slices) text << " " << n;
  text << ".\n1. Every tower runs " << o.model << "_tower_step on its slice: the loss and the gradient of "
       << program.variables.size() << " variables.\n";
  text << "   The graph's collectives (all_reduce nodes, where the runtime cuts it):\n";
  for (const tj::Collective& c : tj::collectives_of(graph)) {
    const tj::Node& n = graph.node(c.node);
    text << "     %" << c.node << " all_reduce(%" << c.value << ") \"" << c.key << "\" : f32" << n.shape.str()
         << ", " << n.shape.elements(256) * 4 << " bytes  @ " << tj::format_location(n) << "\n";
  }
  if (o.strategy == "async") {
    text << "2. Each tower, as soon as it is done, feeds its gradient to " << o.model
         << "_apply as the collectives' values, with " << tj::TowerProgram::gradient_scale << " = " << weights[0]
         << " (1/N, multiplied in the apply's kernels), one apply at a time, with no barrier.\n";
  } else {
    text << "2. The runtime maps each collective to an all-reduce, g = sum_i w_i g_i with w =";
    for (double w : weights) text << " " << w;
    text << " (n_i / B), in tower order.\n3. " << o.model << "_apply runs on every device's copy "
         << "(replicated) with g fed as the input the collective's key names and "
         << tj::TowerProgram::gradient_scale << " = 1.\n";
  }
  plan = text.str();
  std::vector<Module> modules;
  modules.push_back(make_module(graph, o.model + "_tower_step", "on every tower, on its slice",
                                tj::node_ids(graph, program.tower_fetches), {}));
  // The apply side: the graph cut at its collectives, which it reads as inputs.
  tj::Rewritten apply_side = tj::cut_at_collectives(graph, tj::TowerProgram::gradient_scale);
  modules.push_back(make_module(apply_side.graph, o.model + "_apply",
                                o.strategy == "async" ? "after each tower's step" : "once per step per replica",
                                tj::remap_ids({program.learning_rate.id()}, apply_side.remap),
                                tj::remap_ids(tj::node_ids(graph, program.apply_updates), apply_side.remap)));
  return modules;
}

int run(const Options& o) {
  tj::Graph graph;
  tj::GraphScope use(graph);
  tj::Tensor logits, labels;
  if (o.model == "gpt") {  // examples/char_lm's model with its defaults, 86 characters
    const examples::GptConfig config{.vocab = 86, .context = 64, .dim = 64, .heads = 4, .layers = 2};
    logits = examples::gpt(tj::input("tokens", {tj::kBatch, config.context}, tj::DType::i32), config);
    labels = tj::input("targets", {tj::kBatch, config.context}, tj::DType::i32);
  } else {
    auto image = tj::input("image", {tj::kBatch, 784});
    logits = o.model == "cnn" ? cnn(image) : mlp(image);
    labels = tj::input("label", {tj::kBatch}, tj::DType::i32);
  }
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  std::string plan;
  const std::vector<Module> modules = build_modules(o, graph, loss, plan);

  if (o.out.empty()) {
    if (!plan.empty()) std::cout << "/* " << plan << "*/\n";
    for (const Module& m : modules)
      std::cout << m.cuda.source << "/* " << m.name << ".index.json (runs " << m.runs << ")\n"
                << tj::cuda::cuda_index_json(m.lowered.graph, m.lowered.program, m.cuda, m.name) << "\n*/\n";
    return 0;
  }
  const std::string arch = tj::cuda::resolve_arch(o.arch);
  std::string library_ptx;
  if (tj::cuda::nvrtc_available()) {
    const auto lib = tj::cuda::compile_cuda(tj::cuda::library_module_source(), "towerjit_library", arch);
    library_ptx = lib.ptx;
    std::printf("NVRTC %s, %s: library %.0f ms%s\n", tj::cuda::nvrtc_version().c_str(), arch.c_str(),
                lib.compile_ms, lib.cache_hit ? " (cached)" : "");
  } else {
    std::printf("NVRTC not found: writing the CUDA C without PTX\n");
  }
  for (const Module& m : modules) {
    std::string ptx;
    if (tj::cuda::nvrtc_available()) {
      const auto compiled = tj::cuda::compile_cuda_module(m.cuda, m.name, arch);
      ptx = compiled.ptx();
      std::printf("%s: compiled in %.0f ms (%zu parts)%s\n", m.name.c_str(), compiled.compile_ms, compiled.parts.size(),
                  compiled.cache_hit ? " (cached)" : "");
    }
    const auto paths = tj::cuda::write_cuda_dump(o.out, m.lowered.graph, m.lowered.program, m.cuda, m.name, ptx);
    const auto& p = m.lowered.program;
    std::printf("%s (runs %s): %zu loop kernels, %zu library calls, %zu update copies\n", m.name.c_str(),
                m.runs.c_str(), p.kernels.size(), p.calls.size(), p.copies.size());
    for (const auto& path : paths) std::printf("  %s\n", path.c_str());
  }
  std::ofstream(o.out + "/towerjit_library.cu") << tj::cuda::library_module_source();
  if (!library_ptx.empty()) std::ofstream(o.out + "/towerjit_library.ptx") << library_ptx;
  std::printf("  %s/towerjit_library.cu%s\n", o.out.c_str(), library_ptx.empty() ? "" : " (+ .ptx)");
  if (!plan.empty()) {
    std::ofstream(o.out + "/" + o.model + "_towers.txt") << plan;
    std::printf("  %s/%s_towers.txt: how the towers run them\n%s", o.out.c_str(), o.model.c_str(), plan.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dump_cuda: the CUDA C of a whole training step (forward, backward, SGD-momentum "
               "apply), readable on any machine; no GPU needed"};
  app.add_option("--out", o.out, "write <model>_train_step.{cu,ptx,index.json,kir} and "
                 "towerjit_library.cu here (default: the .cu and index to standard output)");
  app.add_option("--model", o.model, "mlp (784-512-512-10), cnn (2x conv3x3+relu+maxpool, dense) or gpt "
                 "(char_lm's: 2 blocks of width 64, 4 heads, context 64)")
      ->check(CLI::IsMember({"mlp", "cnn", "gpt"}));
  app.add_option("--arch", o.arch, "GPU architecture for the PTX (default: $TOWERJIT_CUDA_ARCH, else sm_90)");
  app.add_option("--towers", o.towers, "GPU towers: more than one (or --strategy async) dumps the "
                 "tower step and the apply as two programs, and how the towers run them")
      ->check(CLI::PositiveNumber);
  app.add_option("--strategy", o.strategy, "sync (all-reduce, then apply) or async (each tower applies)")
      ->check(CLI::IsMember({"sync", "async"}));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
