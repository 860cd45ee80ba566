// Helpers for the CPU compiler tests: a private temporary cache directory per test, and
// environment variables set for one scope and restored after it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace towerjit::test {

// Sets (or with nullopt unsets) an environment variable, restoring the old value on exit.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = ::getenv(name_.c_str())) old_ = old;
    if (value)
      ::setenv(name_.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh directory under the system temp dir, removed with everything in it on exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "towerjit-test-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    path_ = ::mkdtemp(buffer.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  const std::string& str() const { return path_; }
  // A path inside it.
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

  // Regular files directly inside the directory.
  std::vector<std::filesystem::path> files() const {
    std::vector<std::filesystem::path> out;
    for (const auto& entry : std::filesystem::directory_iterator(path_))
      if (entry.is_regular_file()) out.push_back(entry.path());
    return out;
  }

 private:
  std::string path_;
};

// A compile cache of its own for one test, on, with no dumps: the common starting point.
struct CacheSandbox {
  TempDir dir;
  ScopedEnv cache_dir{"TOWERJIT_CACHE_DIR", dir.path()};
  ScopedEnv cache_on{"TOWERJIT_CACHE", std::nullopt};
  ScopedEnv no_dump{"TOWERJIT_DUMP", std::nullopt};
};

// y[i] = a * x[i] + y[i] for i < n, as a scalar loop the O3 pipeline vectorises.
inline const char* kSaxpyIR = R"(
define void @saxpy(ptr noalias %x, ptr noalias %y, float %a, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %py = getelementptr inbounds float, ptr %y, i64 %i
  %vx = load float, ptr %px, align 4
  %vy = load float, ptr %py, align 4
  %ax = fmul float %a, %vx
  %r = fadd float %ax, %vy
  store float %r, ptr %py, align 4
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
)";

using SaxpyFn = void (*)(const float*, float*, float, long);

}  // namespace towerjit::test
