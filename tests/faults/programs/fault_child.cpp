// The process the fault tests start, stop, kill and starve (tests/faults/): it trains a tiny
// model with a checkpoint every step, resuming from its directory when that holds one, and can
// stop itself at a named phase of a checkpoint write, meet a full disk or a file-size limit,
// or compile a model into a given compile cache. Every line it prints is for the test to read.
//
//   fault_child train DIR STEPS [stop PHASE ckpt|latest N] [keep K] [linger] [uncaught]
//     (linger: a run stopped by a signal then waits a minute in its hooks' end, so a test can
//     send the second signal while it winds down; uncaught: nothing catches what fit throws,
//     as in a first program with no try block)
//   fault_child throw error|other           (an uncaught towerjit::Error, or std::logic_error)
//   fault_child noblas DIR                  (in a private mount namespace: every BLAS library hidden)
//   fault_child unreadable DIR              (an IDX file and a checkpoint in DIR this process may not read)
//   fault_child enospc DIR ckpt|latest     (in a private mount namespace: a small tmpfs at DIR)
//   fault_child efbig DIR                  (RLIMIT_FSIZE below a checkpoint's size)
//   fault_child compile CACHE_DIR          (waits for a byte on stdin, then compiles and trains)
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/checkpoint/atomic_file.h"
#include "runtime/data/idx.h"
#include "tests/runtime/tower_test_model.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace fs = std::filesystem;

namespace {

// Where `train ... stop` stops: the n-th write of this kind ("ckpt" or "latest") by this process
// reaching this phase raises SIGSTOP, and the test SIGKILLs the stopped process.
struct StopAt {
  std::string phase, kind;
  int n = 0, seen = 0;
} stop_at;

void stop_at_phase(tj::WritePhase phase, const std::string& path) {
  if (stop_at.n == 0 || stop_at.phase != tj::write_phase_name(phase)) return;
  const std::string name = fs::path(path).filename().string();
  const std::string kind = name == "latest" ? "latest" : name.rfind("ckpt-", 0) == 0 ? "ckpt" : "other";
  if (kind == stop_at.kind && ++stop_at.seen == stop_at.n) ::raise(SIGSTOP);
}

// Prints "start <step>" when training begins (the test waits for it) and runs `at_step` after
// each step (after the CheckpointHook: it comes later in the hooks).
struct Probe : tj::Hook {
  std::function<void(const tj::StepEvent&)> at_step;
  void begin(tj::TowerTrainer& trainer, const tj::data::PipelinePosition& start) override {
    std::printf("start %lld\n", static_cast<long long>(start.epoch * 8 + start.batch));
    std::fflush(stdout);
  }
  void after_step(tj::TowerTrainer&, const tj::StepEvent& e) override {
    if (at_step) at_step(e);
  }
  void end(tj::TowerTrainer&, const tj::StepEvent& last) override {
    if (linger && last.stopped_by != 0) ::sleep(60);
  }
  bool linger = false;
  bool uses_trainer_at(const tj::StepEvent&) const override { return false; }
};

struct Run {
  std::string dir;
  int64_t steps = 0;
  int keep = 3;
  bool linger = false;
  std::function<void(const tj::StepEvent&)> at_step;
};

// 64 examples in batches of 8 (8 steps an epoch), Adam, one CPU tower; a checkpoint every step.
// Resumes from `dir` when it has a `latest`. Returns the last step.
int64_t train(const Run& run) {
  tj::Graph graph;
  const tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::TowerTrainer trainer(graph, loss, tj::Towers({tj::cpu(0)}), tj::adam(0.01), {.seed = 5});
  const tj::data::TensorDataset data(tj::testing::batch_of(64, 11), "labels");
  const std::map<std::string, std::string> metadata = {{"model", "small_mlp"}};
  tj::data::PipelinePosition start;
  if (!run.dir.empty() && fs::exists(fs::path(run.dir) / "latest")) start = tj::resume_from(trainer, run.dir, metadata);
  tj::data::BatchPipeline pipeline(data, {.batch = 8, .seed = 3}, start);
  std::vector<tj::Hook*> hooks;
  std::optional<tj::CheckpointHook> save;
  if (!run.dir.empty()) hooks.push_back(&save.emplace(run.dir, metadata, 1, run.keep, tj::Loc::current()));
  Probe probe;
  probe.at_step = run.at_step;
  probe.linger = run.linger;
  hooks.push_back(&probe);
  return tj::fit(trainer, pipeline, {.max_steps = run.steps, .hooks = hooks}).step;
}

// Fills the file system holding `dir` until write fails (ENOSPC), then gives `keep_free`
// bytes back.
void fill(const std::string& dir, int64_t keep_free) {
  const std::string path = dir + "/filler";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  static const std::vector<char> block(4096, 'f');
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
  }
  std::fclose(f);
  if (keep_free > 0) fs::resize_file(path, fs::file_size(path) - static_cast<uintmax_t>(keep_free));
}

