#include "emulator/driver/launch_log.h"

#include <atomic>
#include <mutex>
#include <sstream>
#include <vector>

namespace towerjit::emulator {
namespace {

std::atomic<bool> recording{false};
thread_local bool replaying = false;  // inside a GraphReplayScope
std::mutex records_mutex;
std::vector<LaunchRecord>& records() {
  static std::vector<LaunchRecord> r;
  return r;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

template <typename T, std::size_t N>
std::string json_array(const std::array<T, N>& a) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < N; ++i) s << (i ? "," : "") << a[i];
  return s.str() + "]";
}

std::string json_line(const LaunchRecord& r, std::size_t sequence) {
  std::ostringstream s;
  s.precision(17);
  s << "{\"seq\":" << sequence << ",\"kind\":\"" << launch_kind_name(r.kind) << "\",\"name\":" << json_string(r.name)
    << ",\"module\":" << json_string(r.module) << ",\"device\":" << r.device << ",\"stream\":\""
    << reinterpret_cast<std::uintptr_t>(r.stream) << "\",\"grid\":" << json_array(r.grid)
    << ",\"block\":" << json_array(r.block) << ",\"static_shared_bytes\":" << r.static_shared_bytes
    << ",\"dynamic_shared_bytes\":" << r.dynamic_shared_bytes << ",\"work_max\":" << r.work_max
    << ",\"work_mean\":" << r.work_mean << ",\"tail_work_max\":" << r.tail_work_max
    << ",\"tail_work_sum\":" << r.tail_work_sum << ",\"bytes\":" << r.bytes << ",\"flops\":" << r.flops
    << ",\"gemm\":" << json_array(r.gemm) << ",\"half_operands\":" << (r.half_operands ? "true" : "false")
    << ",\"host_link\":" << (r.host_link ? "true" : "false") << ",\"graph\":" << (r.graph ? "true" : "false")
    << "}";
  return s.str();
}

}  // namespace

bool launch_log_enabled() { return recording.load(std::memory_order_relaxed); }

void record_launch(const LaunchRecord& r) {
  if (!launch_log_enabled()) return;
  std::lock_guard lock(records_mutex);
  records().push_back(r);
  records().back().graph = r.graph || replaying;
}

GraphReplayScope::GraphReplayScope() { replaying = true; }
GraphReplayScope::~GraphReplayScope() { replaying = false; }

const char* launch_kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::kernel: return "kernel";
    case LaunchKind::library: return "library";
    case LaunchKind::copy: return "copy";
  }
  return "";
}

}  // namespace towerjit::emulator

using namespace towerjit::emulator;

extern "C" {

// Clears the records and starts taking them.
void tj_emu_launch_log_start() {
  std::lock_guard lock(records_mutex);
  records().clear();
  recording.store(true);
}

// Stops taking records and returns them, one JSON object a line, in the order they ran. The
// text stays valid until the next call. Wait for the streams first (the work queued before
// the call is recorded only once it has run).
const char* tj_emu_launch_log_stop() {
  static std::string text;
  std::lock_guard lock(records_mutex);
  recording.store(false);
  std::ostringstream out;
  for (std::size_t i = 0; i < records().size(); ++i) out << json_line(records()[i], i) << "\n";
  text = out.str();
  records().clear();
  return text.c_str();
}

}  // extern "C"
