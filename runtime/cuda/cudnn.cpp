#include "runtime/cuda/cudnn.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/memory.h"
#include "runtime/cuda/toolkit_library.h"

namespace towerjit::cuda {
namespace {

struct Loaded {
  CudnnApi api;
  bool ok = false;
  std::string problem;  // why not, when !ok
};

// Python's nvidia/cudnn/lib directories (pip's nvidia-cudnn-cu12/cu13 wheels, which PyTorch
// pulls in): under the active virtual environment, the user's site and the system's.
std::vector<std::string> python_cudnn_dirs() {
  namespace fs = std::filesystem;
  std::vector<std::string> bases;
  if (auto prefix = knobs::python_env_prefix()) bases.push_back(*prefix + "/lib");
  if (auto home = knobs::home()) bases.push_back(*home + "/.local/lib");
  bases.insert(bases.end(), {"/usr/local/lib", "/usr/lib"});
  std::vector<std::string> dirs;
  for (const std::string& base : bases) {
    std::error_code ec;
    std::vector<std::string> pythons;
    for (const auto& e : fs::directory_iterator(base, ec))
      if (e.path().filename().string().rfind("python3", 0) == 0) pythons.push_back(e.path().string());
    std::sort(pythons.begin(), pythons.end());
    for (const std::string& py : pythons)
      for (const char* site : {"/site-packages", "/dist-packages"})
        if (fs::is_directory(py + site + "/nvidia/cudnn/lib", ec)) dirs.push_back(py + site + "/nvidia/cudnn/lib/");
  }
  return dirs;
}

Loaded load() {
  Loaded l;
  std::vector<std::string> dirs = {"/usr/local/cuda/lib64/", "/usr/local/cuda/lib/"};
  for (const std::string& d : python_cudnn_dirs()) dirs.push_back(d);
  // libcudnn.so.9 loads its sub-libraries (libcudnn_cnn.so.9, ...) from its own directory.
  const ToolkitLibrary lib = open_toolkit_library({"libcudnn.so.9"}, dirs);
  if (!lib.handle) {
    l.problem = "libcudnn.so.9 was not found (tried " + lib.tried + ")";
    return l;
  }
  l.api.library = lib.name;
  std::string missing;
#define TOWERJIT_CUDNN_BIND(member, symbol, signature) bind_symbol(lib.handle, l.api.member, #symbol, missing);
  TOWERJIT_CUDNN_FUNCTIONS(TOWERJIT_CUDNN_BIND)
#undef TOWERJIT_CUDNN_BIND
  if (!missing.empty()) {
    l.problem = l.api.library + " lacks " + missing;
    return l;
  }
  l.api.version = l.api.GetVersion();
  l.problem = cudnn_version_problem(l.api.version);
  if (!l.problem.empty()) l.problem = l.api.library + " is " + l.problem;
  l.ok = l.problem.empty();
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

std::string status_name(CudnnStatus s) {
  const char* name = loaded().api.GetErrorString ? loaded().api.GetErrorString(s) : nullptr;
  return name ? name : "cudnnStatus_t " + std::to_string(s);
}

void check_cudnn(CudnnStatus s, const char* call, const std::string& what,
                 std::source_location loc = std::source_location::current()) {
  user_check(s == 0, loc) << "cuDNN call " << call << " failed: " << status_name(s)
                          << (what.empty() ? "" : " for " + what);
}

int as_int(long long v, const std::string& what) {
  user_check(v >= 0 && v <= std::numeric_limits<int>::max(), std::source_location::current())
      << what << ": a convolution dimension of " << v << " is beyond cuDNN's 32-bit descriptors";
  return static_cast<int>(v);
}

std::string size_text(size_t bytes) {
  if (bytes < (1 << 20)) return std::to_string(bytes) + " bytes";
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

std::string shape_text(const TjConvShape& g) {
  return "x [" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " + std::to_string(g.h) + ", " +
         std::to_string(g.w) + "], w [" + std::to_string(g.o) + ", " + std::to_string(g.c) + ", " +
         std::to_string(g.kh) + ", " + std::to_string(g.kw) + "], stride " + std::to_string(g.stride_h) + "x" +
         std::to_string(g.stride_w) + ", padding " + std::to_string(g.pad_h) + "x" + std::to_string(g.pad_w);
}

// cudnnDataType_t of the operands and the result.
int data_type(DType dtype) {
  internal_check(dtype == DType::f32 || is_half_float(dtype)) << "a cuDNN convolution in " << dtype_name(dtype);
  return dtype == DType::bf16 ? kCudnnDataBfloat16 : dtype == DType::f16 ? kCudnnDataHalf : kCudnnDataFloat;
}

// The descriptors of one shape: host objects, read-only once set, shared by every handle.
struct Descriptors {
  CudnnT x = nullptr, y = nullptr;
  CudnnF w = nullptr;
  CudnnC conv = nullptr;
  Descriptors(const TjConvShape& g, DType dtype, bool tf32, const std::string& what) {
    const int type = data_type(dtype);
    const CudnnApi& api = loaded().api;
    check_cudnn(api.CreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor", what);
    check_cudnn(api.CreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor", what);
    check_cudnn(api.CreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor", what);
    check_cudnn(api.CreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor", what);
    check_cudnn(api.SetTensor4dDescriptor(x, kCudnnTensorNchw, type, as_int(g.n, what), as_int(g.c, what),
                                          as_int(g.h, what), as_int(g.w, what)),
                "cudnnSetTensor4dDescriptor", what);
    check_cudnn(api.SetTensor4dDescriptor(y, kCudnnTensorNchw, type, as_int(g.n, what), as_int(g.o, what),
                                          as_int(g.oh, what), as_int(g.ow, what)),
                "cudnnSetTensor4dDescriptor", what);
    check_cudnn(api.SetFilter4dDescriptor(w, type, kCudnnTensorNchw, as_int(g.o, what), as_int(g.c, what),
                                          as_int(g.kh, what), as_int(g.kw, what)),
                "cudnnSetFilter4dDescriptor", what);
    check_cudnn(api.SetConvolution2dDescriptor(conv, g.pad_h, g.pad_w, g.stride_h, g.stride_w, 1, 1,
                                               kCudnnCrossCorrelation, kCudnnDataFloat),
                "cudnnSetConvolution2dDescriptor", what);
    // f32 FMA unless TOWERJIT_ALLOW_TF32=on, as PyTorch does with torch.backends.cudnn.allow_tf32
    // (whose default is on; towerjit's is off, for matmuls and convolutions alike). 16-bit
    // operands on the tensor cores always: their products are exact in f32.
    const bool tensor_ops = tf32 || dtype != DType::f32;
    check_cudnn(api.SetConvolutionMathType(conv, tensor_ops ? kCudnnTensorOpMath : kCudnnFmaMath),
                "cudnnSetConvolutionMathType", what);
  }
  ~Descriptors() {
    const CudnnApi& api = loaded().api;
    if (conv) api.DestroyConvolutionDescriptor(conv);
    if (w) api.DestroyFilterDescriptor(w);
    if (y) api.DestroyTensorDescriptor(y);
    if (x) api.DestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

struct Plan {
  ConvAlgorithm chosen;
  std::unique_ptr<Descriptors> desc;
};

// Per device and process: (pass, shape, workspace cap, TF32 or not) -> plan.
struct PlanCache {
  std::mutex mutex;
  std::map<std::vector<long long>, Plan> plans;
  std::atomic<int64_t> finds{0};
  std::string workspace_note;
  bool note_printed = false;
};

PlanCache& cache() {
  static PlanCache c;
  return c;
}

std::vector<long long> key_of(int device, ConvPass pass, const TjConvShape& g, DType dtype, bool tf32) {
  const auto cap = knobs::cudnn_workspace_mb();
  return {device, static_cast<long long>(pass), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.oh, g.ow,
          g.stride_h, g.stride_w, g.pad_h, g.pad_w, cap ? static_cast<long long>(*cap) : -1,
          tf32 ? 1 : 0, static_cast<long long>(dtype)};
}

// The memory a workspace may take: the device's free memory plus the allocator's cached
// blocks, capped by TOWERJIT_CUDNN_WORKSPACE_MB.
size_t workspace_budget(DeviceContext& device) {
  size_t free = 0, total = 0;
  check_cuda(require_driver().MemGetInfo(&free, &total), "cuMemGetInfo");
  size_t budget = free + device.allocator().stats().cached;
  if (auto cap = knobs::cudnn_workspace_mb()) budget = std::min(budget, static_cast<size_t>(*cap) << 20);
  return budget;
}

}  // namespace

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward: return "forward";
    case ConvPass::data_gradient: return "data gradient";
    default: return "filter gradient";
  }
}

std::string cudnn_version_problem(size_t version) {
  if (version >= kCudnnMinVersion && version <= kCudnnMaxVersion) return "";
  // cuDNN 9 numbers its versions major*10000 + minor*100 + patch; cuDNN 8 and older did
  // major*1000 + minor*100 + patch.
  const bool old_scheme = version < 10000;
  const size_t major = old_scheme ? version / 1000 : version / 10000;
  const size_t minor = old_scheme ? version / 100 % 10 : version / 100 % 100;
  return "cuDNN " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100) +
         " (cudnnGetVersion " + std::to_string(version) + "), and towerjit binds cuDNN 9.x";
}

bool cudnn_available() {
  try {
    return knobs::cudnn_enabled() && loaded().ok;
  } catch (...) {
    return false;
  }
}

const CudnnApi* loaded_cudnn() { return loaded().ok ? &loaded().api : nullptr; }

std::string cudnn_unavailable_reason() {
  if (!knobs::cudnn_enabled()) return "TOWERJIT_CUDNN=off";
  return loaded().ok ? "" : loaded().problem;
}

std::string cudnn_fallback_warning(const std::string& reason) {
  return "towerjit: warning: cuDNN is not used for convolutions: " + reason +
         ". They fall back to towerjit's own implicit-GEMM kernels, which run on the CUDA cores in f32 "
         "(cuDNN's use the tensor cores under TF32 or a 16-bit precision policy) and are not tuned per GPU "
         "as cuDNN's are; " +
         (reason == "TOWERJIT_CUDNN=off"
              ? std::string("unset TOWERJIT_CUDNN to use cuDNN")
              : std::string("install cuDNN 9 (with the CUDA toolkit, or pip's nvidia-cudnn-cu12/cu13), set "
                            "CUDA_HOME, or add its lib directory to LD_LIBRARY_PATH"));
}

namespace {
std::mutex warning_mutex;
std::string warning_given;
}  // namespace

void warn_cudnn_fallback_once(const std::string& reason) {
  std::lock_guard<std::mutex> lock(warning_mutex);
  if (!warning_given.empty()) return;
  warning_given = cudnn_fallback_warning(reason);
  std::fprintf(stderr, "%s\n", warning_given.c_str());
}

std::string cudnn_warning_given() {
  std::lock_guard<std::mutex> lock(warning_mutex);
  return warning_given;
}

std::string cudnn_workspace_note() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().workspace_note;
}

int64_t cudnn_find_count() { return cache().finds.load(); }

Cudnn::Cudnn(DeviceContext& device, const Stream& stream, std::source_location loc)
    : device_(&device), stream_(&stream), tf32_(knobs::allow_tf32()) {
  user_check(loaded().ok, loc) << "cuDNN cannot be used: " << loaded().problem;
  const CudnnApi& api = loaded().api;
  device.make_current();  // the handle belongs to the context current now
  check_cudnn(api.Create(&handle_), "cudnnCreate", "a handle on " + device.str(), loc);
  check_cudnn(api.SetStream(handle_, stream.handle()), "cudnnSetStream", "", loc);
}

Cudnn::~Cudnn() {
  if (!handle_) return;
  try {
    device_->make_current();
    loaded().api.Destroy(handle_);
  } catch (...) {
  }
}

namespace {
// The algorithms that compute each output as a sum of products, in some order: the GEMM family
// and the direct one (cuDNN's cudnnConvolution*Algo_t values). Their error is what the reference's
// bound for a sum allows, whatever the order. FFT and Winograd transform the operands first,
// and their error is bounded by the operands' norms, not element by element: on an H200, with
// them among the choices, results broke the f32 bound (5e-7 on 0.89 for a 5-term 1x1
// convolution; 3e-3 relative for a filter gradient), and without them the same cases pass.
bool sums_products(ConvPass pass, int algo) {
  switch (pass) {
    case ConvPass::forward: return algo <= 3;  // IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM, GEMM, DIRECT
    case ConvPass::data_gradient: return algo <= 1;  // ALGO_0, ALGO_1
    case ConvPass::filter_gradient: return algo <= 1 || algo == 3;  // ALGO_0, ALGO_1, ALGO_3
  }
  return false;
}

// What plan() takes: supported, deterministic (runs stay bitwise reproducible), and a sum of
// products (results within the reference's f32 bound) unless TF32 is allowed.
bool takes(ConvPass pass, const CudnnAlgoPerf& p, bool tf32) {
  return p.status == 0 && p.determinism == kCudnnDeterministic && (tf32 || sums_products(pass, p.algo));
}

// Every algorithm cuDNN has for the pass at the descriptors' shape, with its workspace and
// determinism (cudnnGetConvolution*Algorithm_v7: a listing, nothing run); `max_count` gets
// how many the pass has.
std::vector<CudnnAlgoPerf> list_algorithms(cudnnHandle_t handle, ConvPass pass, const Descriptors& d,
                                           const std::string& what, int* max_count_out) {
  const CudnnApi& api = loaded().api;
  int max_count = 0;
  std::vector<CudnnAlgoPerf> listed;
  int returned = 0;
  switch (pass) {
    case ConvPass::forward:
      check_cudnn(api.GetForwardAlgorithmMaxCount(handle, &max_count), "cudnnGetConvolutionForwardAlgorithmMaxCount", what);
      listed.resize(std::max(max_count, 1));
      check_cudnn(api.GetForwardAlgorithm(handle, d.x, d.w, d.conv, d.y, max_count, &returned, listed.data()),
                  "cudnnGetConvolutionForwardAlgorithm_v7", what);
      break;
    case ConvPass::data_gradient:
      check_cudnn(api.GetBackwardDataAlgorithmMaxCount(handle, &max_count),
                  "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", what);
      listed.resize(std::max(max_count, 1));
      check_cudnn(api.GetBackwardDataAlgorithm(handle, d.w, d.y, d.conv, d.x, max_count, &returned, listed.data()),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7", what);
      break;
    case ConvPass::filter_gradient:
      check_cudnn(api.GetBackwardFilterAlgorithmMaxCount(handle, &max_count),
                  "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", what);
      listed.resize(std::max(max_count, 1));
      check_cudnn(api.GetBackwardFilterAlgorithm(handle, d.x, d.y, d.conv, d.w, max_count, &returned, listed.data()),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7", what);
      break;
  }
  listed.resize(std::max(returned, 0));
  *max_count_out = max_count;
  return listed;
}

}  // namespace

// The listed algorithms plan() takes (takes(): deterministic, sums of products unless TF32
// is allowed, whose users have accepted errors of about 1e-3 relative, as FFT and Winograd's
// are: PyTorch's allow_tf32 and benchmark modes) whose workspace fits `budget`. Where a larger
// one was passed over, the note says so, once a process.
std::vector<CudnnAlgoPerf> Cudnn::taken_within(ConvPass pass, const std::vector<CudnnAlgoPerf>& listed, size_t budget,
                                               const TjConvShape& g, const std::string& what) const {
  std::vector<CudnnAlgoPerf> fits;
  const CudnnAlgoPerf* too_big = nullptr;
  for (const CudnnAlgoPerf& p : listed) {
    if (!takes(pass, p, tf32_)) continue;
    if (p.memory <= budget) fits.push_back(p);
    else if (!too_big || p.memory > too_big->memory) too_big = &p;
  }
  if (too_big) {
    PlanCache& pc = cache();  // its mutex is held by the caller
    pc.workspace_note = "towerjit: note: cuDNN's algorithm " + std::to_string(too_big->algo) + " for the " +
                        conv_pass_name(pass) + " of " + what + " (" + shape_text(g) + ") needs " +
                        size_text(too_big->memory) + " of workspace, more than the " + size_text(budget) +
                        " available (free device memory" +
                        (knobs::cudnn_workspace_mb() ? ", or TOWERJIT_CUDNN_WORKSPACE_MB" : "") +
                        "); an algorithm that fits is used instead (further cases are not reported)";
    if (!pc.note_printed) std::fprintf(stderr, "%s\n", pc.workspace_note.c_str());
    pc.note_printed = true;
  }
  return fits;
}

ConvAlgorithm Cudnn::plan(ConvPass pass, const TjConvShape& g, const std::string& what, DType dtype) {
  const CudnnApi& api = loaded().api;
  const auto key = key_of(device_->ordinal(), pass, g, dtype, tf32_);
  PlanCache& pc = cache();
  std::lock_guard<std::mutex> lock(pc.mutex);
  if (auto it = pc.plans.find(key); it != pc.plans.end()) return it->second.chosen;
  device_->make_current();
  Plan plan;
  plan.desc = std::make_unique<Descriptors>(g, dtype, tf32_, what);
  const Descriptors& d = *plan.desc;

  // Every algorithm the library has for the shape, with its workspace and determinism.
  int max_count = 0;
  const std::vector<CudnnAlgoPerf> listed = list_algorithms(handle_, pass, d, what, &max_count);
  int returned = 0;

  const size_t budget = workspace_budget(*device_);
  const std::vector<CudnnAlgoPerf> fits = taken_within(pass, listed, budget, g, what);
  user_check(!fits.empty(), std::source_location::current())
      << "no deterministic cuDNN algorithm for the " << conv_pass_name(pass) << " of " << what << " ("
      << shape_text(g) << ") fits in " << size_text(budget)
      << " of workspace; free device memory, use a smaller batch, or raise TOWERJIT_CUDNN_WORKSPACE_MB";
  size_t workspace = 0;
  for (const CudnnAlgoPerf& p : fits) workspace = std::max(workspace, p.memory);

  // Time them on scratch buffers of the shape (contents irrelevant): the stream is idle, as
  // nothing of the run is queued yet, and it is waited for before the buffers go back.
  const auto size = static_cast<size_t>(dtype_bytes(dtype));
  DeviceBuffer x = device_->allocate(static_cast<size_t>(g.n * g.c * g.h * g.w) * size);
  DeviceBuffer w = device_->allocate(static_cast<size_t>(g.o * g.c * g.kh * g.kw) * size);
  DeviceBuffer y = device_->allocate(static_cast<size_t>(g.n * g.o * g.oh * g.ow) * size);
  DeviceBuffer ws = device_->allocate(workspace);
  auto* xp = reinterpret_cast<void*>(x.ptr());
  auto* wp = reinterpret_cast<void*>(w.ptr());
  auto* yp = reinterpret_cast<void*>(y.ptr());
  auto* wsp = reinterpret_cast<void*>(ws.ptr());
  std::vector<CudnnAlgoPerf> timed(std::max(max_count, 1));
  returned = 0;
  switch (pass) {
    case ConvPass::forward:
      check_cudnn(api.FindForwardAlgorithm(handle_, d.x, xp, d.w, wp, d.conv, d.y, yp, max_count, &returned,
                                           timed.data(), wsp, workspace),
                  "cudnnFindConvolutionForwardAlgorithmEx", what);
      break;
    case ConvPass::data_gradient:
      check_cudnn(api.FindBackwardDataAlgorithm(handle_, d.w, wp, d.y, yp, d.conv, d.x, xp, max_count, &returned,
                                                timed.data(), wsp, workspace),
                  "cudnnFindConvolutionBackwardDataAlgorithmEx", what);
      break;
    case ConvPass::filter_gradient:
      check_cudnn(api.FindBackwardFilterAlgorithm(handle_, d.x, xp, d.y, yp, d.conv, d.w, wp, max_count, &returned,
                                                  timed.data(), wsp, workspace),
                  "cudnnFindConvolutionBackwardFilterAlgorithmEx", what);
      break;
  }
  stream_->synchronize("finding cuDNN's algorithm for " + what);
  pc.finds.fetch_add(1);
  timed.resize(std::max(returned, 0));

  // The find lists fastest first; the first deterministic one that fits wins. Where the find
  // timed none of them, the listing's first (its heuristic's best) does.
  const CudnnAlgoPerf* best = nullptr;
  for (const CudnnAlgoPerf& p : timed) {
    const bool listed_fit = std::any_of(fits.begin(), fits.end(), [&](const CudnnAlgoPerf& f) { return f.algo == p.algo; });
    if (p.status == 0 && p.determinism == kCudnnDeterministic && p.memory <= workspace && listed_fit) {
      best = &p;
      break;
    }
  }
  if (!best) best = &fits.front();
  plan.chosen = {best->algo, best->memory, best->time};
  const ConvAlgorithm chosen = plan.chosen;
  pc.plans.emplace(key, std::move(plan));
  return chosen;
}

std::optional<ConvAlgorithm> Cudnn::adopt(ConvPass pass, const TjConvShape& g, const std::string& what, DType dtype,
                                          const ConvAlgorithm& stored) {
  const auto key = key_of(device_->ordinal(), pass, g, dtype, tf32_);
  PlanCache& pc = cache();
  std::lock_guard<std::mutex> lock(pc.mutex);
  if (auto it = pc.plans.find(key); it != pc.plans.end()) return it->second.chosen;
  device_->make_current();
  Plan plan;
  plan.desc = std::make_unique<Descriptors>(g, dtype, tf32_, what);
  int max_count = 0;
  const std::vector<CudnnAlgoPerf> listed = list_algorithms(handle_, pass, *plan.desc, what, &max_count);
  // Held to what plan() would take, in a workspace that fits the memory there is now.
  for (const CudnnAlgoPerf& p : taken_within(pass, listed, workspace_budget(*device_), g, what)) {
    if (p.algo != stored.algo) continue;
    plan.chosen = {p.algo, p.memory, stored.time_ms};
    const ConvAlgorithm chosen = plan.chosen;
    pc.plans.emplace(key, std::move(plan));
    return chosen;
  }
  return std::nullopt;
}

void Cudnn::run(ConvPass pass, const TjConvShape& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out,
                CUdeviceptr workspace, size_t workspace_bytes, const std::string& what, DType dtype) {
  if (g.n == 0 || g.o == 0 || g.c == 0) return;
  const CudnnApi& api = loaded().api;
  const auto key = key_of(device_->ordinal(), pass, g, dtype, tf32_);
  const Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(cache().mutex);
    auto it = cache().plans.find(key);
    internal_check(it != cache().plans.end()) << "cuDNN " << conv_pass_name(pass) << " of " << what << " not planned";
    plan = &it->second;  // std::map nodes stay put; plans are never erased
  }
  internal_check(workspace_bytes >= plan->chosen.workspace)
      << "cuDNN workspace of " << workspace_bytes << " bytes where the algorithm needs " << plan->chosen.workspace;
  device_->make_current();
  const Descriptors& d = *plan->desc;
  const float alpha = 1.0f, beta = 0.0f;
  auto* ws = reinterpret_cast<void*>(workspace);
  const auto* ap = reinterpret_cast<const void*>(a);
  const auto* bp = reinterpret_cast<const void*>(b);
  auto* op = reinterpret_cast<void*>(out);
  const int algo = plan->chosen.algo;
  switch (pass) {
    case ConvPass::forward:
      return check_cudnn(api.Forward(handle_, &alpha, d.x, ap, d.w, bp, d.conv, algo, ws, workspace_bytes, &beta, d.y, op),
                         "cudnnConvolutionForward", what);
    case ConvPass::data_gradient:
      return check_cudnn(
          api.BackwardData(handle_, &alpha, d.w, bp, d.y, ap, d.conv, algo, ws, workspace_bytes, &beta, d.x, op),
          "cudnnConvolutionBackwardData", what);
    case ConvPass::filter_gradient:
      return check_cudnn(
          api.BackwardFilter(handle_, &alpha, d.x, ap, d.y, bp, d.conv, algo, ws, workspace_bytes, &beta, d.w, op),
          "cudnnConvolutionBackwardFilter", what);
  }
}

}  // namespace towerjit::cuda
