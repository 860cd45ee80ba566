// The peers held to towerjit's vector level under TOWERJIT_CPU_ISA (bench/peer_isa_cap.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "bench/peer_isa_cap.h"

namespace bench = towerjit::bench;
using towerjit::cpujit::CpuIsa;

namespace {

// Inductor's compile cache for a level: one a level, as its own cache would mix them.
std::string inductor_cache(const std::string& level) {
  return (std::filesystem::temp_directory_path() / ("torchinductor-towerjit-" + level)).string();
}

}  // namespace

TEST_CASE("bench: the peers are capped only below the CPU's widest level", "[bench]") {
  CHECK(bench::peer_isa_cap(CpuIsa::amx, CpuIsa::amx, nullptr).empty());
  CHECK(bench::peer_isa_cap(CpuIsa::avx2, CpuIsa::avx2, "--xla_cpu_use_thunk_runtime=true").empty());
  CHECK(bench::peer_not_held("jax", "", CpuIsa::avx512, CpuIsa::avx512).empty());
}

TEST_CASE("bench: each peer library gets its own cap at the level towerjit runs", "[bench]") {
  CHECK(bench::peer_isa_cap(CpuIsa::avx2, CpuIsa::amx, nullptr) ==
        "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 "
        "'XLA_FLAGS=--xla_cpu_max_isa=AVX2' 'TORCHINDUCTOR_CACHE_DIR=" + inductor_cache("avx2") + "'");
  CHECK(bench::peer_isa_cap(CpuIsa::baseline, CpuIsa::avx2, nullptr) ==
        "ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 "
        "'XLA_FLAGS=--xla_cpu_max_isa=SSE4_2' 'TORCHINDUCTOR_CACHE_DIR=" + inductor_cache("baseline") + "'");
  CHECK(bench::peer_isa_cap(CpuIsa::avx512, CpuIsa::amx, nullptr) ==
        "ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 ONEDNN_MAX_CPU_ISA=AVX512_CORE "
        "'XLA_FLAGS=--xla_cpu_max_isa=AVX512' 'TORCHINDUCTOR_CACHE_DIR=" + inductor_cache("avx512") + "'");
}

TEST_CASE("bench: the user's XLA_FLAGS stay ahead of the peers' cap", "[bench]") {
  CHECK(bench::peer_isa_cap(CpuIsa::avx2, CpuIsa::avx512, "--xla_force_host_platform_device_count=2")
            .find("'XLA_FLAGS=--xla_force_host_platform_device_count=2 --xla_cpu_max_isa=AVX2'") != std::string::npos);
  CHECK(bench::peer_isa_cap(CpuIsa::avx2, CpuIsa::avx512, "").find(" 'XLA_FLAGS=--xla_cpu_max_isa=AVX2'") != std::string::npos);
}

TEST_CASE("bench: a peer not held to the level is named, with the reason", "[bench]") {
  // ATen reports its level in upper case; a run that reported another is not held.
  CHECK(bench::peer_not_held("torch-eager", "AVX2", CpuIsa::avx2, CpuIsa::amx).empty());
  CHECK(bench::peer_not_held("torch-compile", "AVX512", CpuIsa::avx2, CpuIsa::amx) == "ATen reported AVX512, not AVX2");
  CHECK(bench::peer_not_held("torch-eager", "", CpuIsa::baseline, CpuIsa::avx2) == "ATen reported no level, not DEFAULT");
  // XLA's cap does not reach its products.
  CHECK_THAT(bench::peer_not_held("jax", "", CpuIsa::avx2, CpuIsa::avx512),
             Catch::Matchers::Contains("not its matrix products"));
}
