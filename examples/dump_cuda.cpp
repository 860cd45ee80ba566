// Writes the CUDA C of a whole training step (forward, backward and an SGD-momentum apply
// written as update ops) and its index, on any machine: no GPU needed, and NVRTC only to add
// the PTX.
//
//   dump_cuda --model mlp --out /tmp/cuda     # mlp_train_step.cu, .ptx, .index.json, .kir
//   dump_cuda --model cnn | less              # the .cu, then the index, on standard output
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "jit/cuda/cuda_dump.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/nvrtc_compiler.h"
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

int run(const Options& o) {
  tj::Graph graph;
  tj::GraphScope use(graph);
  auto image = tj::input("image", {tj::kBatch, 784});
  auto label = tj::input("label", {tj::kBatch}, tj::DType::i32);
  auto logits = o.model == "cnn" ? cnn(image) : mlp(image);
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, label));
  sgd_momentum(loss, 0.05, 0.9);
  if (o.towers != 1 || o.strategy != "sync")
    std::fprintf(stderr, "dump_cuda: --towers %d --strategy %s accepted, but until the towers issue "
                 "lands the step is one tower's (no split, no reduction)\n", o.towers, o.strategy.c_str());

  const std::string module = o.model + "_train_step";
  tj::LoweredProgram lowered = tj::lower_graph(graph, {loss.id()}, graph.update_ops);
  const tj::cuda::CudaModule cuda = tj::cuda::emit_cuda_module(lowered.graph, lowered.program, module);
  if (o.out.empty()) {
    std::cout << cuda.source << "/* " << module << ".index.json\n"
              << tj::cuda::cuda_index_json(lowered.graph, lowered.program, cuda, module) << "\n*/\n";
    return 0;
  }
  const std::string arch = tj::cuda::resolve_arch(o.arch);
  std::string ptx, library_ptx;
  if (tj::cuda::nvrtc_available()) {
    const auto bin = tj::cuda::compile_cuda(cuda.source, module, arch);
    const auto lib = tj::cuda::compile_cuda(tj::cuda::library_module_source(), "towerjit_library", arch);
    ptx = bin.ptx, library_ptx = lib.ptx;
    std::printf("NVRTC %s, %s: step %.0f ms%s, library %.0f ms%s\n", tj::cuda::nvrtc_version().c_str(),
                arch.c_str(), bin.compile_ms, bin.cache_hit ? " (cached)" : "", lib.compile_ms,
                lib.cache_hit ? " (cached)" : "");
  } else {
    std::printf("NVRTC not found: writing the CUDA C without PTX\n");
  }
  auto paths = tj::cuda::write_cuda_dump(o.out, lowered.graph, lowered.program, cuda, module, ptx);
  std::ofstream(o.out + "/towerjit_library.cu") << tj::cuda::library_module_source();
  if (!library_ptx.empty()) std::ofstream(o.out + "/towerjit_library.ptx") << library_ptx;
  std::printf("%s: %zu loop kernels, %zu library calls, %zu update copies\n", module.c_str(),
              lowered.program.kernels.size(), lowered.program.calls.size(), lowered.program.copies.size());
  for (const auto& p : paths) std::printf("  %s\n", p.c_str());
  std::printf("  %s/towerjit_library.cu%s\n", o.out.c_str(), library_ptx.empty() ? "" : " (+ .ptx)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dump_cuda: the CUDA C of a whole training step (forward, backward, SGD-momentum "
               "apply), readable on any machine; no GPU needed"};
  app.add_option("--out", o.out, "write <model>_train_step.{cu,ptx,index.json,kir} and "
                 "towerjit_library.cu here (default: the .cu and index to standard output)");
  app.add_option("--model", o.model, "mlp (784-512-512-10) or cnn (2x conv3x3+relu+maxpool, dense)")
      ->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--arch", o.arch, "GPU architecture for the PTX (default: $TOWERJIT_CUDA_ARCH, else sm_90)");
  app.add_option("--towers", o.towers, "accepted; until the towers issue lands, one tower")
      ->check(CLI::PositiveNumber);
  app.add_option("--strategy", o.strategy, "sync or async; until the towers issue lands, one tower")
      ->check(CLI::IsMember({"sync", "async"}));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const tj::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
