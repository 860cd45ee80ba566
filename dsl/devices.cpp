#include "dsl/devices.h"

#include <cctype>

#include "dsl/error.h"

namespace towerjit {

namespace {

constexpr const char* kForms = "use cpu:N or gpu:N with N >= 0, e.g. cpu:0 or gpu:1";

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A guess at what a TensorFlow or PyTorch user meant, or "" when there is none.
std::string hint(const std::string& kind, const std::string& index) {
  const std::string k = lower(kind);
  const std::string n = index.empty() ? "0" : index;
  if (k == "/gpu" || k == "/device:gpu" || k == "cuda" || k == "gpu") return "gpu:" + n;
  if (k == "/cpu" || k == "/device:cpu" || k == "cpu") return "cpu:" + n;
  return "";
}

}  // namespace

std::string Device::str() const {
  return std::string(kind == DeviceKind::cpu ? "cpu:" : "gpu:") + std::to_string(index);
}

Device cpu(int index, Loc loc) {
  user_check(index >= 0, loc) << "cpu(" << index << "): a device index must be >= 0; "
                              << "use cpu(0) for the first CPU worker";
  return Device{DeviceKind::cpu, index};
}

Device gpu(int index, Loc loc) {
  user_check(index >= 0, loc) << "gpu(" << index << "): a device index must be >= 0; "
                              << "use gpu(0) for the first GPU";
  return Device{DeviceKind::gpu, index};
}

Device parse_device(const std::string& text, Loc loc) {
  const std::string s = trim(text);
  user_check(!s.empty(), loc) << "empty device string \"" << text << "\"; " << kForms;
  const size_t colon = s.rfind(':');
  const std::string kind = colon == std::string::npos ? s : s.substr(0, colon);
  const std::string index = colon == std::string::npos ? "" : s.substr(colon + 1);
  const bool digits = !index.empty() && index.size() <= 9 &&
                      index.find_first_not_of("0123456789") == std::string::npos;
  if ((kind == "cpu" || kind == "gpu") && digits) {
    const int n = std::stoi(index);
    return kind == "cpu" ? Device{DeviceKind::cpu, n} : Device{DeviceKind::gpu, n};
  }
  const bool bad_index = (kind == "cpu" || kind == "gpu") && colon != std::string::npos;
  const std::string guess = bad_index ? "" : hint(kind, digits ? index : "");
  std::string what;
  if (kind == "cpu" || kind == "gpu")
    what = colon == std::string::npos ? "device \"" + s + "\" has no index"
                                      : "device \"" + s + "\" has a bad index \"" + index + "\"";
  else
    what = "unknown device \"" + s + "\"";
  user_check(false, loc) << what << "; " << kForms
                         << (guess.empty() || guess == s ? std::string()
                                                         : " (did you mean " + guess + "?)");
  return {};
}

std::vector<Device> parse_devices(const std::string& text, Loc loc) {
  user_check(!trim(text).empty(), loc)
      << "empty device list \"" << text << "\"; give one or more devices separated by commas, "
      << "e.g. \"cpu:0,cpu:1\"";
  std::vector<Device> out;
  size_t start = 0;
  for (int entry = 0;; ++entry) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                           : comma - start);
    user_check(!trim(item).empty(), loc)
        << "device list \"" << text << "\": entry " << entry << " is empty; "
        << "separate devices with single commas, e.g. \"cpu:0,cpu:1\"";
    out.push_back(parse_device(item, loc));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string str(const std::vector<Device>& devices) {
  std::string out;
  for (size_t i = 0; i < devices.size(); ++i) out += (i ? "," : "") + devices[i].str();
  return out;
}

}  // namespace towerjit
