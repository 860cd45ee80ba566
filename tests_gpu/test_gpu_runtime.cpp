// The CUDA runtime's parts on a GPU: devices, the caching allocator, streams and events,
// copies within and between GPUs, module loading and cuBLAS's row-major products.
#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>

#include "gpu_check.h"
#include "jit/cuda/cuda_emitter.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/library.h"
#include "runtime/cuda/module.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;

namespace {

tj::HostTensor iota(int64_t n, float from = 0) {
  tj::HostTensor t(tj::Shape{n});
  std::iota(t.f32.begin(), t.f32.end(), from);
  return t;
}

}  // namespace

TEST_CASE("GPU: devices report their architecture, and a missing ordinal says how many there are", "[gpu]") {
  REQUIRE(cu::cuda_device_count() >= 1);
  cu::DeviceContext& dev = cu::device(0);
  CHECK(dev.arch().rfind("sm_", 0) == 0);
  CHECK(dev.sm_count() > 0);
  CHECK(dev.total_memory() > 0);
  CHECK(&cu::device(0) == &dev);
  WARN("device: " << dev.str());
  CHECK_THROWS_WITH(cu::device(cu::cuda_device_count()), Catch::Contains("this machine has"));
}

TEST_CASE("GPU: the caching allocator hands a freed block out again", "[gpu]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::DeviceBuffer a = dev.allocate(1000);
  CHECK(a.capacity() == 1024);
  CHECK(a.ptr() % 256 == 0);
  const CUdeviceptr first = a.ptr();
  const auto before = dev.allocator().stats();
  a.reset();
  cu::DeviceBuffer b = dev.allocate(900);  // the same size class
  CHECK(b.ptr() == first);
  CHECK(dev.allocator().stats().cache_hits == before.cache_hits + 1);
  CHECK(dev.allocate(0).ptr() == 0);
}

TEST_CASE("GPU: copies through streams ordered by events, timed by events", "[gpu]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream s1(dev), s2(dev);
  const tj::HostTensor host = iota(1 << 20, 1);
  tj::DeviceTensor a = tj::to_device(host, dev, s1);
  tj::DeviceTensor b = tj::empty_device_tensor(dev, host.shape, host.dtype);
  tj::DeviceTensor c = tj::empty_device_tensor(dev, host.shape, host.dtype);
  cu::Event start(dev), copied(dev);
  start.record(s1);
  cu::copy_async(b.ptr(), dev, a.ptr(), dev, a.bytes(), s1);
  copied.record(s1);
  s2.wait(copied);  // s2's copy reads b only after s1 wrote it
  cu::copy_async(c.ptr(), dev, b.ptr(), dev, b.bytes(), s2);
  s2.synchronize();
  CHECK(copied.ready());
  CHECK(start.elapsed_ms(copied) >= 0.0f);
  CHECK(tj::to_host(c, s2).f32 == host.f32);
}

