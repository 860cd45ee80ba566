// Matrix products on the GPU (runtime/cuda/cublaslt.h, cublas.h): through cuBLASLt against the
// reference interpreter at odd sizes, with transposes and broadcast batches, within the error
// bound of the mode they ran in (full f32, or TF32 with TOWERJIT_ALLOW_TF32=on); the algorithm
// chosen once per shape; the same bits every run; the cuBLAS fallback without cuBLASLt; and
// TF32's error itself, beyond the f32 bound and within the TF32 one.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gpu_check.h"
#include "jit/reference/interpreter.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/device_tensor.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using tj::Tensor;
using namespace tj::testing;

namespace {

// a @ b (each possibly fed transposed and transposed back in the graph, which the fusion pass
// folds into the product's flags), against the reference, in the mode the knob sets.
void check_matmul(const tj::Shape& a_shape, const tj::Shape& b_shape, bool ta, bool tb, uint32_t seed) {
  auto swapped = [](tj::Shape s) {
    std::swap(s[s.rank() - 1], s[s.rank() - 2]);
    return s;
  };
  auto last_two = [](int rank) {
    std::vector<int> perm(rank);
    for (int i = 0; i < rank; ++i) perm[i] = i;
    std::swap(perm[rank - 1], perm[rank - 2]);
    return perm;
  };
  tj::Graph g;
  tj::GraphScope use(g);
  const tj::Shape fa = ta ? swapped(a_shape) : a_shape, fb = tb ? swapped(b_shape) : b_shape;
  Tensor a = tj::input("a", fa), b = tj::input("b", fb);
  if (ta) a = tj::transpose(a, last_two(fa.rank()));
  if (tb) b = tj::transpose(b, last_two(fb.rank()));
  const Tensor c = tj::matmul(a, b);
  tj::reference::Feeds feeds{{"a", random_array(fa, seed)}, {"b", random_array(fb, seed + 1)}};
  tj::reference::Variables vars;
  const JitRun r = run_gpu_and_reference(g, {c}, feeds, vars);
  require_close(r, a_shape.str() + " @ " + b_shape.str() + (ta ? " (a transposed)" : "") +
                       (tb ? " (b transposed)" : "") + (tj::knobs::allow_tf32() ? " in TF32" : " in f32"));
}

// Row-major host product of one m x k and one k x n matrix, in double.
std::vector<double> host_product(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n,
                                 int64_t k) {
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
  return c;
}

tj::HostTensor random_host(int64_t elements, uint32_t seed) {
  const tj::reference::Array a = random_array(tj::Shape{elements}, seed);
  return to_host(a);
}

}  // namespace

TEST_CASE("GPU: matmuls at odd sizes, transposed, match the reference within their mode's bound", "[gpu][matmul]") {
  uint32_t seed = 1;
  for (int64_t m : {1, 7, 127})
    for (int64_t k : {1, 7, 127})
      for (int64_t n : {1, 7}) {
        check_matmul(tj::Shape{m, k}, tj::Shape{k, n}, false, false, seed++);
        check_matmul(tj::Shape{m, k}, tj::Shape{k, n}, m == 7, k == 7, seed++);
      }
  check_matmul(tj::Shape{127, 127}, tj::Shape{127, 127}, true, true, seed++);
}

TEST_CASE("GPU: batched matmuls with broadcast operands match the reference within their mode's bound",
          "[gpu][matmul]") {
  // One operand broadcast over the batch (stride 0 in one strided-batched call), both batched,
  // and batch axes broadcast against each other (offsets no stride gives: one call a batch).
  check_matmul(tj::Shape{5, 7, 127}, tj::Shape{127, 7}, false, false, 11);
  check_matmul(tj::Shape{7, 1}, tj::Shape{3, 1, 7}, false, false, 12);
  check_matmul(tj::Shape{3, 7, 7}, tj::Shape{3, 7, 1}, true, false, 13);
  check_matmul(tj::Shape{2, 1, 7, 7}, tj::Shape{1, 3, 7, 127}, false, true, 14);
  check_matmul(tj::Shape{1, 1, 1}, tj::Shape{4, 1, 1}, false, false, 15);
}

