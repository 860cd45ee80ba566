#include "jit/cpu/cpu_isa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

#include "dsl/error.h"

namespace towerjit::cpujit {

namespace {
// Each level's name (the knob's spelling) and OpenBLAS core type, indexed by CpuIsa.
struct Level {
  const char* name;
  const char* openblas_core;
};
// AVX512_BF16 and AMX add only bf16 products, which Debian's OpenBLAS does not offer (no
// sbgemm): their core type stays SkylakeX's.
constexpr Level kLevels[] = {{"baseline", "Prescott"},
                             {"avx2", "Haswell"},
                             {"avx512", "SkylakeX"},
                             {"avx512bf16", "SkylakeX"},
                             {"amx", "SkylakeX"}};
static_assert(static_cast<int>(CpuIsa::baseline) == 0 && static_cast<int>(CpuIsa::amx) == 4);

// Whether Linux can give a process AMX's tile registers (arch_prctl ARCH_GET_XCOMP_SUPP lists
// XFEATURE_XTILEDATA: Linux 5.16 and later). A process asks for them only when it first
// multiplies on tiles (runtime/cpu/amx_gemm.h, amx_tiles_granted).
bool os_supports_amx_tiles() {
  constexpr long kArchGetXcompSupp = 0x1021;
  constexpr int kXfeatureXtiledata = 18;
  unsigned long features = 0;
  return syscall(SYS_arch_prctl, kArchGetXcompSupp, &features) == 0 && (features >> kXfeatureXtiledata & 1u);
}
}  // namespace

const char* isa_name(CpuIsa isa) { return kLevels[static_cast<int>(isa)].name; }

const char* openblas_core(CpuIsa level) { return kLevels[static_cast<int>(level)].openblas_core; }

CpuIsa widest_isa() {
  static const CpuIsa widest = [] {
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
      if (!__builtin_cpu_supports("avx512bf16")) return CpuIsa::avx512;
      const bool amx = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
      return amx && os_supports_amx_tiles() ? CpuIsa::amx : CpuIsa::avx512bf16;
    }
    return avx2 ? CpuIsa::avx2 : CpuIsa::baseline;
  }();
  return widest;
}

std::string cpu_description() {
  std::string model = "this CPU";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  std::string features;
  auto add = [&](const char* name, bool has) {
    if (has) features += std::string(features.empty() ? "" : " ") + name;
  };
  add("sse2", __builtin_cpu_supports("sse2"));
  add("sse3", __builtin_cpu_supports("sse3"));
  add("sse4.2", __builtin_cpu_supports("sse4.2"));
  add("avx", __builtin_cpu_supports("avx"));
  add("avx2", __builtin_cpu_supports("avx2"));
  add("fma", __builtin_cpu_supports("fma"));
  add("avx512f", __builtin_cpu_supports("avx512f"));
  add("avx512bw", __builtin_cpu_supports("avx512bw"));
  add("avx512_bf16", __builtin_cpu_supports("avx512bf16"));
  add("amx_tile", __builtin_cpu_supports("amx-tile"));
  add("amx_bf16", __builtin_cpu_supports("amx-bf16"));
  return model + ": " + features;
}

CpuIsa checked_isa(CpuIsa requested, CpuIsa widest, const std::string& cpu) {
  if (requested <= widest) return requested;
  std::string levels;
  for (CpuIsa l : {CpuIsa::amx, CpuIsa::avx512bf16, CpuIsa::avx512, CpuIsa::avx2, CpuIsa::baseline})
    if (l <= widest) levels += std::string(levels.empty() ? "" : " or ") + isa_name(l);
  throw Error(std::string("towerjit: TOWERJIT_CPU_ISA=") + isa_name(requested) + " asks for " +
              (requested == CpuIsa::amx ? "AMX-BF16 tiles the kernel supports (amx_tile and amx_bf16, Linux 5.16 or "
                                          "later) with AVX-512 and AVX512_BF16"
               : requested == CpuIsa::avx512bf16 ? "AVX-512 with AVX512_BF16 (avx512f, avx512bw and avx512_bf16)"
               : requested == CpuIsa::avx512   ? "AVX-512 (avx512f and avx512bw)"
                                               : "AVX2 and FMA") +
              ", which this CPU lacks (" + cpu + "); set TOWERJIT_CPU_ISA=" + levels +
              ", or unset it for the widest this CPU has (" + isa_name(widest) + ")");
}

CpuIsa cpu_isa() {
  const std::optional<CpuIsa> cap = knobs::cpu_isa_cap();
  if (!cap) return widest_isa();
  return *cap <= widest_isa() ? *cap : checked_isa(*cap, widest_isa(), cpu_description());
}

}  // namespace towerjit::cpujit
