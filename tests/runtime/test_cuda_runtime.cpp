// The CUDA runtime where no GPU is: the driver is loaded at run time, so this binary starts
// without one; cuda_device_count() is 0 and every request for a device (a CudaProgram
// included) raises "no CUDA device" with the reason and the caller's line. On a machine with
// a GPU those tests say so and leave the checking to the `gpu` tests (tests_gpu/). The rest
// (error texts, size classes, loading cuBLAS and cuBLASLt, the one-hot error) need no device.
#include <catch2/catch.hpp>

#include "jit/knobs.h"
#include "runtime/cpu/cpu_program.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_program.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/library.h"
#include "runtime/cuda/nccl.h"
#include "tests/jit/cpu_test_env.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;

#define TOWERJIT_REQUIRE_NO_GPU()                                                 \
  if (cu::cuda_device_count() > 0) {                                              \
    WARN("skipped: this machine has a CUDA device (the gpu tests cover it)");     \
    return;                                                                       \
  }

TEST_CASE("without a CUDA device the device count is 0 and the reason is given", "[cuda][runtime]") {
  TOWERJIT_REQUIRE_NO_GPU();
  CHECK(cu::cuda_device_count() == 0);
  CHECK_FALSE(cu::cuda_available());
  const std::string why = cu::cuda_unavailable_reason();
  CHECK_THAT(why, Catch::Contains("libcuda.so.1") || Catch::Contains("cuInit failed") ||
                      Catch::Contains("no CUDA device"));
  WARN("no CUDA device here: " << why);
}

TEST_CASE("without a CUDA device, asking for one raises no CUDA device with the caller's line", "[cuda][runtime]") {
  TOWERJIT_REQUIRE_NO_GPU();
  const std::string why = cu::cuda_unavailable_reason();
  CHECK_THROWS_WITH(cu::device(0), Catch::StartsWith("towerjit: no CUDA device: " + why) &&
                                       Catch::Contains("test_cuda_runtime.cpp:"));
  CHECK_THROWS_WITH(cu::require_driver(), Catch::Contains("no CUDA device"));
  CHECK_THROWS_AS(cu::device(3), tj::Error);
}

TEST_CASE("without a CUDA device, a CudaProgram raises no CUDA device before compiling", "[cuda][runtime]") {
  TOWERJIT_REQUIRE_NO_GPU();
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {tj::kBatch, 7});
  auto y = tj::relu(x) * 2;
  try {
    tj::CudaProgram program(g, {y});
    FAIL("no error");
  } catch (const tj::Error& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::StartsWith("towerjit: no CUDA device: "));
    CHECK_THAT(m, Catch::Contains("use the CPU backend"));
    CHECK_THAT(m, Catch::Contains("test_cuda_runtime.cpp:"));  // the line that built the program
  }
  CHECK_THROWS_WITH(tj::CudaProgram(g, {y}, false, tj::gpu(1)), Catch::Contains("no CUDA device"));
}

TEST_CASE("a CudaProgram on a CPU device says to use CpuProgram", "[cuda][runtime]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {tj::kBatch, 7});
  CHECK_THROWS_WITH(tj::CudaProgram(g, {tj::exp(x)}, false, tj::cpu(0)),
                    Catch::Contains("CudaProgram runs on a GPU, not on cpu:0; use CpuProgram"));
}

