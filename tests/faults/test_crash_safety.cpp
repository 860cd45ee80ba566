// Crash safety, proved with real processes: a child trains with a checkpoint every step and is
// SIGKILLed, at each named phase of a checkpoint write (stopped there first) and at random
// moments. After every kill the directory's newest checkpoint must be a complete one, the very
// bytes an uninterrupted run wrote at that step, and the resumed runs must end bitwise where
// the uninterrupted run ends.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "runtime/checkpoint/atomic_file.h"
#include "runtime/checkpoint/checkpoint.h"
#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using tj::testing::ChildProcess;

namespace {

constexpr int64_t kSteps = 24;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The step of the newest complete checkpoint the directory's `latest` names (0: none yet),
// after checking that it is the uninterrupted run's checkpoint of that step, byte for byte,
// that every checkpoint `latest` lists loads, and that load_checkpoint(dir) picks the newest.
int64_t check_newest(const fs::path& dir, const std::map<int64_t, std::string>& reference) {
  if (!fs::exists(dir / "latest")) return 0;
  const std::string newest = first_line(dir / "latest");
  INFO("latest names \"" << newest << "\" in " << dir.string());
  REQUIRE(newest.rfind("ckpt-", 0) == 0);
  const tj::Checkpoint c = tj::load_checkpoint((dir / newest).string());  // this file, no fallback
  REQUIRE(reference.count(c.step));
  CHECK(read_bytes(dir / newest) == reference.at(c.step));
  CHECK(tj::load_checkpoint(dir.string()).step == c.step);
  std::ifstream in(dir / "latest");
  for (std::string name; std::getline(in, name);) CHECK_NOTHROW(tj::load_checkpoint((dir / name).string()));
  return c.step;
}

int temporaries_in(const fs::path& dir) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) n += entry.path().filename().string().find(".tmp-") != std::string::npos;
  return n;
}

// What a stop at `phase` of the n-th write of `kind` leaves newest, for a run that starts at
// step `start` (its n-th checkpoint is step start + n): a checkpoint counts once `latest`,
// written after it, has been renamed into place.
int64_t expected_newest(const std::string& phase, const std::string& kind, int n, int64_t start) {
  const bool latest_moved = kind == "latest" && (phase == "renamed" || phase == "directory_synced");
  return start + n - (latest_moved ? 0 : 1);
}

}  // namespace

