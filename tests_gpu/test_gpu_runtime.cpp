// The CUDA runtime's parts on a GPU: devices, the caching allocator, streams and events,
// copies within and between GPUs, module loading and cuBLAS's row-major products.
#include <catch2/catch.hpp>
#include <numeric>

#include "gpu_check.h"
#include "jit/cuda/cuda_emitter.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/device_tensor.h"
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
