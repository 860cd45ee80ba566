// Two processes compiling the same model into one fresh compile cache at the same moment, 20
// times: both must train correctly, and the cache must end with exactly one valid entry per
// kernel module and no temporary file. Every other round the cache starts with torn entries
// (each cut in half, or its second half zeros): both processes must reject them, recompile,
// and leave whole entries.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "jit/cpu/compile_cache.h"
#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using tj::testing::ChildProcess;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The directory's files by name, with their bytes.
std::map<std::string, std::string> files_in(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files[entry.path().filename().string()] = read_bytes(entry.path());
  return files;
}

// The children's "loss" lines, the training's result.
std::string losses(const std::string& output) {
  std::istringstream in(output);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("loss ", 0) == 0) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("two processes racing to compile one model into a fresh cache, 20 times, both train right and leave one whole entry per kernel",
          "[faults][cpu]") {
  tj::test::TempDir work;
  // One process alone: the result and the entries every round must end with.
  const fs::path solo = fs::path(work.path()) / "solo";
  ChildProcess alone(tj::testing::fault_child_path(), {"compile", solo.string()});
  alone.write("g");
  const int alone_code = alone.exit_code();
  INFO(alone.output());
  REQUIRE(alone_code == 0);
  const std::string want = losses(alone.output());
  REQUIRE(want.size() > 0);
  const auto entries = files_in(solo);
  REQUIRE(!entries.empty());
  for (const auto& [name, bytes] : entries) REQUIRE(name.ends_with(".tjc"));

  int total_seen = 0;
  for (int round = 0; round < 20; ++round) {
    const fs::path cache = fs::path(work.path()) / ("round-" + std::to_string(round));
    const bool torn = round % 2 == 1;
    if (torn) {
      fs::create_directories(cache);
      // Cut in half (a writer that died), or whole-sized with the second half zeros (what a
      // file system without ordered data can leave after a power cut).
      for (const auto& [name, bytes] : entries) {
        const std::string half = bytes.substr(0, bytes.size() / 2);
        std::ofstream(cache / name, std::ios::binary)
            << (round % 4 == 1 ? half : half + std::string(bytes.size() - half.size(), '\0'));
      }
    }
    ChildProcess a(tj::testing::fault_child_path(), {"compile", cache.string()});
    ChildProcess b(tj::testing::fault_child_path(), {"compile", cache.string()});
    a.write("g");  // both are loaded and waiting: they compile at the same moment
    b.write("g");
    // Meanwhile every entry that appears must be whole: a reader never sees one half-written.
    int partial = 0, seen = 0;
    const tj::cpujit::CompileCache reader(cache.string());
    while (!torn && (a.running() || b.running())) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(cache, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.ends_with(".tjc")) continue;
        ++seen;
        partial += reader.load(name.substr(0, name.size() - 4)).status != tj::cpujit::CompileCache::Status::hit;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // leave the racers the cores
    }
    const int code_a = a.exit_code(), code_b = b.exit_code();
    INFO("round " << round << (torn ? " (torn entries first)" : "") << "\nfirst:\n" << a.output() << "second:\n" << b.output());
    REQUIRE(code_a == 0);
    REQUIRE(code_b == 0);
    CHECK(partial == 0);
    total_seen += seen;
    CHECK(losses(a.output()) == want);
    CHECK(losses(b.output()) == want);
    // One entry per kernel module, each valid (whole, checksum right), and nothing else.
    const auto now = files_in(cache);
    CHECK(now.size() == entries.size());
    for (const auto& [name, bytes] : now) {
      INFO(name);
      REQUIRE(entries.count(name));
      CHECK(reader.load(name.substr(0, name.size() - 4)).status == tj::cpujit::CompileCache::Status::hit);
    }
  }
  WARN("the clean rounds' entries were read " << total_seen << " times while the processes raced; none was partial");
}

TEST_CASE("a compile cache store removes the temporaries dead processes of this machine left, and no others",
          "[faults][cpu]") {
  tj::test::TempDir dir;
  ChildProcess ended("/bin/true", {});
  REQUIRE(ended.exit_code() == 0);  // reaped: its pid names no process now
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  std::string host(name);
  for (char& c : host)
    if (c == '.' || c == '/') c = '_';
  const std::string key = tj::cpujit::make_cache_key({"k"});
  const fs::path dead = fs::path(dir.path()) / (key + ".tjc.tmp." + host + "." + std::to_string(ended.pid()) + ".0");
  const fs::path live = fs::path(dir.path()) / (key + ".tjc.tmp." + host + "." + std::to_string(::getpid()) + ".7");
  const fs::path elsewhere = fs::path(dir.path()) / (key + ".tjc.tmp.another-host." + std::to_string(ended.pid()) + ".0");
  for (const fs::path& p : {dead, live, elsewhere}) std::ofstream(p) << "half an entry";
  REQUIRE(tj::cpujit::CompileCache(dir.path()).store(key, "payload"));
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));       // a store in progress in a live process
  CHECK(fs::exists(elsewhere));  // another machine's: its pid means nothing here
  CHECK(tj::cpujit::CompileCache(dir.path()).load(key).payload == "payload");
}