// After a failed save: what a resume would load, and whether a temporary file is left.
void report_directory(const std::string& dir) {
  const tj::Checkpoint c = tj::load_checkpoint(dir);
  std::printf("loaded step %lld\n", static_cast<long long>(c.step));
  int temporaries = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    temporaries += entry.path().filename().string().find(".tmp-") != std::string::npos;
  std::printf("temporaries %d\n", temporaries);
  std::printf("ckpt-3.tjck %s\n", fs::exists(dir + "/ckpt-3.tjck") ? "exists" : "absent");
}

// Trains 6 steps; after step 2's checkpoint `fault` makes the disk refuse; prints the error
// of the failed save and what the directory still gives.
int train_into_fault(const std::string& dir, std::function<void()> fault) {
  try {
    train({.dir = dir, .steps = 6, .at_step = [&](const tj::StepEvent& e) {
             if (e.step == 2) fault();
           }});
    std::printf("no error\n");
    return 1;
  } catch (const tj::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  report_directory(dir);
  return 0;
}

int enospc(const std::string& dir, const std::string& which) {
  // Before any thread starts: a mount namespace of this process alone, where a 1 MiB tmpfs
  // over `dir` is a real file system that really fills up.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("towerjit-enospc", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
    std::printf("skip: cannot mount a tmpfs in a private mount namespace: %s\n", std::strerror(errno));
    return 77;
  }
  return train_into_fault(dir, [&] {
    // "latest": room for the checkpoint's temporary file, none for latest's.
    const int64_t ckpt = static_cast<int64_t>(fs::file_size(dir + "/ckpt-2.tjck"));
    fill(dir, which == "latest" ? (ckpt + 4095) / 4096 * 4096 : 0);
  });
}

int efbig(const std::string& dir) {
  return train_into_fault(dir, [&] {
    // Ignored, SIGXFSZ no longer kills the process: the write fails with EFBIG instead.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit;
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = fs::file_size(dir + "/ckpt-2.tjck") / 2;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  });
}

// A machine without BLAS: in a mount namespace of this process, /dev/null is bound over every
// file the CPU backend would load as BLAS, so the first matrix product says what to install.
int noblas(const std::string& dir) {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    std::printf("skip: no private mount namespace: %s\n", std::strerror(errno));
    return 77;
  }
  int hidden = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator("/usr/lib/x86_64-linux-gnu", ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file(ec) || !(name.starts_with("libopenblas") || name.starts_with("libcblas.so") ||
                                      name.starts_with("libblas.so")))
      continue;
    if (::mount("/dev/null", it->path().c_str(), nullptr, MS_BIND, nullptr) != 0) {
      std::printf("skip: cannot hide %s: %s\n", it->path().c_str(), std::strerror(errno));
      return 77;
    }
    ++hidden;
  }
  std::printf("hidden %d\n", hidden);
  try {
    train({.dir = dir, .steps = 1});
    std::printf("no error\n");
    return 1;
  } catch (const tj::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  return 0;
}

