#include "bench/peer_isa_cap.h"

#include <cctype>
#include <filesystem>

namespace towerjit::bench {
namespace {

struct Caps {
  const char* aten;
  const char* mkl;
  const char* onednn;
  const char* xla;
};

Caps caps_of(cpujit::CpuIsa level) {
  switch (level) {
    case cpujit::CpuIsa::baseline:
      return {"default", "SSE4_2", "SSE41", "SSE4_2"};
    case cpujit::CpuIsa::avx2:
      return {"avx2", "AVX2", "AVX2", "AVX2"};
    case cpujit::CpuIsa::avx512:
      return {"avx512", "AVX512", "AVX512_CORE", "AVX512"};
    default:  // avx512bf16 below amx: the bf16 products on AVX-512, no tiles
      return {"avx512", "AVX512", "AVX512_CORE_BF16", "AVX512_BF16"};
  }
}

}  // namespace

std::string peer_isa_cap(cpujit::CpuIsa level, cpujit::CpuIsa widest, const char* user_xla_flags) {
  if (level >= widest) return "";
  const Caps c = caps_of(level);
  std::string xla = user_xla_flags && *user_xla_flags ? std::string(user_xla_flags) + " " : "";
  xla += std::string("--xla_cpu_max_isa=") + c.xla;
  // Inductor's cache does not key its compiled kernels by ATEN_CPU_CAPABILITY: one compiled at
  // another level is loaded as it is, and crashed torch.compile (heap corruption at avx512
  // after runs at avx2; C++ errors at the baseline). A cache a level keeps them apart.
  const std::string inductor =
      (std::filesystem::temp_directory_path() / (std::string("torchinductor-towerjit-") + cpujit::isa_name(level)))
          .string();
  return std::string("ATEN_CPU_CAPABILITY=") + c.aten + " MKL_ENABLE_INSTRUCTIONS=" + c.mkl +
         " ONEDNN_MAX_CPU_ISA=" + c.onednn + " 'XLA_FLAGS=" + xla + "' 'TORCHINDUCTOR_CACHE_DIR=" + inductor + "'";
}

std::string peer_not_held(const std::string& peer, const std::string& reported_capability, cpujit::CpuIsa level,
                          cpujit::CpuIsa widest) {
  if (level >= widest) return "";
  if (peer == "jax")
    return std::string("XLA's --xla_cpu_max_isa holds its generated code, not its matrix products, which run ") +
           "wider than " + cpujit::isa_name(level) + " (bench/peer_isa_cap.h)";
  std::string wanted = caps_of(level).aten;
  for (char& c : wanted) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (reported_capability == wanted) return "";
  return "ATen reported " + (reported_capability.empty() ? std::string("no level") : reported_capability) +
         ", not " + wanted;
}

}  // namespace towerjit::bench