TEST_CASE("GPU: cuBLASLt chooses an algorithm once per shape, and a product gives the same bits every run",
          "[gpu][matmul]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  cu::Cublas blas(dev, stream);
  REQUIRE(blas.lt() != nullptr);  // cuBLASLt loads wherever the toolkit (or the emulator) is
  const int64_t m = 7, n = 127, k = 33;
  const tj::HostTensor a = random_host(m * k, 1), b = random_host(k * n, 2);
  tj::DeviceTensor da = tj::to_device(a, dev, stream), db = tj::to_device(b, dev, stream);
  auto product = [&](int64_t rows) {
    tj::DeviceTensor dc = tj::empty_device_tensor(dev, tj::Shape{rows, n}, tj::DType::f32);
    blas.matmul(false, false, rows, n, k, da.ptr(), k, 0, db.ptr(), n, 0, dc.ptr(), n, 0, 1, "test");
    return tj::to_host(dc, stream);
  };
  const tj::HostTensor first = product(m);
  CHECK(blas.lt()->plans() == 1);
  const tj::HostTensor again = product(m);
  CHECK(blas.lt()->heuristic_calls() == 1);  // the same shape: the cached plan
  CHECK(std::memcmp(first.f32.data(), again.f32.data(), first.f32.size() * 4) == 0);
  product(m - 1);  // another shape: asked once more
  CHECK(blas.lt()->plans() == 2);
  CHECK(blas.lt()->heuristic_calls() == 2);
  product(m - 1);
  CHECK(blas.lt()->heuristic_calls() == 2);
  // And the values are the product (loosely here, within TF32's worst case, k 2^-10 for terms
  // below 1: the bound checks are the cases above).
  const std::vector<double> want = host_product(a.f32, b.f32, m, n, k);
  for (int64_t i = 0; i < m * n; ++i) CHECK(first.f32[i] == Approx(want[i]).margin(k * 0x1p-10));
}

TEST_CASE("GPU: a program's products give the same bits on every run", "[gpu][matmul]") {
  tj::Graph g;
  tj::GraphScope use(g);
  const Tensor x = tj::input("x", tj::Shape{tj::kBatch, 127}), w = tj::input("w", tj::Shape{127, 33});
  const Tensor y = tj::matmul(tj::relu(tj::matmul(x, w)), tj::transpose(w));
  tj::HostFeeds feeds{{"x", random_host(64 * 127, 3)}, {"w", random_host(127 * 33, 4)}};
  feeds.at("x").shape = tj::Shape{64, 127};
  feeds.at("w").shape = tj::Shape{127, 33};
  tj::HostVariables vars;
  tj::CudaProgram one(g, {y}), two(g, {y});
  const tj::HostTensor r1 = one.run(feeds, vars).at(0), r2 = one.run(feeds, vars).at(0), r3 = two.run(feeds, vars).at(0);
  CHECK(std::memcmp(r1.f32.data(), r2.f32.data(), r1.f32.size() * 4) == 0);
  CHECK(std::memcmp(r1.f32.data(), r3.f32.data(), r1.f32.size() * 4) == 0);
}

