// What the fuzz targets share: how a finding is reported, which towerjit::Error is a finding
// (an internal error: a bug of ours, not a rejected input), a scratch folder for the targets
// that read files, and a reader of the fuzzer's bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

#include "dsl/error.h"

namespace towerjit::fuzz {

// Reports a finding and aborts: libFuzzer saves the input as a crash, a replay fails its test.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A rejected input is a user's error; an internal_check that fires is our bug.
inline void expect_user_error(const Error& e) {
  if (std::string_view(e.what()).starts_with("towerjit internal error")) finding(e.what());
}

// A folder of this process's own, in memory where /dev/shm exists (the targets write a file
// per input), removed when the process exits normally.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    fs::path root = access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = root / ("towerjit-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  // Registered once `dir` is made, so it runs before `dir` is destroyed (an atexit function
  // registered while `dir` was still being made would run after, and remove nothing).
  static const bool removed_at_exit = [] {
    return std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); }) == 0;
  }();
  (void)removed_at_exit;
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) finding("cannot write the scratch file " + path.string());
}

// The fuzzer's bytes, taken from the front; past the end every read is 0, so any input decodes.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  bool empty() const { return at_ >= size_; }
  std::string_view rest() {
    std::string_view r(reinterpret_cast<const char*>(data_) + at_, size_ - at_);
    at_ = size_;
    return r;
  }

 private:
  const uint8_t* data_;
  size_t size_, at_ = 0;
};

}  // namespace towerjit::fuzz
