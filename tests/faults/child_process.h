// A child process of the fault tests: tests/faults/programs/fault_child.cpp (or any program),
// started with its stdin and its stdout + stderr on pipes, so a test can wait for a line it
// prints, feed it, stop or kill it, and read all it said.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace towerjit::testing {

// The helper program's path, from the build (tests/CMakeLists.txt).
inline const char* fault_child_path() { return TOWERJIT_FAULT_CHILD; }

class ChildProcess {
 public:
  // Starts `program` with `args` (argv[1..]); throws std::runtime_error when it cannot.
  ChildProcess(const std::string& program, const std::vector<std::string>& args) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, out[1], 2);
    std::vector<std::string> all = {program};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int err = ::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = out[0];
    if (err != 0) throw std::runtime_error("cannot start " + program + ": " + std::strerror(err));
  }
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    close_input();
    ::close(out_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

  // Reads until the output holds a line starting with `prefix` (returned whole), the child
  // closes its output, or `timeout` passes ("" then).
  std::string wait_for_line(const std::string& prefix, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (const std::string line = find_line(prefix); !line.empty()) return line;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) return find_line(prefix);
    }
  }

  void write(const std::string& bytes) { [[maybe_unused]] ssize_t n = ::write(in_, bytes.data(), bytes.size()); }
  void close_input() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  void signal(int sig) { ::kill(pid_, sig); }

  // Waits for the child to stop (SIGSTOP) or end; true when it stopped. Reads its output
  // meanwhile, so a chatty child never blocks on a full pipe.
  bool wait_stopped_or_exited() {
    while (true) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WUNTRACED | WNOHANG);
      if (r == pid_) {
        if (WIFSTOPPED(status)) return true;
        status_ = status;
        reaped_ = true;
        return false;
      }
      read_some(5);
    }
  }

  // Whether it still runs (reaps it when it has ended).
  bool running() {
    if (reaped_) return false;
    if (::waitpid(pid_, &status_, WNOHANG) != pid_) return true;
    reaped_ = true;
    return false;
  }

  // Waits for the end; the raw wait status. Reads all the output.
  int wait() {
    if (!drained_) drain();  // (to the end of the output: the child has closed it)
    drained_ = true;
    if (!reaped_) ::waitpid(pid_, &status_, 0);
    reaped_ = true;
    return status_;
  }
  // SIGKILL, then wait: true when the signal killed it (it had not ended already).
  bool kill_and_wait() {
    ::kill(pid_, SIGKILL);
    const int status = wait();
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  // The exit code, or -signal when a signal ended it.
  int exit_code() {
    const int status = wait();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

 private:
  std::string find_line(const std::string& prefix) const {
    size_t at = 0;
    while (at < output_.size()) {
      const size_t end = output_.find('\n', at);
      if (end == std::string::npos) break;
      if (output_.compare(at, prefix.size(), prefix) == 0) return output_.substr(at, end - at);
      at = end + 1;
    }
    return "";
  }
  // Reads what is there within `timeout_ms`; false at the end of the output.
  bool read_some(int timeout_ms) {
    pollfd p{.fd = out_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;
    char buffer[4096];
    const ssize_t n = ::read(out_, buffer, sizeof buffer);
    if (n <= 0) return false;
    output_.append(buffer, static_cast<size_t>(n));
    return true;
  }
  void drain() {
    while (read_some(10000)) {
    }
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  int status_ = 0;
  bool reaped_ = false, drained_ = false;
  std::string output_;
};

// Runs fault_child with `args` to its end and returns what it printed, checking it exited 0;
// nullopt, with a warning, when it exits 77: this machine cannot make the fault.
inline std::optional<std::string> run_fault_child(const std::vector<std::string>& args) {
  ChildProcess child(fault_child_path(), args);
  const int code = child.exit_code();
  INFO(child.output());
  if (code == 77) {
    WARN("not run: " << child.output());
    return std::nullopt;
  }
  CHECK(code == 0);
  return child.output();
}

}  // namespace towerjit::testing
