// Convolutions with bias and ReLU epilogues on the GPU (jit/passes/epilogues.h): the implicit
// GEMM applies it as it stores, cuDNN's forward is followed by tj_conv_epilogue. The CPU's cases
// (tests/jit/epilogue_cases.h) against the reference, and the same bits as the loop kernel
// they replace (TOWERJIT_CONV_EPILOGUES=off) where both runs take the same convolution.
#include <catch2/catch.hpp>

#include <cstring>

#include "gpu_check.h"
#include "jit/knobs.h"
#include "runtime/cuda/cudnn.h"
#include "tests/jit/cpu_test_env.h"
#include "tests/jit/epilogue_cases.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using tj::Tensor;
using namespace tj::testing;

namespace {

std::vector<float> run_gpu(const tj::Graph& g, const Tensor& y, const tj::reference::Feeds& feeds) {
  tj::HostFeeds hf;
  for (const auto& [name, a] : feeds) hf[name] = to_host(a);
  tj::HostVariables hv;
  tj::CudaProgram program(g, {y});
  return program.run(hf, hv).at(0).f32;
}

}  // namespace

TEST_CASE("GPU: convolutions with bias and ReLU epilogues match the reference and keep the loop kernel's bits",
          "[gpu]") {
  uint32_t seed = 400;
  for (const char* cudnn : {"off", "on"}) {  // the implicit GEMM's own epilogue, then cuDNN + tj_conv_epilogue
    tj::test::ScopedEnv use_cudnn("TOWERJIT_CUDNN", cudnn);
    if (std::strcmp(cudnn, "on") == 0 && !cu::cudnn_available()) continue;
    for (const ConvEpilogueCase& c : conv_epilogue_cases()) {
      const std::string what = c.str() + ", TOWERJIT_CUDNN=" + cudnn + (tj::knobs::allow_tf32() ? ", TF32" : "");
      INFO(what);
      tj::Graph g;
      tj::GraphScope use(g);
      tj::reference::Feeds feeds;
      const Tensor y = conv_epilogue_graph(c, feeds, seed += 3);
      tj::reference::Variables vars;
      require_close(run_gpu_and_reference(g, {y}, feeds, vars), what);
      const std::vector<float> fused = run_gpu(g, y, feeds);
      CHECK(same_bits(fused, run_gpu(g, y, feeds)));  // every run
      // With cuDNN a real GPU picks each program's algorithm by timing it, so two programs may
      // sum in different orders; the implicit GEMM, and the emulator's cuDNN, always sum alike.
      if (std::strcmp(cudnn, "off") == 0 || tj::knobs::cuda_emulated()) {
        tj::test::ScopedEnv off("TOWERJIT_CONV_EPILOGUES", "off");
        CHECK(same_bits(fused, run_gpu(g, y, feeds)));
      }
    }
  }
}
