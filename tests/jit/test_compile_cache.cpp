// The on-disk compile cache: miss then hit, damaged entries detected and rebuilt,
// TOWERJIT_CACHE=off, and several threads compiling one kernel at once.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "dsl/error.h"
#include "jit/cpu/compile_cache.h"
#include "jit/cpu/cpu_compiler.h"
#include "jit/knobs.h"
#include "tests/jit/cpu_test_env.h"

namespace cpujit = towerjit::cpujit;
namespace fs = std::filesystem;
using towerjit::test::CacheSandbox;
using towerjit::test::kSaxpyIR;
using towerjit::test::SaxpyFn;
using towerjit::test::ScopedEnv;
using towerjit::test::TempDir;

namespace {

bool saxpy_works(const cpujit::CompiledModule& module) {
  auto fn = reinterpret_cast<SaxpyFn>(module.lookup("saxpy"));
  std::vector<float> x(127), y(127);
  for (int i = 0; i < 127; ++i) x[i] = static_cast<float>(i), y[i] = 1.0f;
  fn(x.data(), y.data(), 2.0f, 127);
  for (int i = 0; i < 127; ++i)
    if (y[i] != 2.0f * static_cast<float>(i) + 1.0f) return false;
  return true;
}

// The cache entries (not temp files or dumps) in a directory.
std::vector<fs::path> entries(const TempDir& dir) {
  std::vector<fs::path> out;
  for (const auto& file : dir.files())
    if (file.extension() == ".tjc") out.push_back(file);
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace

// The hit skips optimisation and code generation (cache_hit says so); how much faster that is
// depends on the machine's load, so it is printed, not asserted.
TEST_CASE("compile cache: miss then hit, the hit running the same", "[cpu]") {
  CacheSandbox sandbox;
  cpujit::CompileStats cold, warm;
  auto first = cpujit::compile(kSaxpyIR, "saxpy_cache", &cold);
  CHECK(saxpy_works(*first));
  first.reset();  // while it lived, a second compile would share it instead of reading the cache
  auto second = cpujit::compile(kSaxpyIR, "saxpy_cache", &warm);
  CHECK_FALSE(cold.cache_hit);
  CHECK(warm.cache_hit);
  CHECK_FALSE(warm.shared);
  CHECK(entries(sandbox.dir).size() == 1);
  CHECK(saxpy_works(*second));
  WARN("saxpy: cold compile " << cold.compile_ms << " ms, warm (cache hit) load "
                              << warm.compile_ms << " ms");
}

TEST_CASE("a module compiled again while the first lives is shared, not recompiled or read from the cache", "[cpu]") {
  CacheSandbox sandbox;
  cpujit::CompileStats first_stats, second_stats;
  auto first = cpujit::compile(kSaxpyIR, "saxpy_shared", &first_stats);
  auto second = cpujit::compile(kSaxpyIR, "saxpy_shared", &second_stats);
  CHECK_FALSE(first_stats.shared);
  CHECK(second_stats.shared);
  CHECK(first.get() == second.get());
  CHECK(saxpy_works(*second));
}

TEST_CASE("compile cache: a different kernel text is a different entry", "[cpu]") {
  CacheSandbox sandbox;
  cpujit::CompileStats stats;
  cpujit::compile("define i32 @k() {\n  ret i32 1\n}\n", "k", &stats);
  cpujit::compile("define i32 @k() {\n  ret i32 2\n}\n", "k", &stats);
  CHECK_FALSE(stats.cache_hit);
  CHECK(entries(sandbox.dir).size() == 2);
}

TEST_CASE("compile cache: a damaged entry is detected, rebuilt and still runs", "[cpu]") {
  CacheSandbox sandbox;
  cpujit::compile(kSaxpyIR, "saxpy_damage");
  auto files = entries(sandbox.dir);
  REQUIRE(files.size() == 1);
  const std::string good = read_file(files[0]);

  // Flip payload bytes, truncate, and break the magic: each must read as damaged.
  std::string flipped = good;
  for (std::size_t i = good.size() / 2; i < good.size() / 2 + 16; ++i) flipped[i] ^= 0x5a;
  std::string truncated = good.substr(0, good.size() - 100);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  for (const std::string& damaged : {flipped, truncated, bad_magic, std::string("TJ")}) {
    write_file(files[0], damaged);
    cpujit::CompileStats stats;
    auto module = cpujit::compile(kSaxpyIR, "saxpy_damage", &stats);
    CHECK_FALSE(stats.cache_hit);
    CHECK(stats.cache_damaged);
    CHECK(saxpy_works(*module));
    CHECK(read_file(files[0]) == good);  // rebuilt in place
    module.reset();

    auto again = cpujit::compile(kSaxpyIR, "saxpy_damage", &stats);
    CHECK(stats.cache_hit);
    CHECK(saxpy_works(*again));
  }
}

TEST_CASE("compile cache: the entry format rejects every kind of damage", "[cpu]") {
  TempDir dir;
  cpujit::CompileCache cache(dir.path() + "/nested/dir");  // created on first store
  const std::string key = cpujit::make_cache_key({"kernel"});
  CHECK(cache.load(key).status == cpujit::CompileCache::Status::miss);
  REQUIRE(cache.store(key, "payload bytes"));
  auto hit = cache.load(key);
  CHECK(hit.status == cpujit::CompileCache::Status::hit);
  CHECK(hit.payload == "payload bytes");

  std::string good = read_file(cache.entry_path(key));
  std::string bad_checksum = good;
  bad_checksum.back() ^= 1;
  std::string bad_version = good;
  bad_version[8] ^= 1;
  std::string extra = good + "x";
  for (const std::string& damaged : {bad_checksum, bad_version, extra, std::string()}) {
    write_file(cache.entry_path(key), damaged);
    CHECK(cache.load(key).status == cpujit::CompileCache::Status::damaged);
  }
  REQUIRE(cache.store(key, ""));  // an empty payload is a valid entry
  CHECK(cache.load(key).status == cpujit::CompileCache::Status::hit);
}

TEST_CASE("compile cache: keys separate their parts and change with every part", "[cpu]") {
  CHECK(cpujit::make_cache_key({"ab", "c"}) != cpujit::make_cache_key({"a", "bc"}));
  CHECK(cpujit::make_cache_key({"a", "b"}) != cpujit::make_cache_key({"a", "c"}));
  CHECK(cpujit::make_cache_key({"a", "b"}) == cpujit::make_cache_key({"a", "b"}));
  CHECK(cpujit::make_cache_key({"a"}).size() == 64);  // hex SHA-256: a safe file name
}

TEST_CASE("compile cache: TOWERJIT_CACHE=off bypasses the cache entirely", "[cpu]") {
  CacheSandbox sandbox;
  ScopedEnv off("TOWERJIT_CACHE", "off");
  CHECK_FALSE(towerjit::knobs::cache_enabled());
  cpujit::CompileStats first, second;
  auto a = cpujit::compile(kSaxpyIR, "saxpy_off", &first);
  auto b = cpujit::compile(kSaxpyIR, "saxpy_off", &second);
  CHECK_FALSE(first.cache_hit);
  CHECK_FALSE(second.cache_hit);
  CHECK(sandbox.dir.files().empty());  // nothing read, nothing written
  CHECK(saxpy_works(*b));
}

TEST_CASE("compile cache: cache directory follows the knobs", "[cpu]") {
  ScopedEnv no_override("TOWERJIT_CACHE_DIR", std::nullopt);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg-test");
    CHECK(towerjit::knobs::cache_dir() == "/tmp/xdg-test/towerjit");
  }
  ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv home("HOME", "/tmp/home-test");
  CHECK(towerjit::knobs::cache_dir() == "/tmp/home-test/.cache/towerjit");
  ScopedEnv override_dir("TOWERJIT_CACHE_DIR", "/tmp/override");
  CHECK(towerjit::knobs::cache_dir() == "/tmp/override");
}

TEST_CASE("compile cache: 4 threads compiling the same kernel all get working code",
          "[cpu]") {
  CacheSandbox sandbox;
  constexpr int kThreads = 4;
  for (int round = 0; round < 2; ++round) {  // round 0: all miss and race to store; 1: all hit
    std::vector<std::shared_ptr<cpujit::CompiledModule>> modules(kThreads);
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          modules[t] = cpujit::compile(kSaxpyIR, "saxpy_threads");
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (int t = 0; t < kThreads; ++t) {
      INFO("round " << round << ", thread " << t << ": " << errors[t]);
      REQUIRE(modules[t] != nullptr);
      CHECK(saxpy_works(*modules[t]));
    }
    CHECK(sandbox.dir.files().size() == 1);  // one entry, no temp files left behind
  }
}

TEST_CASE("compile cache: concurrent stores and loads of one key never see a partial entry",
          "[cpu]") {
  TempDir dir;
  cpujit::CompileCache cache(dir.path());
  const std::string key = cpujit::make_cache_key({"race"});
  const std::string payload(1 << 20, 'p');  // big enough that a torn write would show
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        if (!cache.store(key, payload)) ++bad;
        auto got = cache.load(key);
        if (got.status != cpujit::CompileCache::Status::hit || got.payload != payload) ++bad;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(bad == 0);
  CHECK(dir.files().size() == 1);
}

// Everything written to stderr while `f` runs (the cache's warning goes there, not to an Error:
// a compile that cannot store its result still works).
template <typename F>
std::string stderr_of(F f) {
  TempDir dir;
  const std::string path = dir.path() + "/stderr";
  std::fflush(stderr);
  const int saved = ::dup(2);
  std::FILE* file = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(file), 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(file);
  return read_file(path);
}

TEST_CASE("compile cache: a cache directory that is a file is named in a warning and the kernel still runs", "[cpu][errors]") {
  TempDir dir;
  const std::string file = dir.path() + "/cache";
  write_file(file, "not a directory");
  ScopedEnv cache_dir("TOWERJIT_CACHE_DIR", file);
  ScopedEnv cache_on("TOWERJIT_CACHE", std::nullopt);
  ScopedEnv no_dump("TOWERJIT_DUMP", std::nullopt);
  std::shared_ptr<cpujit::CompiledModule> module;
  const std::string text = stderr_of([&] { module = cpujit::compile(kSaxpyIR, "saxpy_cache_is_a_file"); });
  CHECK(saxpy_works(*module));
  CHECK_THAT(text, Catch::Contains("towerjit: warning: cannot write the compile cache in " + file + " (" + file +
                                   " is a file, not a directory)") &&
                       Catch::Contains("set TOWERJIT_CACHE_DIR to a writable directory, or TOWERJIT_CACHE=off"));
}
