// Convolutions on the GPU through cuDNN (runtime/cuda/cudnn.h) and through the fallback
// (TOWERJIT_CUDNN=off: implicit GEMMs, jit/cuda/device/conv_kernels.cu, the filter gradient's
// slices of depth summed in a fixed order): the forward pass, the data gradient and the filter
// gradient against the reference interpreter within its error bounds at odd sizes, and across
// the fallback's tile edges; the fallback's bits on any grid; the algorithm found once per
// shape; a workspace cap that leaves out the fastest algorithm; the fallback's warning; runs
// bitwise reproducible; TF32's error under TOWERJIT_ALLOW_TF32=on; the implicit GEMM timed
// beside cuDNN's algorithms and run where it was faster, and timed once when two GPUs choose a
// shape at once. On the emulated GPU cuDNN is
// the emulator's stand-in (emulator/driver/cudnn.cpp), whose algorithm table the emulator-only
// checks name.
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <thread>

#include "gpu_check.h"
#include "jit/knobs.h"
#include "jit/reference/interpreter.h"
#include "runtime/cuda/conv_choice.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/driver_api.h"
#include "tests/jit/cpu_test_env.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using tj::kBatch;
using namespace tj::testing;

namespace {

struct Geometry {
  int64_t c, h, w, o, k;
  int stride, pad;
  std::string str() const {
    return "c=" + std::to_string(c) + " h=" + std::to_string(h) + " w=" + std::to_string(w) + " o=" + std::to_string(o) +
           " k=" + std::to_string(k) + " stride=" + std::to_string(stride) + " pad=" + std::to_string(pad);
  }
};

// y = conv2d(x, w), and the gradients of sum(y * r) (so dy is the random r) by x and w.
struct ConvGraph {
  tj::Graph g;
  std::vector<tj::Tensor> fetches;
  int64_t oh = 0, ow = 0;
  explicit ConvGraph(const Geometry& ge) {
    tj::GraphScope use(g);
    auto x = tj::input("x", {kBatch, ge.c, ge.h, ge.w});
    auto w = tj::input("w", {ge.o, ge.c, ge.k, ge.k});
    auto y = tj::conv2d(x, w, {.stride = ge.stride, .pad = ge.pad});
    oh = y.shape()[2], ow = y.shape()[3];
    auto r = tj::input("r", {kBatch, ge.o, oh, ow});
    auto grads = tj::grad(tj::sum(y * r), {x, w});
    fetches = {y, grads[0], grads[1]};
  }
  tj::reference::Feeds feeds(const Geometry& ge, int64_t batch) const {
    return {{"x", random_array({batch, ge.c, ge.h, ge.w}, 7)},
            {"w", random_array({ge.o, ge.c, ge.k, ge.k}, 8)},
            {"r", random_array({batch, ge.o, oh, ow}, 9)}};
  }
};

const Geometry kGeometries[] = {{3, 9, 11, 4, 3, 2, 1}, {1, 7, 7, 7, 3, 1, 1}, {2, 8, 6, 1, 5, 1, 2},
                                {5, 7, 9, 6, 1, 1, 0},  {4, 9, 7, 6, 3, 2, 1}, {2, 13, 5, 3, 3, 3, 0}};

// Across the implicit GEMMs' 64 x 64 tiles: 67 filters and 72 taps (two tiles of rows in the
// forward pass, two of columns in the filter gradient), 70 channels (two tiles of rows in the
// data gradient), depths that are not multiples of the 16 staged at a time.
const Geometry kTileGeometries[] = {{8, 5, 6, 67, 3, 1, 1}, {70, 4, 5, 3, 1, 1, 0}, {66, 5, 5, 65, 3, 2, 1}};

void match_reference(const std::string& path, std::span<const Geometry> geometries = kGeometries) {
  for (const Geometry& ge : geometries) {
    ConvGraph cg(ge);
    for (int64_t batch : {1, 7, 127}) {
      if (batch == 127 && ge.c * ge.h * ge.w > 200) continue;  // the emulator's time: one large case is enough
      tj::reference::Variables vars;
      auto r = run_gpu_and_reference(cg.g, cg.fetches, cg.feeds(ge, batch), vars);
      require_close(r, "conv (" + path + ") " + ge.str() + " batch=" + std::to_string(batch));
    }
  }
}

std::vector<std::vector<float>> run_bits(const ConvGraph& cg, const Geometry& ge, int64_t batch) {
  tj::HostFeeds hf;
  for (const auto& [name, a] : cg.feeds(ge, batch)) hf[name] = to_host(a);
  tj::HostVariables hv;
  std::vector<std::vector<float>> out;
  tj::CudaProgram program(cg.g, cg.fetches);
  for (int run = 0; run < 2; ++run)
    for (const auto& t : program.run(hf, hv)) out.push_back(t.f32);
  return out;
}

}  // namespace