// Files this process may not read: written, made mode 000, and, as root (whom modes do not
// stop), read after dropping to the user nobody.
int unreadable(const std::string& dir) {
  const std::string idx = dir + "/train-labels-idx1-ubyte", checkpoint = dir + "/ckpt-1.tjck";
  std::ofstream(idx, std::ios::binary) << std::string("\0\0\x08\x01\0\0\0\x01\x07", 9);
  std::ofstream(checkpoint, std::ios::binary) << "not read";
  fs::permissions(idx, fs::perms::none);
  fs::permissions(checkpoint, fs::perms::none);
  if (::geteuid() == 0 && ::setuid(65534) != 0) {
    std::printf("skip: cannot become nobody: %s\n", std::strerror(errno));
    return 77;
  }
  try {
    tj::data::read_idx(idx);
    std::printf("no error\n");
  } catch (const tj::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  try {
    tj::load_checkpoint(checkpoint);
    std::printf("no error\n");
  } catch (const tj::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  // Ended here: a process that changed its user is not dumpable, and LeakSanitizer's check at
  // exit (make test-asan), which needs that, would fail rather than check.
  std::fflush(stdout);
  std::_Exit(0);
}

// Compiles the model into `cache_dir` when the test says go (a byte on stdin), trains 3 steps,
// and prints the loss of each, exactly.
int compile(const std::string& cache_dir) {
  ::setenv("TOWERJIT_CACHE_DIR", cache_dir.c_str(), 1);
  char go;
  if (::read(0, &go, 1) != 1) return 2;
  tj::Graph graph;
  const tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::TowerTrainer trainer(graph, loss, tj::Towers({tj::cpu(0)}), tj::adam(0.01), {.seed = 5});
  for (int step = 0; step < 3; ++step)
    std::printf("loss %a\n", trainer.step(tj::testing::batch_of(8, 20 + step)).loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 3 && args[0] == "enospc") return enospc(args[1], args[2]);
  if (args.size() >= 2 && args[0] == "noblas") return noblas(args[1]);
  if (args.size() >= 2 && args[0] == "unreadable") return unreadable(args[1]);
  if (args.size() >= 2 && args[0] == "throw") {
    std::printf("start\n");
    if (args[1] == "error") throw tj::Error("towerjit: an error nothing catches");
    // The abort std::terminate ends in is the default action's, not a sanitizer's report
    // (the ASan runs handle SIGABRT, scripts/sanitizers/run-tests.sh).
    std::signal(SIGABRT, SIG_DFL);
    throw std::logic_error("not a towerjit error");
  }
  if (args.size() >= 4 && args[0] == "train" && args.back() == "uncaught") {
    tj::set_write_phase_hook(stop_at_phase);
    train(Run{.dir = args[1], .steps = std::stoll(args[2])});
    return 0;
  }
  try {
    if (args.size() >= 3 && args[0] == "train") {
      Run run{.dir = args[1], .steps = std::stoll(args[2])};
      for (size_t i = 3; i + 1 < args.size(); ++i) {
        if (args[i] == "keep") run.keep = std::stoi(args[i + 1]);
        if (args[i + 1] == "linger") run.linger = true;
        if (args[i] == "stop" && i + 3 < args.size())
          stop_at = {.phase = args[i + 1], .kind = args[i + 2], .n = std::stoi(args[i + 3])};
      }
      tj::set_write_phase_hook(stop_at_phase);
      std::printf("done %lld\n", static_cast<long long>(train(run)));
      return 0;
    }
    if (args.size() >= 2 && args[0] == "efbig") return efbig(args[1]);
    if (args.size() >= 2 && args[0] == "compile") return compile(args[1]);
  } catch (const tj::Interrupted& stop) {
    std::printf("%s\n", stop.what());
    return stop.exit_code();
  } catch (const tj::Error& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: see tests/faults/programs/fault_child.cpp\n");
  return 2;
}