TEST_CASE("GPU: without cuBLASLt, products run through cuBLAS after a warning", "[gpu][matmul]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  // Capture what the constructor writes to stderr.
  std::fflush(stderr);
  char path[] = "/tmp/towerjit_cublaslt_warningXXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  std::optional<cu::Cublas> blas;
  const cu::CublasLtLoad missing{nullptr, "libcublasLt.so.13 (hidden by the test)"};
  blas.emplace(dev, stream, missing);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  CHECK_THAT(text.str(), Catch::Contains("towerjit: warning: cuBLASLt not found (tried libcublasLt.so.13 (hidden by "
                                         "the test)); matrix products run through cuBLAS's "
                                         "cublasSgemmStridedBatched instead, in FP32 only"));
  CHECK(blas->lt() == nullptr);
  const int64_t m = 7, n = 5, k = 127, batch = 3;
  const tj::HostTensor a = random_host(batch * m * k, 5), b = random_host(k * n, 6);
  tj::DeviceTensor da = tj::to_device(a, dev, stream), db = tj::to_device(b, dev, stream);
  tj::DeviceTensor dc = tj::empty_device_tensor(dev, tj::Shape{batch, m, n}, tj::DType::f32);
  blas->matmul(false, false, m, n, k, da.ptr(), k, m * k, db.ptr(), n, 0, dc.ptr(), n, m * n, batch, "test");
  const tj::HostTensor c = tj::to_host(dc, stream);
  for (int64_t bi = 0; bi < batch; ++bi) {
    const std::vector<float> ai(a.f32.begin() + bi * m * k, a.f32.begin() + (bi + 1) * m * k);
    const std::vector<double> want = host_product(ai, b.f32, m, n, k);
    for (int64_t i = 0; i < m * n; ++i) CHECK(c.f32[bi * m * n + i] == Approx(want[i]).margin(1e-4));
  }
}

TEST_CASE("GPU: TF32 products show TF32's error: beyond the f32 bound, within the TF32 one", "[gpu][matmul]") {
  // Inputs with all 23 mantissa bits in use, a sum long enough for the tensor cores.
  tj::Graph g;
  tj::GraphScope use(g);
  const tj::Shape as{64, 256}, bs{256, 64};
  const Tensor c = tj::matmul(tj::input("a", as), tj::input("b", bs));
  tj::reference::Feeds feeds{{"a", random_array(as, 21, 0.5, 1)}, {"b", random_array(bs, 22, 0.5, 1)}};
  tj::reference::Variables vars;
  JitRun f32, tf32;
  {
    ScopedEnv off("TOWERJIT_ALLOW_TF32", "off");
    f32 = run_gpu_and_reference(g, {c}, feeds, vars);
  }
  {
    ScopedEnv on("TOWERJIT_ALLOW_TF32", "on");
    tf32 = run_gpu_and_reference(g, {c}, feeds, vars);
  }
  require_close(f32, "f32 within the f32 bound");
  require_close(tf32, "TF32 within the TF32 bound");
  // The f32 bound is what f32 results are held to: TF32's must break it.
  CHECK(bound_violation(tf32.jit[0], f32.ref[0], f32.bound[0]).has_value());
  CHECK(tf32.bound[0][0] > 100 * f32.bound[0][0]);
}

// Products of bf16 or f16 operands run on cuBLASLt only (cuBLAS's sgemm takes f32): without
// it, such a product is an error naming the op and the way out, before anything is queued.
TEST_CASE("GPU: without cuBLASLt a product of bf16 operands is an error naming it", "[gpu][half]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  const cu::CublasLtLoad missing{nullptr, "libcublasLt.so.13 (hidden by the test)"};
  cu::Cublas blas(dev, stream, missing);
  tj::DeviceTensor a = tj::empty_device_tensor(dev, tj::Shape{7, 5}, tj::DType::bf16);
  tj::DeviceTensor b = tj::empty_device_tensor(dev, tj::Shape{5, 3}, tj::DType::bf16);
  tj::DeviceTensor c = tj::empty_device_tensor(dev, tj::Shape{7, 3}, tj::DType::f32);
  CHECK_THROWS_WITH(blas.matmul(false, false, 7, 3, 5, a.ptr(), 5, 0, b.ptr(), 3, 0, c.ptr(), 3, 0, 1, "matmul in the test",
                                tj::DType::bf16),
                    Catch::Contains("matmul in the test: a matrix product of bf16 operands [7x5] x [5x3] runs on "
                                    "cuBLASLt only, and cuBLASLt did not load"));
}
