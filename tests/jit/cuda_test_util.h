// Helpers for the CUDA compile tests: skip where NVRTC is missing, and compile a graph's
// whole program for sm_80 and sm_90, checking every kernel made it into its part's PTX.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cpu_test_env.h"
#include "jit/cuda/cuda_emitter.h"
#include "jit/cuda/module_parts.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/passes/pipeline.h"
#include "towerjit.h"

// Reports the test as skipped (a visible warning) and leaves it when NVRTC is not installed.
#define TOWERJIT_REQUIRE_NVRTC()                                                  \
  if (!::towerjit::cuda::nvrtc_available()) {                                     \
    WARN("skipped: NVRTC not found (install CUDA or set CUDA_HOME)");             \
    return;                                                                       \
  }

namespace towerjit::testing {

// Compiles for both architectures with the cache off; returns the emitted module.
inline cuda::CudaModule require_compiles(const Graph& g, const std::vector<int>& fetches,
                                         const std::vector<int>& updates, const std::string& name) {
  test::ScopedEnv no_cache("TOWERJIT_CACHE", "off");
  test::ScopedEnv no_dump("TOWERJIT_DUMP", std::nullopt);
  LoweredProgram lowered = lower_graph(g, fetches, updates);
  cuda::CudaModule m = cuda::emit_cuda_module(lowered.graph, lowered.program, name);
  REQUIRE(m.kernels.size() == lowered.program.kernels.size());
  for (const char* arch : {"sm_80", "sm_90"}) {
    INFO(name << " for " << arch);
    cuda::CompiledCudaModule compiled;  // as a CudaProgram compiles it: in parts (module_parts.h)
    REQUIRE_NOTHROW(compiled = cuda::compile_cuda_module(m, name, arch));
    for (const cuda::CudaBinary& bin : compiled.parts) CHECK(bin.cubin.compare(0, 4, "\x7f" "ELF") == 0);
    for (size_t i = 0; i < m.kernels.size(); ++i) {
      const auto& k = m.kernels[i];
      const std::string& ptx = compiled.parts.at(compiled.part_of_kernel.at(i)).ptx;
      INFO("kernel " << k.symbol);
      CHECK(ptx.find(".entry " + k.symbol + "(") != std::string::npos);
      if (k.may_split()) CHECK(ptx.find(".entry " + k.combine_symbol + "(") != std::string::npos);
    }
  }
  return m;
}

inline std::vector<int> ids(const std::vector<Tensor>& ts) {
  std::vector<int> out;
  for (const auto& t : ts) out.push_back(t.id());
  return out;
}

}  // namespace towerjit::testing