TEST_CASE("GPU: convolutions through cuDNN match the reference at odd sizes", "[gpu]") {
  if (!cu::cudnn_available()) {
    WARN("cuDNN not used here (" << cu::cudnn_unavailable_reason() << "): the fallback case covers this machine");
    return;
  }
  const cu::ConvChoiceCounts before = cu::conv_choice_counts();
  match_reference("cuDNN");
  const cu::ConvChoiceCounts after = cu::conv_choice_counts();
  CHECK(after.made > before.made);  // the calls were chosen for, found or read from the compile cache
  // On the emulator cuDNN's stand-in wins every choice (its times a thousandth of a ms).
  if (tj::knobs::cuda_emulated()) CHECK(after.implicit_gemm == before.implicit_gemm);
  CHECK(cu::cudnn_warning_given().empty());
}

TEST_CASE("GPU: convolutions through the fallback match the reference and say so once", "[gpu]") {
  tj::test::ScopedEnv off("TOWERJIT_CUDNN", "off");
  CHECK_FALSE(cu::cudnn_available());
  CHECK(cu::cudnn_unavailable_reason() == "TOWERJIT_CUDNN=off");
  match_reference("fallback");
  match_reference("fallback, tile edges", kTileGeometries);
  const std::string warning = cu::cudnn_warning_given();
  CHECK_THAT(warning, Catch::Contains("cuDNN is not used for convolutions"));
  CHECK_THAT(warning, Catch::Contains("implicit-GEMM kernels"));
  // The first warning of a process names its reason: here the knob (a machine without cuDNN
  // gave its own reason in an earlier case of the same process).
  CHECK_THAT(cu::cudnn_fallback_warning(cu::cudnn_unavailable_reason()), Catch::Contains("TOWERJIT_CUDNN=off. They fall back"));
}

TEST_CASE("GPU: cuDNN's algorithm is found once per shape and is deterministic", "[gpu]") {
  if (!cu::cudnn_available()) return;
  const Geometry ge{3, 11, 13, 5, 3, 1, 1};
  ConvGraph cg(ge);
  // A choice read from the compile cache (an earlier run's) lists its algorithm without a find.
  const int64_t before = cu::cudnn_find_count();
  const cu::ConvChoiceCounts chosen = cu::conv_choice_counts();
  auto finds_and_choices = [&] {
    const cu::ConvChoiceCounts now = cu::conv_choice_counts();
    CHECK(cu::cudnn_find_count() - before == (now.made - chosen.made) - (now.loaded - chosen.loaded));
    return now.made - chosen.made;
  };
  const auto first = run_bits(cg, ge, 3);  // two runs of one program
  CHECK(finds_and_choices() == 3);         // forward, data gradient, filter gradient
  const auto again = run_bits(cg, ge, 3);  // a second program, the same shapes
  CHECK(finds_and_choices() == 3);
  run_bits(cg, ge, 4);                     // a new batch: new shapes
  CHECK(finds_and_choices() == 6);
  // Bitwise the same, run after run and program after program.
  REQUIRE(first.size() == 6);
  REQUIRE(again.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(std::memcmp(first[i].data(), first[i % 3].data(), first[i].size() * 4) == 0);
    CHECK(std::memcmp(first[i].data(), again[i].data(), first[i].size() * 4) == 0);
  }
  // Only deterministic algorithms are chosen (the stand-in lists a faster non-deterministic one
  // for each gradient first).
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  cu::Cudnn dnn(dev, stream);
  const TjConvShape g{3, 3, 11, 13, 5, 3, 3, 11, 13, 1, 1, 1, 1};
  if (tj::knobs::cuda_emulated()) {
    CHECK(dnn.plan(cu::ConvPass::forward, g, "test").algo == 2);  // GEMM: the batch's columns
    CHECK(dnn.plan(cu::ConvPass::data_gradient, g, "test").algo == 1);
    CHECK(dnn.plan(cu::ConvPass::filter_gradient, g, "test").algo == 1);
    CHECK(dnn.plan(cu::ConvPass::forward, g, "test").workspace == 3 * 3 * 3 * 3 * 11 * 13 * 4);
  }
}

