// Matrix products with bias and ReLU epilogues on the GPU (jit/passes/epilogues.h;
// cuBLASLt's CUBLASLT_EPILOGUE_BIAS and RELU_BIAS, runtime/cuda/cublaslt.h): the same graphs as
// the CPU's tests (tests/jit/epilogue_cases.h) against the reference within the bound of the
// mode they ran in, the same bits every run, and the fallback that applies the epilogue itself
// (tj_matmul_epilogue) where cuBLASLt cannot.
#include <catch2/catch.hpp>

#include <cstring>

#include "gpu_check.h"
#include "jit/passes/pipeline.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/library.h"
#include "tests/jit/epilogue_cases.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using tj::Tensor;
using namespace tj::testing;

TEST_CASE("GPU: products with bias and ReLU epilogues match the reference and give the same bits every run",
          "[gpu][matmul]") {
  uint32_t seed = 200;
  for (const EpilogueCase& c : epilogue_cases()) {
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = epilogue_graph(c, feeds, seed += 3);
    tj::reference::Variables vars;
    const JitRun r = run_gpu_and_reference(g, {y}, feeds, vars);
    require_close(r, c.str() + (tj::knobs::allow_tf32() ? " in TF32" : " in f32"));
    tj::HostFeeds hf;
    for (const auto& [name, a] : feeds) hf[name] = to_host(a);
    tj::HostVariables hv;
    tj::CudaProgram program(g, {y});
    const tj::HostTensor first = program.run(hf, hv).at(0), again = program.run(hf, hv).at(0);
    CHECK(std::memcmp(first.f32.data(), again.f32.data(), first.f32.size() * 4) == 0);
    CHECK(std::memcmp(first.f32.data(), to_host(r.jit[0]).f32.data(), first.f32.size() * 4) == 0);
  }
}

TEST_CASE("GPU: products of bf16 and f16 operands take the epilogue too and match the reference",
          "[gpu][matmul][half]") {
  for (tj::DType t : {tj::DType::bf16, tj::DType::f16}) {
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = half_epilogue_graph(t, feeds, 41);
    tj::reference::Variables vars;
    require_close(run_gpu_and_reference(g, {y}, feeds, vars), std::string("GPU, ") + std::string(tj::dtype_name(t)));
  }
}

// Without cuBLASLt the product runs on cuBLAS and tj_matmul_epilogue adds the bias and applies
// the ReLU after it. On the emulated GPU, whose cuBLAS and cuBLASLt sum alike, that is the same
// bits as cuBLASLt's epilogue; a real GPU's two libraries choose their own algorithms (on the
// H200 the results differed in the last bits), so there each is held to the reference's bound.
TEST_CASE("GPU: without cuBLASLt a product's epilogue runs as a kernel of its own with the same result",
          "[gpu][matmul]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  const cu::CublasLtLoad missing{nullptr, "libcublasLt.so.13 (hidden by the test)"};
  cu::Cublas with_lt(dev, stream);
  std::optional<cu::Cublas> without;
  without.emplace(dev, stream, missing);  // its warning (once a process) is test_gpu_matmul.cpp's to check
  // Batches folded into one product's rows, and batch axes broadcast against each other (a
  // call per matrix, each finished on its own).
  for (const EpilogueCase& c : {EpilogueCase{tj::Shape{2, 7, 33}, tj::Shape{33, 127}, true},
                                EpilogueCase{tj::Shape{2, 1, 7, 7}, tj::Shape{1, 3, 7, 127}, true}}) {
    tj::Graph g;
    tj::GraphScope use(g);
    tj::reference::Feeds feeds;
    const Tensor y = epilogue_graph(c, feeds, 5);
    const tj::LoweredProgram lowered = tj::lower_graph(g, {y.id()}, {});
    const tj::kir::Program& p = lowered.program;
    REQUIRE(p.calls.size() == 1);
    const tj::kir::LibraryCall& call = p.calls[0];
    REQUIRE(call.epilogue == tj::kir::Epilogue::bias_relu);
    std::vector<tj::DeviceTensor> inputs;
    std::vector<cu::DeviceView> views;
    for (const char* name : {"x", "w", "b"}) {
      inputs.push_back(tj::to_device(to_host(feeds.at(name)), dev, stream));
      views.push_back({feeds.at(name).shape, inputs.back().ptr(), tj::DType::f32});
    }
    cu::DeviceBuffer scratch;
    auto run = [&](cu::Cublas& blas) {
      tj::DeviceTensor out = tj::empty_device_tensor(dev, y.shape(), tj::DType::f32);
      cu::LibraryEnv env{dev, stream, &blas, scratch, 0};
      cu::run_library_call(call, lowered.graph.node(call.node), views, {out.shape, out.ptr(), tj::DType::f32}, env);
      return tj::to_host(out, stream);
    };
    const tj::HostTensor lt = run(with_lt), fallback = run(*without);
    // In TF32 only cuBLASLt's product rounds its inputs (the fallback's cuBLAS is FP32).
    if (tj::knobs::cuda_emulated() && !tj::knobs::allow_tf32())
      CHECK(std::memcmp(lt.f32.data(), fallback.f32.data(), lt.f32.size() * 4) == 0);
    for (const bool fell_back : {false, true}) {
      tj::reference::Variables vars;
      JitRun r;
      r.jit.push_back(to_array(fell_back ? fallback : lt));
      // The fallback's cuBLAS does not use TF32; cuBLASLt does when it is allowed.
      reference_side(r, g, {y}, feeds, vars, false, 0, !fell_back && tj::knobs::allow_tf32());
      require_close(r, std::string(fell_back ? "the fallback's " : "cuBLASLt's ") + c.str());
    }
  }
}