TEST_CASE("checkpoints survive 56 SIGKILLs at every write phase and at random, and resumed runs end bitwise alike",
          "[faults][checkpoint]") {
  tj::test::TempDir work;
  const auto started = std::chrono::steady_clock::now();
  // The uninterrupted run, keeping every checkpoint: the bytes each step must have.
  const fs::path reference_dir = fs::path(work.path()) / "reference";
  ChildProcess whole(tj::testing::fault_child_path(), {"train", reference_dir.string(), std::to_string(kSteps), "keep", "1000"});
  const auto run_started = std::chrono::steady_clock::now();
  REQUIRE(!whole.wait_for_line("start").empty());
  const auto training_started = std::chrono::steady_clock::now();
  const int whole_code = whole.exit_code();
  INFO(whole.output());
  REQUIRE(whole_code == 0);
  const double startup_ms = std::chrono::duration<double, std::milli>(training_started - run_started).count();
  // How long a run's training takes once its kernels are cached: random kills spread over it.
  ChildProcess timed(tj::testing::fault_child_path(), {"train", (fs::path(work.path()) / "timed").string(), std::to_string(kSteps)});
  REQUIRE(!timed.wait_for_line("start").empty());
  const auto timed_start = std::chrono::steady_clock::now();
  REQUIRE(timed.exit_code() == 0);
  double train_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - timed_start).count();
  const double timed_ms = train_ms;
  std::map<int64_t, std::string> reference;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const fs::path file = reference_dir / ("ckpt-" + std::to_string(step) + ".tjck");
    REQUIRE(fs::exists(file));
    reference[step] = read_bytes(file);
  }

  // Every phase of both files a save writes, at the first and the second save of a run.
  struct PhaseKill {
    std::string phase, kind;
    int n;
  };
  std::vector<PhaseKill> phase_kills;
  for (const char* phase : {"created", "half_written", "written", "synced", "renamed", "directory_synced"})
    for (const char* kind : {"ckpt", "latest"})
      for (int n : {1, 2}) phase_kills.push_back({phase, kind, n});
  const int random_kills = 32;

  std::mt19937 rng(1234);
  int kills = 0, phase_done = 0, random_done = 0, chains = 0, mid_write = 0;
  while (phase_done < static_cast<int>(phase_kills.size()) || random_done < random_kills) {
    // A chain: one directory, killed again and again, resumed each time, until a run finishes.
    const fs::path dir = fs::path(work.path()) / ("chain-" + std::to_string(chains++));
    int64_t newest = 0;
    while (true) {
      const bool by_phase = phase_done < static_cast<int>(phase_kills.size()) &&
                            (random_done >= random_kills || rng() % 2 == 0);
      const bool by_chance = !by_phase && random_done < random_kills;
      // The last run of a chain goes uninterrupted once the steps left are too few for a kill.
      const bool finish = newest + 2 >= kSteps || (!by_phase && !by_chance);
      std::vector<std::string> args = {"train", dir.string(), std::to_string(kSteps)};
      const PhaseKill kill = by_phase ? phase_kills[phase_done] : PhaseKill{};
      if (by_phase && !finish) args.insert(args.end(), {"stop", kill.phase, kill.kind, std::to_string(kill.n)});
      ChildProcess child(tj::testing::fault_child_path(), args);
      INFO("chain " << chains - 1 << ", newest checkpoint before: step " << newest);
      if (finish) {
        const int code = child.exit_code();
        INFO(child.output());
        REQUIRE(code == 0);
        break;
      }
      if (by_phase) {
        const bool stopped = child.wait_stopped_or_exited();
        INFO(child.output());
        REQUIRE(stopped);  // stopped at the phase, not finished
        REQUIRE(child.kill_and_wait());
        ++phase_done;
        const int64_t now = check_newest(dir, reference);
        INFO("killed at " << kill.phase << " of " << kill.kind << " write " << kill.n);
        CHECK(now == expected_newest(kill.phase, kill.kind, kill.n, newest));
        newest = now;
      } else {
        REQUIRE(!child.wait_for_line("start").empty());
        // Uniformly over the time the steps left take.
        const double left_us = train_ms * 1000 * static_cast<double>(kSteps - newest) / kSteps;
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(rng() % static_cast<uint64_t>(left_us + 1))));
        if (!child.kill_and_wait()) {  // it finished first: the chain is done
          INFO(child.output());
          REQUIRE(child.exit_code() == 0);
          train_ms *= 0.7;  // (runs got quicker than timed: the machine's load changes)
          break;
        }
        ++random_done;
        mid_write += temporaries_in(dir) > 0;
        const int64_t now = check_newest(dir, reference);
        CHECK(now >= newest);
        newest = now;
      }
      ++kills;
    }
    // The chain's last run ended where the uninterrupted run ended, byte for byte, and took
    // away the temporaries the killed writers left.
    CHECK(read_bytes(dir / ("ckpt-" + std::to_string(kSteps) + ".tjck")) == reference.at(kSteps));
    CHECK(temporaries_in(dir) == 0);
  }
  CHECK(kills >= 50);
  WARN(kills << " kills (" << phase_done << " at a named phase, " << random_done << " at random, of which " << mid_write
             << " left a temporary file: they landed mid-write) over " << chains << " chains in "
             << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
             << " s; a child starts in " << startup_ms << " ms and trains " << kSteps << " steps in " << timed_ms << " ms");
}

TEST_CASE("checkpoint directories are created durably, every new level synced in its parent", "[faults][checkpoint]") {
  tj::test::TempDir work;
  const std::string nested = work.path() + "/a/b/c";
  std::error_code ec;
  CHECK(tj::create_directories_durably(nested, ec));
  CHECK_FALSE(ec);
  CHECK(fs::is_directory(nested));
  CHECK_FALSE(tj::create_directories_durably(nested, ec));  // there already: nothing created
  CHECK_FALSE(ec);
  CHECK(tj::sync_directory(nested) == 0);
  CHECK(tj::sync_directory(work.path() + "/missing") == ENOENT);
}