TEST_CASE("GPU: a cuDNN workspace larger than the memory allowed falls back to an algorithm that fits", "[gpu]") {
  if (!cu::cudnn_available()) return;
  tj::test::ScopedEnv cap("TOWERJIT_CUDNN_WORKSPACE_MB", "0");
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  cu::Cudnn dnn(dev, stream);
  const TjConvShape g{5, 3, 9, 7, 4, 3, 3, 5, 4, 2, 2, 1, 1};
  for (cu::ConvPass pass : {cu::ConvPass::forward, cu::ConvPass::data_gradient, cu::ConvPass::filter_gradient})
    CHECK(dnn.plan(pass, g, "test").workspace == 0);
  if (tj::knobs::cuda_emulated()) {
    CHECK(dnn.plan(cu::ConvPass::forward, g, "test").algo == 0);
    CHECK(dnn.plan(cu::ConvPass::filter_gradient, g, "test").algo == 1);
    CHECK_THAT(cu::cudnn_workspace_note(), Catch::Contains("of workspace, more than the 0 bytes available"));
    CHECK_THAT(cu::cudnn_workspace_note(), Catch::Contains("an algorithm that fits is used instead"));
  }
  // And the results still match the reference.
  const Geometry ge{3, 9, 7, 4, 3, 2, 1};
  ConvGraph cg(ge);
  tj::reference::Variables vars;
  require_close(run_gpu_and_reference(cg.g, cg.fetches, cg.feeds(ge, 5), vars), "conv without workspace");
}

TEST_CASE("GPU: the fallback's filter gradient is bitwise reproducible", "[gpu]") {
  tj::test::ScopedEnv off("TOWERJIT_CUDNN", "off");
  const Geometry ge{2, 9, 9, 3, 3, 2, 1};
  ConvGraph cg(ge);
  const auto a = run_bits(cg, ge, 7), b = run_bits(cg, ge, 7);
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4) == 0);
}