TEST_CASE("GPU: many copies within a GPU in one launch, at odd sizes and offsets", "[gpu]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  // 70 jobs (three launches of at most 32) of 1 to 5000 words, one of 131071 words (more than
  // one block's share), a 6-byte copy and one from an address 2 bytes in (cuMemcpyDtoDAsync
  // each), all out of one source buffer into one destination, with gaps between them that must
  // keep their fill.
  const int64_t words = 1 << 19;
  const tj::HostTensor host = iota(words, 1);
  tj::DeviceTensor src = tj::to_device(host, dev, stream);
  tj::HostTensor fill(tj::Shape{words});
  std::fill(fill.f32.begin(), fill.f32.end(), -1.0f);
  tj::DeviceTensor dst = tj::to_device(fill, dev, stream);
  std::vector<cu::DeviceCopy> copies;
  std::vector<float> expected = fill.f32;
  int64_t at = 0;
  auto add = [&](int64_t from_word, int64_t to_word, size_t bytes, size_t byte_shift = 0) {
    copies.push_back({dst.ptr() + 4 * to_word + byte_shift, src.ptr() + 4 * from_word + byte_shift, bytes});
    std::memcpy(reinterpret_cast<char*>(expected.data() + to_word) + byte_shift,
                reinterpret_cast<const char*>(host.f32.data() + from_word) + byte_shift, bytes);
  };
  for (int j = 0; j < 70; ++j) {
    const int64_t n = j % 7 == 0 ? 1 : (j * 127) % 5000 + 1;
    add(words - at - n, at, 4 * n);  // read from the far end
    at += n + 3;                     // a gap of 3 words after each
  }
  add(at, at, 4 * 131071);
  at += 131071 + 5;
  add(7, at, 6);          // 6 bytes: not whole words
  add(9, at + 4, 8, 2);   // 8 bytes from 2 bytes into a word: not word-aligned
  REQUIRE(at + 8 < words);
  cu::copy_within(dev, copies, stream, "the test's copies", std::source_location::current());
  const tj::HostTensor back = tj::to_host(dst, stream);
  REQUIRE(back.f32.size() == expected.size());
  CHECK(std::memcmp(back.f32.data(), expected.data(), expected.size() * 4) == 0);
  // One copy, and none, are fine too.
  cu::copy_within(dev, {copies[1]}, stream, "one copy", std::source_location::current());
  cu::copy_within(dev, {}, stream, "no copy", std::source_location::current());
  stream.synchronize();
}

TEST_CASE("GPU: copies between two GPUs", "[gpu]") {
  if (tj::testing::skip_unless_gpus(2)) return;
  cu::DeviceContext &d0 = cu::device(0), &d1 = cu::device(1);
  cu::Stream s0(d0), s1(d1);
  const tj::HostTensor host = iota(12345);
  tj::DeviceTensor a = tj::to_device(host, d0, s0);
  tj::DeviceTensor b = tj::empty_device_tensor(d1, host.shape, host.dtype);
  const bool peer = cu::enable_peer_access(d1, d0);
  WARN("peer access gpu:1 -> gpu:0: " << (peer ? "on" : "off (staged through the host)"));
  cu::copy_async(b.ptr(), d1, a.ptr(), d0, a.bytes(), s1);
  s1.synchronize();
  CHECK(tj::to_host(b, s1).f32 == host.f32);
}

TEST_CASE("GPU: cuBLAS computes row-major products with every transpose and broadcast batches", "[gpu]") {
  cu::DeviceContext& dev = cu::device(0);
  cu::Stream stream(dev);
  cu::Cublas blas(dev, stream);
  const int64_t m = 3, n = 5, k = 4, batch = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // a: batch x (m x k, stored k x m when ta), b: one matrix broadcast over the batch.
      const tj::HostTensor a = iota(batch * m * k, -3), b = iota(k * n, -7);
      tj::DeviceTensor da = tj::to_device(a, dev, stream), db = tj::to_device(b, dev, stream);
      tj::DeviceTensor dc = tj::empty_device_tensor(dev, tj::Shape{batch, m, n}, tj::DType::f32);
      blas.gemm(ta, tb, m, n, k, da.ptr(), ta ? m : k, m * k, db.ptr(), tb ? k : n, 0, 0.0f, dc.ptr(), n, m * n, batch,
                "test");
      const tj::HostTensor c = tj::to_host(dc, stream);
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0;
            for (int64_t p = 0; p < k; ++p)
              want += a.f32[bi * m * k + (ta ? p * m + i : i * k + p)] * b.f32[tb ? j * k + p : p * n + j];
            INFO("trans_a " << ta << " trans_b " << tb << " at [" << bi << "," << i << "," << j << "]");
            CHECK(c.f32[(bi * m + i) * n + j] == Approx(want));
          }
    }
}

TEST_CASE("GPU: the library kernels load once per device and define every entry", "[gpu]") {
  cu::DeviceContext& dev = cu::device(0);
  const cu::LoadedModule& lib = dev.library_module();
  CHECK(&dev.library_module() == &lib);
  for (const std::string& name : tj::cuda::library_kernel_names()) CHECK(lib.function(name) != nullptr);
}
