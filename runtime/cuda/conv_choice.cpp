#include "runtime/cuda/conv_choice.h"

#include <chrono>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "jit/cpu/cache_entry_lock.h"
#include "jit/cpu/compile_cache.h"
#include "jit/cuda/device_sources.h"
#include "jit/knobs.h"
#include "runtime/cuda/implicit_gemm_conv.h"

namespace towerjit::cuda {
namespace {

// Launches timed after the untimed one: a few, so the events' resolution (about 0.5 us) is
// small beside them; the find times cuDNN's algorithms in the same spirit.
constexpr int kTimedRuns = 3;

// How long a process waits for another one timing the same shape before it times on its own:
// far beyond a find on a GPU (milliseconds to a second), not forever behind a stuck one.
constexpr std::chrono::seconds kWaitForAnotherTiming{60};

struct ChoiceCache {
  std::mutex mutex;
  std::map<std::vector<long long>, ConvChoice> choices;
  ConvChoiceCounts counts;
};

ChoiceCache& cache() {
  static ChoiceCache c;
  return c;
}

std::vector<long long> key_of(const Cudnn& dnn, ConvPass pass, const TjConvShape& g, DType dtype) {
  const auto cap = knobs::cudnn_workspace_mb();
  return {dnn.device().ordinal(), static_cast<long long>(pass), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.oh, g.ow,
          g.stride_h, g.stride_w, g.pad_h, g.pad_w, cap ? static_cast<long long>(*cap) : -1, dnn.tf32() ? 1 : 0,
          static_cast<long long>(dtype), knobs::conv_implicit_gemm() ? 1 : 0};
}

// The choice's entry in the compile cache: the GPU's model rather than its ordinal (any GPU of
// the model chooses alike), cuDNN's version, the implicit GEMMs' source (a change to them
// times afresh) and the in-process key but its ordinal. On the emulator the device's speed
// is the stand-in's timing unit, so that is part of it there.
std::string persisted_key(const Cudnn& dnn, const std::vector<long long>& key) {
  std::ostringstream fields;
  for (size_t i = 1; i < key.size(); ++i) fields << key[i] << ' ';
  const CudnnApi* api = loaded_cudnn();
  const DeviceContext& d = dnn.device();
  return cpujit::make_cache_key({"convolution choice", d.name(), d.arch(), std::to_string(d.sm_count()),
                                 std::to_string(api ? api->version : 0), kDeviceConvKernels, fields.str(),
                                 knobs::cuda_emulated() ? std::to_string(knobs::emulated_cudnn_ms()) : ""});
}

// "implicit_gemm CUDNN_MS IMPLICIT_GEMM_MS" or "cudnn ALGO CUDNN_MS IMPLICIT_GEMM_MS".
std::string payload_of(const ConvChoice& c, int algo) {
  std::ostringstream out;
  out << std::setprecision(9);  // a float's digits: read back, the same timings
  if (c.implicit_gemm) out << "implicit_gemm ";
  else out << "cudnn " << algo << ' ';
  out << c.cudnn_ms << ' ' << c.implicit_gemm_ms << '\n';
  return out.str();
}

// The choice an earlier process stored for the key, where its entry reads whole and (for
// cuDNN's) the algorithm still qualifies here: Cudnn::adopt lists it without timing.
std::optional<ConvChoice> load_choice(const cpujit::CompileCache& store, const std::string& entry, Cudnn& dnn,
                                      ConvPass pass, const TjConvShape& g, DType dtype, const std::string& what) {
  const cpujit::CompileCache::Lookup found = store.load(entry);
  if (found.status != cpujit::CompileCache::Status::hit) return std::nullopt;
  std::istringstream in(found.payload);
  std::string kind;
  int algo = -1;
  ConvChoice c;
  in >> kind;
  if (kind == "cudnn") in >> algo;
  in >> c.cudnn_ms >> c.implicit_gemm_ms;
  if (!in || (kind != "cudnn" && kind != "implicit_gemm")) return std::nullopt;
  if (kind == "implicit_gemm") {
    c.implicit_gemm = true;
    c.scratch_bytes = implicit_gemm_scratch_bytes(pass, g);
    return c;
  }
  const std::optional<ConvAlgorithm> adopted = dnn.adopt(pass, g, what, dtype, {algo, 0, c.cudnn_ms});
  if (!adopted) return std::nullopt;
  c.scratch_bytes = adopted->workspace;
  return c;
}

// Milliseconds one implicit-GEMM pass takes on dnn's device and stream, on scratch operands of
// the shape (their contents do not change the work).
float time_implicit_gemm(const Cudnn& dnn, ConvPass pass, const TjConvShape& g, const std::string& what,
                         std::source_location loc) {
  DeviceContext& device = dnn.device();
  const Stream& stream = dnn.stream();
  DeviceBuffer x = device.allocate(static_cast<size_t>(g.n * g.c * g.h * g.w) * 4, loc);
  DeviceBuffer w = device.allocate(static_cast<size_t>(g.o * g.c * g.kh * g.kw) * 4, loc);
  DeviceBuffer y = device.allocate(static_cast<size_t>(g.n * g.o * g.oh * g.ow) * 4, loc);
  DeviceBuffer scratch = device.allocate(implicit_gemm_scratch_bytes(pass, g), loc);
  // The operands in the pass's roles: forward x, w -> y; data gradient dy, w -> dx; filter
  // gradient x, dy -> dw.
  const CUdeviceptr a = pass == ConvPass::data_gradient ? y.ptr() : x.ptr();
  const CUdeviceptr b = pass == ConvPass::filter_gradient ? y.ptr() : w.ptr();
  const CUdeviceptr out = pass == ConvPass::forward ? y.ptr() : pass == ConvPass::data_gradient ? x.ptr() : w.ptr();
  const std::string timed = what + " (timed beside cuDNN's algorithms)";
  auto queue = [&] { queue_implicit_gemm(pass, g, a, b, out, scratch.ptr(), {}, device, stream, timed, loc); };
  queue();
  Event start(device), end(device);
  start.record(stream);
  for (int i = 0; i < kTimedRuns; ++i) queue();
  end.record(stream);
  stream.synchronize("timing towerjit's implicit GEMM for " + what, loc);
  return start.elapsed_ms(end) / kTimedRuns;
}

}  // namespace

ConvChoice choose_convolution(Cudnn* dnn, ConvPass pass, const TjConvShape& g, DType dtype, const std::string& what,
                              std::source_location loc) {
  if (!dnn) return {true, implicit_gemm_scratch_bytes(pass, g), 0, 0};
  ChoiceCache& c = cache();
  const auto key = key_of(*dnn, pass, g, dtype);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto it = c.choices.find(key); it != c.choices.end()) return it->second;
  }
  const std::optional<cpujit::CompileCache> store = cpujit::CompileCache::from_knobs();
  const std::string entry = store ? persisted_key(*dnn, key) : "";
  std::optional<ConvChoice> choice = store ? load_choice(*store, entry, *dnn, pass, g, dtype, what) : std::nullopt;
  // On a miss, one process (or thread) at a time times the shape; the others wait for its
  // entry, then read it (jit/cpu/cache_entry_lock.h).
  std::optional<cpujit::CacheEntryLock> timing;
  if (store && !choice) {
    timing.emplace(*store, entry, kWaitForAnotherTiming);
    choice = load_choice(*store, entry, *dnn, pass, g, dtype, what);
  }
  const bool loaded = choice.has_value();
  if (!choice) {
    const ConvAlgorithm planned = dnn->plan(pass, g, what, dtype);
    choice = ConvChoice{false, planned.workspace, planned.time_ms, 0};
    // A find that timed nothing (time_ms 0 or less) leaves nothing to compare with: cuDNN's
    // heuristic choice stands.
    if (dtype == DType::f32 && knobs::conv_implicit_gemm() && planned.time_ms > 0) {
      choice->implicit_gemm_ms = time_implicit_gemm(*dnn, pass, g, what, loc);
      if (choice->implicit_gemm_ms < planned.time_ms) {
        choice->implicit_gemm = true;
        choice->scratch_bytes = implicit_gemm_scratch_bytes(pass, g);
      }
    }
    if (store) store->store(entry, payload_of(*choice, planned.algo));
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  auto [it, inserted] = c.choices.emplace(key, *choice);
  if (inserted) {
    ++c.counts.made;
    c.counts.implicit_gemm += choice->implicit_gemm;
    c.counts.loaded += loaded;
  }
  return it->second;
}

ConvChoiceCounts conv_choice_counts() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().counts;
}

}  // namespace towerjit::cuda
