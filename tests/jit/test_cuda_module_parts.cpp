// A CUDA module compiled as parts (jit/cuda/module_parts.h): the cut, every kernel in its part's
// PTX, the cache per part, errors naming the part and kernel, and the dump of the whole module.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cpu_test_env.h"
#include "cuda_test_util.h"
#include "jit/cuda/module_parts.h"

namespace tj = towerjit;
namespace cu = towerjit::cuda;
using Catch::Matchers::Contains;

namespace {

// A kernel of about `bytes` of text (a comment pads it): a[i] = a[i] * k + i.
std::string kernel_text(const std::string& name, int k, size_t bytes) {
  std::string text = "// " + name + ": " + std::string(bytes > 200 ? bytes - 200 : 0, 'x') + "\n";
  text += "extern \"C\" __global__ void " + name + "(float* a) {\n  const int i = threadIdx.x;\n  a[i] = a[i] * " +
          std::to_string(k) + ".0f + (float)i;\n}\n\n";
  return text;
}

// `count` kernels of `bytes` each, put together as the emitter puts a module.
cu::CudaModule module_of(int count, size_t bytes) {
  cu::CudaModule m;
  m.prelude = "// prelude\n";
  m.source = "// test module\n" + m.prelude;
  for (int i = 0; i < count; ++i) {
    cu::EmittedKernel k;
    k.symbol = "k" + std::to_string(i) + "_scale";
    m.kernel_sources.push_back(kernel_text(k.symbol, i + 2, bytes));
    m.source += m.kernel_sources.back();
    m.kernels.push_back(k);
  }
  return m;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a CUDA module is cut into runs of kernels of about kPartBytes, in order", "[cuda]") {
  // 10 kernels of 10 KB: a part is full once it holds 32 KB, so 4, 4 and 2 kernels.
  const auto cut = cu::cut_into_parts(module_of(10, 10 * 1024));
  REQUIRE(cut.size() == 3);
  CHECK(cut[0] == std::vector<int>{0, 1, 2, 3});
  CHECK(cut[1] == std::vector<int>{4, 5, 6, 7});
  CHECK(cut[2] == std::vector<int>{8, 9});
  // One kernel larger than a part is a part of its own; small ones share one.
  CHECK(cu::cut_into_parts(module_of(1, 100 * 1024)).size() == 1);
  CHECK(cu::cut_into_parts(module_of(7, 100)).size() == 1);
  CHECK(cu::cut_into_parts(module_of(0, 100)).empty());
}

TEST_CASE("a part's name says its module, and only a part's", "[cuda]") {
  CHECK(cu::part_name("tower_step", 3) == "tower_step.part3");
  CHECK(cu::module_of_part("tower_step.part3") == "tower_step");
  CHECK(cu::module_of_part("a.part1.part12") == "a.part1");
  for (const char* whole : {"tower_step", "tower_step.part", "tower_step.partx", "towerjit_library"})
    CHECK(cu::module_of_part(whole) == whole);
}

TEST_CASE("every kernel of a module compiled as parts is in its part's PTX, and only there", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  tj::test::CacheSandbox sandbox;
  const cu::CudaModule m = module_of(9, 12 * 1024);
  const cu::CompiledCudaModule c = cu::compile_cuda_module(m, "parts", "sm_90");
  REQUIRE(c.parts.size() == 3);
  CHECK_FALSE(c.cache_hit);
  for (size_t k = 0; k < m.kernels.size(); ++k) {
    INFO("kernel " << m.kernels[k].symbol);
    for (size_t p = 0; p < c.parts.size(); ++p)
      CHECK((c.parts[p].ptx.find(".entry " + m.kernels[k].symbol + "(") != std::string::npos) ==
            (static_cast<int>(p) == c.part_of_kernel[k]));
  }
  for (const cu::CudaBinary& part : c.parts) CHECK(part.cubin.compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(c.ptx().find(".entry k8_scale(") != std::string::npos);

  // Compiled again: every part from the cache. One kernel more at the end: the parts before
  // the last keep their text, so their entries still hit.
  CHECK(cu::compile_cuda_module(m, "parts", "sm_90").cache_hit);
  const cu::CompiledCudaModule grown = cu::compile_cuda_module(module_of(10, 12 * 1024), "parts", "sm_90");
  REQUIRE(grown.parts.size() == 4);
  CHECK(grown.parts[0].cache_hit);
  CHECK(grown.parts[1].cache_hit);
  CHECK(grown.parts[2].cache_hit);
  CHECK_FALSE(grown.parts[3].cache_hit);
}

TEST_CASE("a CUDA module compiled as parts is dumped whole, and a part that fails is named", "[cuda]") {
  TOWERJIT_REQUIRE_NVRTC();
  tj::test::CacheSandbox sandbox;
  tj::test::TempDir dump;
  {
    tj::test::ScopedEnv dump_env("TOWERJIT_DUMP", dump.path());
    const cu::CudaModule m = module_of(5, 20 * 1024);
    cu::compile_cuda_module(m, "whole", "sm_80");
    CHECK(read_file(dump.path() + "/whole.cu") == m.source);
    const std::string ptx = read_file(dump.path() + "/whole.ptx");
    for (const cu::EmittedKernel& k : m.kernels) CHECK(ptx.find(".entry " + k.symbol + "(") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dump.path() + "/whole.part0.cu"));  // the parts are not dumped
  }
  cu::CudaModule broken = module_of(4, 20 * 1024);
  broken.kernel_sources[3] = "extern \"C\" __global__ void k3_scale(float* a) { a[0] = undeclared; }\n";
  CHECK_THROWS_WITH(cu::compile_cuda_module(broken, "broken", "sm_80"),
                    Contains("CUDA module \"broken.part1\"") && Contains("in kernel k3_scale"));
}