TEST_CASE("driver errors name the call, the CUresult and the line", "[cuda][runtime]") {
  CHECK_THAT(cu::cuda_result_text(2), Catch::StartsWith("CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK_THAT(cu::cuda_result_text(100), Catch::StartsWith("CUDA_ERROR_NO_DEVICE"));
  CHECK_THAT(cu::cuda_result_text(123456), Catch::Contains("123456"));
  CHECK_NOTHROW(cu::check_cuda(0, "cuInit"));
  CHECK_THROWS_WITH(cu::check_cuda(2, "cuMemAlloc", " allocating 4.0 MiB"),
                    Catch::StartsWith("towerjit: CUDA driver call cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY") &&
                        Catch::Contains("allocating 4.0 MiB") && Catch::Contains("test_cuda_runtime.cpp:"));
}

TEST_CASE("the device allocator's size classes", "[cuda][runtime]") {
  using A = cu::DeviceAllocator;
  CHECK(A::size_class(0) == 0);
  CHECK(A::size_class(1) == 512);
  CHECK(A::size_class(512) == 512);
  CHECK(A::size_class(513) == 1024);
  CHECK(A::size_class(1 << 20) == (1 << 20));
  CHECK(A::size_class((1 << 20) + 1) == (2 << 20));
  CHECK(A::size_class((3 << 20) + 5) == (4 << 20));
  CHECK(A::size_class(size_t{5} << 30) == (size_t{5} << 30));
}

TEST_CASE("cuBLAS loads at run time where the CUDA toolkit is installed, GPU or not", "[cuda][runtime]") {
  if (!cu::cublas_available()) {
    WARN("skipped: cuBLAS not found");
    CHECK_THROWS_WITH(cu::require_cublas(), Catch::Contains("cuBLAS not found (tried libcublas.so.13"));
    return;
  }
  const cu::CublasApi& api = cu::require_cublas();
  CHECK_THAT(api.library, Catch::Contains("libcublas.so"));
  CHECK(api.Sgemm != nullptr);
  CHECK(api.SgemmStridedBatched != nullptr);
}

TEST_CASE("cuBLASLt loads at run time where the CUDA toolkit is installed, GPU or not", "[cuda][runtime]") {
  const cu::CublasLtLoad& lt = cu::cublaslt_load();
  if (!lt.api) {
    WARN("skipped: cuBLASLt not found");
    CHECK_THAT(lt.tried, Catch::Contains("libcublasLt.so.13"));
    return;
  }
  CHECK_THAT(lt.api->library, Catch::Contains("libcublasLt.so"));
  CHECK(lt.api->GetVersion() >= 120000);  // cuBLAS 12 or later, as the names tried say
  CHECK(lt.api->MatmulAlgoGetHeuristic != nullptr);
  CHECK(lt.api->Matmul != nullptr);
}

TEST_CASE("cuBLASLt missing: the warning names what was tried and the fallback", "[cuda][runtime]") {
  // What Cublas prints once a process where cuBLASLt did not load (the GPU test
  // "GPU: without cuBLASLt, products run through cuBLAS after a warning" makes it happen).
  CHECK(cu::cublaslt_missing_warning("libcublasLt.so.13 (hidden by the test)", false) ==
        "towerjit: warning: cuBLASLt not found (tried libcublasLt.so.13 (hidden by the test)); matrix products run "
        "through cuBLAS's cublasSgemmStridedBatched instead, in FP32 only. Install the CUDA toolkit's libcublasLt "
        "(it comes with libcublas) or add its directory to LD_LIBRARY_PATH");
  CHECK_THAT(cu::cublaslt_missing_warning("libcublasLt.so.13", true),
             Catch::Contains("in FP32 only (TOWERJIT_ALLOW_TF32=on has no effect). Install"));
}

TEST_CASE("cuDNN 9 loads at run time where it is installed (GPU or not) and otherwise the fallback warns", "[cuda][runtime]") {
  if (!cu::loaded_cudnn()) {
    WARN("skipped: " << cu::cudnn_unavailable_reason());
    CHECK_FALSE(cu::cudnn_available());
    CHECK_THAT(cu::cudnn_unavailable_reason(), Catch::Contains("libcudnn.so.9"));
  } else {
    const cu::CudnnApi& api = *cu::loaded_cudnn();
    CHECK_THAT(api.library, Catch::Contains("libcudnn.so.9"));
    CHECK(api.version / 10000 == 9);
    CHECK(api.BackwardFilter != nullptr);
    CHECK(cu::cudnn_available());
    CHECK(cu::cudnn_unavailable_reason().empty());
    // The descriptors need no device: the sub-library (libcudnn_cnn) loads from the same place.
    cudnnConvolutionDescriptor_t conv = nullptr;
    REQUIRE(api.CreateConvolutionDescriptor(&conv) == 0);
    CHECK(api.SetConvolution2dDescriptor(conv, 1, 1, 2, 2, 1, 1, cu::kCudnnCrossCorrelation, cu::kCudnnDataFloat) == 0);
    CHECK(api.SetConvolutionMathType(conv, cu::kCudnnFmaMath) == 0);
    CHECK(api.DestroyConvolutionDescriptor(conv) == 0);
  }
  // Another major version is refused, naming it; the knob turns cuDNN off.
  CHECK(cu::cudnn_version_problem(91900).empty());
  CHECK(cu::cudnn_version_problem(8907) == "cuDNN 8.9.7 (cudnnGetVersion 8907), and towerjit binds cuDNN 9.x");
  CHECK(cu::cudnn_version_problem(100100) == "cuDNN 10.1.0 (cudnnGetVersion 100100), and towerjit binds cuDNN 9.x");
  {
    tj::test::ScopedEnv off("TOWERJIT_CUDNN", "off");
    CHECK_FALSE(cu::cudnn_available());
    CHECK(cu::cudnn_unavailable_reason() == "TOWERJIT_CUDNN=off");
  }
  {
    tj::test::ScopedEnv bad("TOWERJIT_CUDNN", "maybe");
    CHECK_THROWS_WITH(tj::knobs::cudnn_enabled(), "towerjit: TOWERJIT_CUDNN=maybe is not a switch: set on or off");
    tj::test::ScopedEnv cap("TOWERJIT_CUDNN_WORKSPACE_MB", "-3");
    CHECK_THROWS_WITH(tj::knobs::cudnn_workspace_mb(), Catch::Contains("TOWERJIT_CUDNN_WORKSPACE_MB=-3 is not a size in MiB"));
  }
  const std::string w = cu::cudnn_fallback_warning(
      "libcudnn.so.9 was not found (tried libcudnn.so.9, /usr/local/cuda/lib64/libcudnn.so.9, "
      "/usr/local/cuda/lib/libcudnn.so.9)");
  CHECK_THAT(w, Catch::StartsWith("towerjit: warning: cuDNN is not used for convolutions: libcudnn.so.9 was not "
                                  "found (tried libcudnn.so.9, /usr/local/cuda/lib64/libcudnn.so.9, "
                                  "/usr/local/cuda/lib/libcudnn.so.9). They fall back to towerjit's own implicit-GEMM"));
  CHECK_THAT(w, Catch::Contains("install cuDNN 9"));
}

TEST_CASE("NCCL loads at run time where it is installed, GPU or not", "[cuda][runtime]") {
  if (!cu::nccl_available()) {
    WARN("skipped: " << cu::nccl_unavailable_reason());
    CHECK_THROWS_WITH(cu::require_nccl(), Catch::Contains("NCCL not found (tried libnccl.so.2") &&
                                              Catch::Contains("LD_LIBRARY_PATH"));
    return;
  }
  const cu::NcclApi& api = cu::require_nccl();
  CHECK_THAT(api.library, Catch::Contains("libnccl.so.2"));
  CHECK(api.version >= 20000);  // 2.x: NCCL_VERSION_CODE is major * 10000 + minor * 100 + patch
  CHECK(cu::nccl_unavailable_reason().empty());
  CHECK(api.AllReduce != nullptr);
}

TEST_CASE("a one-hot label out of range on the GPU reads as the CPU backend's error", "[cuda][runtime]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto labels = tj::input("labels", {tj::kBatch}, tj::DType::i32);
  auto hot = tj::one_hot(labels, 10);
  tj::HostTensor l(tj::Shape{4}, tj::DType::i32);
  l.i32 = {1, 2, 12, -1};
  tj::HostVariables vars;
  std::string cpu_message, gpu_message;
  try { tj::CpuProgram(g, {hot}).run({{"labels", l}}, vars); } catch (const tj::Error& e) { cpu_message = e.what(); }
  // What tj_one_hot leaves in its slot: the smallest bad index and its label.
  CHECK_NOTHROW(cu::check_one_hot_slot(hot.node(), ~uint64_t{0}));
  try { cu::check_one_hot_slot(hot.node(), (uint64_t{2} << 32) | 12u); } catch (const tj::Error& e) { gpu_message = e.what(); }
  CHECK_THAT(cpu_message, Catch::Contains("label 12 at flat index 2 of input \"labels\" is out of range [0, 10)"));
  CHECK(gpu_message == cpu_message);
}