// Each implicit-GEMM kernel launched directly on grids of 1, 2 and 5 blocks and on one block a
// tile: every output is one thread's sum in depth order whichever block computes its tile, so
// the bits are the same (the runtime caps the grid by the GPU's SM count). The filter gradient
// here in 3 slices of 16, its partial products compared, then their sum (tj_sum_slices).
TEST_CASE("GPU: the implicit-GEMM convolutions give the same bits on any grid", "[gpu]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  // n c h w o kh kw oh ow, stride 2, pad 1: 67 filters (two tiles of rows), 72 taps.
  TjConvShape g{5, 8, 5, 6, 67, 3, 3, 3, 3, 2, 2, 1, 1};
  auto upload_random = [&](const tj::Shape& s, uint64_t seed) {
    return tj::to_device(to_host(random_array(s, seed)), dev, stream);
  };
  tj::DeviceTensor x = upload_random({g.n, g.c, g.h, g.w}, 3), w = upload_random({g.o, g.c, g.kh, g.kw}, 4),
                   dy = upload_random({g.n, g.o, g.oh, g.ow}, 5), bias = upload_random({g.o}, 6);
  CUdeviceptr bias_ptr = bias.ptr();
  int relu = 1;  // the forward with its bias and ReLU epilogue (jit/passes/epilogues.h)
  long long slices = 3, slice = 16;  // depth 5 * 3 * 3 = 45
  struct Pass {
    const char* kernel;
    tj::Shape out;
    int64_t tiles;
  };
  const Pass passes[] = {{"tj_conv2d_implicit", {g.n, g.o, g.oh, g.ow}, 2 * 1},
                         {"tj_conv2d_grad_input_implicit", {g.n, g.c, g.h, g.w}, 1 * 3},
                         {"tj_conv2d_grad_filter_implicit", {slices, g.o, g.c * g.kh * g.kw}, 2 * 2 * slices}};
  for (const Pass& p : passes) {
    std::vector<float> first;
    for (int64_t grid : {p.tiles, int64_t{1}, int64_t{2}, int64_t{5}}) {
      tj::DeviceTensor out = tj::empty_device_tensor(dev, p.out, tj::DType::f32);
      CUdeviceptr xp = x.ptr(), wp = w.ptr(), dyp = dy.ptr(), o = out.ptr();
      const std::string name = p.kernel;
      std::vector<void*> params{&xp, &wp, &o, &g, &bias_ptr, &relu};  // the forward pass's
      if (name == "tj_conv2d_grad_input_implicit") params = {&dyp, &wp, &o, &g};
      if (name == "tj_conv2d_grad_filter_implicit") params = {&xp, &dyp, &o, &g, &slices, &slice};
      cu::launch(dev.library_module().function(name), grid, 256, stream, params.data(), name);
      const std::vector<float> bits = tj::to_host(out, stream).f32;
      INFO(name << " on " << grid << " blocks");
      if (first.empty()) first = bits;
      else CHECK(std::memcmp(first.data(), bits.data(), bits.size() * 4) == 0);
    }
  }
  // The slices' sum: a block per 32 of the 67 x 72 weights, and grids of fewer.
  tj::HostTensor parts(tj::Shape{slices, g.o, g.c * g.kh * g.kw});
  for (size_t e = 0; e < parts.f32.size(); ++e)
    parts.f32[e] = std::ldexp(1.0f, -static_cast<int>(e % 23)) * (e % 3 ? 1 : -1);
  tj::DeviceTensor partials = tj::to_device(parts, dev, stream);
  long long weights = g.o * g.c * g.kh * g.kw;
  std::vector<float> first;
  for (int64_t grid : {(weights + 31) / 32, 1LL, 2LL, 5LL}) {
    tj::DeviceTensor out = tj::empty_device_tensor(dev, {weights}, tj::DType::f32);
    CUdeviceptr pp = partials.ptr(), o = out.ptr();
    void* params[] = {&pp, &o, &slices, &weights};
    cu::launch(dev.library_module().function("tj_sum_slices"), grid, 256, stream, params, "tj_sum_slices");
    const std::vector<float> bits = tj::to_host(out, stream).f32;
    INFO("tj_sum_slices on " << grid << " blocks");
    if (first.empty()) first = bits;
    else CHECK(std::memcmp(first.data(), bits.data(), bits.size() * 4) == 0);
  }
  for (long long j = 0; j < weights; ++j) {  // three terms: the sum within float32's rounding
    double want = 0;
    for (long long i = 0; i < slices; ++i) want += parts.f32[i * weights + j];
    CHECK(first[j] == Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("GPU: TF32 convolutions show TF32's error: beyond the f32 bound, within the TF32 one", "[gpu]") {
  if (!cu::cudnn_available()) return;  // the fallback's products are the matmul cases' TF32
  // Inputs with all 23 mantissa bits in use and sums of 288 to 4608 terms, in each pass.
  const Geometry ge{32, 8, 8, 16, 3, 1, 1};
  ConvGraph cg(ge);
  const int64_t batch = 8;
  tj::reference::Feeds feeds{{"x", random_array({batch, ge.c, ge.h, ge.w}, 31, 0.5, 1)},
                             {"w", random_array({ge.o, ge.c, ge.k, ge.k}, 32, 0.5, 1)},
                             {"r", random_array({batch, ge.o, cg.oh, cg.ow}, 33, 0.5, 1)}};
  JitRun f32, tf32;
  {
    tj::test::ScopedEnv off("TOWERJIT_ALLOW_TF32", "off");
    tj::reference::Variables vars;
    f32 = run_gpu_and_reference(cg.g, cg.fetches, feeds, vars);
  }
  {
    tj::test::ScopedEnv on("TOWERJIT_ALLOW_TF32", "on");
    tj::reference::Variables vars;
    tf32 = run_gpu_and_reference(cg.g, cg.fetches, feeds, vars);
  }
  require_close(f32, "f32 convolutions within the f32 bound");
  require_close(tf32, "TF32 convolutions within the TF32 bound");
  // The f32 bound is what f32 results are held to: on the emulated GPU, whose cuDNN rounds the
  // operands to TF32 whenever tensor-op math allows it, each TF32 pass must break it. A real
  // cuDNN is allowed TF32, not made to use it: on the H200 (2026-12-04) these shapes' TF32
  // results stayed within the f32 bound.
  const char* passes[] = {"forward", "data gradient", "filter gradient"};
  for (size_t i = 0; i < 3; ++i) {
    INFO(passes[i]);
    if (tj::knobs::cuda_emulated()) CHECK(bound_violation(tf32.jit[i], f32.ref[i], f32.bound[i]).has_value());
    CHECK(tf32.bound[i][0] > 10 * f32.bound[i][0]);  // bounded as TF32 (2^-10 against k 2^-24)
  }
}

// runtime/cuda/conv_choice.h: on any GPU, both codes timed for an f32 pass and the faster kept.
// On the emulated GPU, whose kernels run on the host, the stand-in's find reports times in
// units of TOWERJIT_EMULATED_CUDNN_MS; raised to 1000 s, the implicit GEMM is faster for every
// pass, and a program runs its convolutions on it (the same bits as with TOWERJIT_CUDNN=off), its
// filter gradient in two slices through the scratch the choice sized. Shapes of their own: the
// choices and cuDNN's plans are cached per process.
TEST_CASE("GPU: towerjit's implicit GEMM is timed beside cuDNN's algorithms and runs the passes where it was faster",
          "[gpu]") {
  if (!cu::cudnn_available()) return;  // without cuDNN there is nothing to choose
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  cu::Cudnn dnn(dev, stream);
  const TjConvShape g{3, 4, 9, 8, 6, 3, 3, 9, 8, 1, 1, 1, 1};
  for (cu::ConvPass pass : {cu::ConvPass::forward, cu::ConvPass::data_gradient, cu::ConvPass::filter_gradient}) {
    INFO(cu::conv_pass_name(pass));
    const cu::ConvChoice c = cu::choose_convolution(&dnn, pass, g, tj::DType::f32, "test", {});
    CHECK(c.cudnn_ms > 0);
    CHECK(c.implicit_gemm_ms > 0);
    CHECK(c.implicit_gemm == (c.implicit_gemm_ms < c.cudnn_ms));
    if (tj::knobs::cuda_emulated()) CHECK_FALSE(c.implicit_gemm);  // 0.001 ms a nominal unit: cuDNN's
    // 16-bit passes are cuDNN's alone: the implicit GEMMs are f32 only.
    const cu::ConvChoice half = cu::choose_convolution(&dnn, pass, g, tj::DType::bf16, "test", {});
    CHECK_FALSE(half.implicit_gemm);
    CHECK(half.implicit_gemm_ms == 0);
  }
  {  // The knob off: cuDNN's alone, the implicit GEMM not even timed.
    tj::test::ScopedEnv off("TOWERJIT_CONV_IMPLICIT_GEMM", "off");
    tj::test::ScopedEnv slow("TOWERJIT_EMULATED_CUDNN_MS", "1e6");
    const TjConvShape g2{2, 4, 9, 8, 6, 3, 3, 9, 8, 1, 1, 1, 1};
    const cu::ConvChoice c = cu::choose_convolution(&dnn, cu::ConvPass::forward, g2, tj::DType::f32, "test", {});
    CHECK_FALSE(c.implicit_gemm);
    CHECK(c.implicit_gemm_ms == 0);
  }
  if (!tj::knobs::cuda_emulated()) return;
  const Geometry ge{5, 9, 9, 6, 3, 1, 1};  // batch 9: the filter gradient's depth 729, two slices
  ConvGraph cg(ge);
  std::vector<std::vector<float>> chosen;
  {
    tj::test::ScopedEnv slow("TOWERJIT_EMULATED_CUDNN_MS", "1e6");
    const cu::ConvChoiceCounts before = cu::conv_choice_counts();
    tj::reference::Variables vars;
    require_close(run_gpu_and_reference(cg.g, cg.fetches, cg.feeds(ge, 9), vars), "conv on the implicit GEMM chosen");
    const cu::ConvChoiceCounts after = cu::conv_choice_counts();
    CHECK(after.made - before.made == 3);
    CHECK(after.implicit_gemm - before.implicit_gemm == 3);
    chosen = run_bits(cg, ge, 9);
  }
  tj::test::ScopedEnv off("TOWERJIT_CUDNN", "off");
  const auto fallback = run_bits(cg, ge, 9);
  REQUIRE(chosen.size() == fallback.size());
  for (size_t i = 0; i < chosen.size(); ++i)
    CHECK(std::memcmp(chosen[i].data(), fallback[i].data(), chosen[i].size() * 4) == 0);
}

// Two GPUs of one model, each with a stream and a cuDNN handle, and a compile cache of their
// own, entered once both GPUs' library kernels are loaded; null without two such GPUs and cuDNN.
struct TwoGpusOfOneModel {
  cu::DeviceContext &d0, &d1;
  tj::test::CacheSandbox sandbox;
  cu::Stream s0{d0}, s1{d1};
  cu::Cudnn dnn0{d0, s0}, dnn1{d1, s1};

  static std::unique_ptr<TwoGpusOfOneModel> make() {
    if (!cu::cudnn_available() || cu::cuda_device_count() < 2) return nullptr;
    cu::DeviceContext &d0 = cu::device(0), &d1 = cu::device(1);
    if (d0.name() != d1.name() || d0.sm_count() != d1.sm_count()) return nullptr;
    d0.library_module();
    d1.library_module();
    return std::unique_ptr<TwoGpusOfOneModel>(new TwoGpusOfOneModel{d0, d1});
  }
};

// Two GPUs of one model choosing the same shape at once, as two ranks of a job do at their first
// step: one times it, the other waits for its entry and reads it (jit/cpu/cache_entry_lock.h),
// so the two run the same algorithm. Without the lock both would find (the emulated find runs
// every algorithm on the host, far longer than the two threads take to start).
TEST_CASE("GPU: two GPUs choosing one shape at once time it once and read the same choice", "[gpu]") {
  const auto gpus = TwoGpusOfOneModel::make();
  if (!gpus) return;
  cu::Cudnn &dnn0 = gpus->dnn0, &dnn1 = gpus->dnn1;
  const TjConvShape g{5, 3, 11, 7, 5, 3, 3, 11, 7, 1, 1, 1, 1};  // a shape of its own
  const cu::ConvChoiceCounts start = cu::conv_choice_counts();
  const int64_t finds = cu::cudnn_find_count();
  std::atomic<int> arrived{0};
  cu::ConvChoice chosen[2];
  auto choose = [&](int i, cu::Cudnn& dnn) {
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
    chosen[i] = cu::choose_convolution(&dnn, cu::ConvPass::filter_gradient, g, tj::DType::f32, "test", {});
  };
  std::thread other(choose, 1, std::ref(dnn1));
  choose(0, dnn0);
  other.join();
  CHECK(cu::cudnn_find_count() - finds == 1);
  const cu::ConvChoiceCounts end = cu::conv_choice_counts();
  CHECK(end.made - start.made == 2);
  CHECK(end.loaded - start.loaded == 1);
  CHECK(chosen[0].implicit_gemm == chosen[1].implicit_gemm);
  CHECK(chosen[0].cudnn_ms == chosen[1].cudnn_ms);
  if (!chosen[0].implicit_gemm)
    CHECK(dnn0.plan(cu::ConvPass::filter_gradient, g, "test").algo ==
          dnn1.plan(cu::ConvPass::filter_gradient, g, "test").algo);
}

// The choices persist in the compile cache, keyed by the GPU's model: the emulator's second GPU
// (the same model) reads what the first chose instead of timing, cuDNN's algorithm listed but
// not found. A cache of its own, entered once both GPUs' library kernels are loaded.
TEST_CASE("GPU: convolution choices are stored in the compile cache and a GPU of the same model reads them", "[gpu]") {
  const auto gpus = TwoGpusOfOneModel::make();
  if (!gpus) return;
  cu::Cudnn &dnn0 = gpus->dnn0, &dnn1 = gpus->dnn1;
  const TjConvShape g{4, 3, 10, 7, 5, 3, 3, 10, 7, 1, 1, 1, 1};
  for (cu::ConvPass pass : {cu::ConvPass::forward, cu::ConvPass::data_gradient, cu::ConvPass::filter_gradient}) {
    INFO(cu::conv_pass_name(pass));
    const cu::ConvChoiceCounts start = cu::conv_choice_counts();
    const int64_t finds = cu::cudnn_find_count();
    const cu::ConvChoice first = cu::choose_convolution(&dnn0, pass, g, tj::DType::f32, "test", {});
    CHECK(cu::cudnn_find_count() - finds == 1);
    const cu::ConvChoice read = cu::choose_convolution(&dnn1, pass, g, tj::DType::f32, "test", {});
    CHECK(cu::cudnn_find_count() - finds == 1);  // no find for the second GPU
    CHECK(cu::conv_choice_counts().loaded - start.loaded == 1);
    CHECK(read.implicit_gemm == first.implicit_gemm);
    CHECK(read.scratch_bytes == first.scratch_bytes);
    CHECK(read.implicit_gemm_ms == first.implicit_gemm_ms);
    if (!first.implicit_gemm) CHECK(dnn1.plan(pass, g, "test").algo == dnn0.plan(pass, g, "test").algo);
  }
  CHECK(gpus->sandbox.dir.files().size() >= 3);  // an entry a pass
  // A stored algorithm is held to plan()'s rules where it is read: on the stand-in the filter
  // gradient's ALGO_0 adds with atomics and FFT_TILING (6) transforms the operands.
  if (tj::knobs::cuda_emulated()) {
    const TjConvShape g3{2, 3, 10, 7, 5, 3, 3, 10, 7, 1, 1, 1, 1};
    CHECK_FALSE(dnn1.adopt(cu::ConvPass::filter_gradient, g3, "test", tj::DType::f32, {0, 0, 1}));
    CHECK_FALSE(dnn1.adopt(cu::ConvPass::filter_gradient, g3, "test", tj::DType::f32, {6, 0, 1}));
    CHECK_FALSE(dnn1.adopt(cu::ConvPass::filter_gradient, g3, "test", tj::DType::f32, {42, 0, 1}));
    const auto one = dnn1.adopt(cu::ConvPass::filter_gradient, g3, "test", tj::DType::f32, {1, 0, 1});
    REQUIRE(one);
    CHECK(one->algo == 1);
  }
  // The emulator's stand-in timing unit is part of the key there: raised, the choices are made
  // afresh, and the implicit GEMM wins them; the second GPU reads that.
  if (!tj::knobs::cuda_emulated()) return;
  tj::test::ScopedEnv slow("TOWERJIT_EMULATED_CUDNN_MS", "1e6");
  const TjConvShape g2{4, 2, 10, 7, 5, 3, 3, 10, 7, 1, 1, 1, 1};  // a shape of its own: choices are kept per process
  const cu::ConvChoiceCounts start = cu::conv_choice_counts();
  const cu::ConvChoice first = cu::choose_convolution(&dnn0, cu::ConvPass::filter_gradient, g2, tj::DType::f32, "test", {});
  CHECK(first.implicit_gemm);
  const cu::ConvChoice read = cu::choose_convolution(&dnn1, cu::ConvPass::filter_gradient, g2, tj::DType::f32, "test", {});
  CHECK(read.implicit_gemm);
  CHECK(cu::conv_choice_counts().loaded - start.loaded == 1);
}
