// CompileOptions (jit/compile_options.h): a program chooses its dumps, the numerics check and
// the compile cache's directory through them; the environment variables, when set, override.
#include <catch2/catch.hpp>
#include <filesystem>
#include <unistd.h>

#include "cpu_test_env.h"
#include "jit/knobs.h"
#include "runtime/cpu/cpu_program.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace knobs = towerjit::knobs;
using towerjit::test::ScopedEnv;

namespace {

// Sets the process's options for a scope, and puts the previous ones back.
struct ScopedOptions {
  tj::CompileOptions before = tj::compile_options();
  explicit ScopedOptions(const tj::CompileOptions& o) { tj::set_compile_options(o); }
  ~ScopedOptions() { tj::set_compile_options(before); }
};

}  // namespace

TEST_CASE("compile options: each field is read unless its environment variable overrides it", "[jit][knobs]") {
  ScopedEnv no_dump("TOWERJIT_DUMP", std::nullopt);
  ScopedEnv no_check("TOWERJIT_CHECK_NUMERICS", std::nullopt);
  ScopedEnv no_cache("TOWERJIT_CACHE_DIR", std::nullopt);
  {
    ScopedOptions none({});
    CHECK_FALSE(knobs::dump_dir());
    CHECK_FALSE(knobs::check_numerics());
    CHECK_FALSE(knobs::cache_dir_override());
  }
  ScopedOptions set({.cache_dir = "/tmp/options-cache", .dump_dir = "/tmp/options-dump", .check_numerics = true});
  CHECK(knobs::dump_dir() == "/tmp/options-dump");
  CHECK(knobs::check_numerics());
  CHECK(knobs::cache_dir() == "/tmp/options-cache");
  CHECK(tj::compile_options().dump_dir == "/tmp/options-dump");  // as set, before the overrides

  ScopedEnv dump("TOWERJIT_DUMP", "/tmp/env-dump");
  ScopedEnv check("TOWERJIT_CHECK_NUMERICS", "off");
  ScopedEnv cache("TOWERJIT_CACHE_DIR", "/tmp/env-cache");
  CHECK(knobs::dump_dir() == "/tmp/env-dump");
  CHECK_FALSE(knobs::check_numerics());
  CHECK(knobs::cache_dir() == "/tmp/env-cache");
}

TEST_CASE("compile options: a dump directory set by the program receives the next program's dump", "[jit][dump]") {
  ScopedEnv no_dump("TOWERJIT_DUMP", std::nullopt);
  const auto dir = std::filesystem::temp_directory_path() / ("towerjit-options-dump-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {tj::kBatch, 7});
  auto y = tj::gelu(tj::dense(x, 3, "fc"));  // a loop kernel after the product (ReLU would be its epilogue)
  {
    ScopedOptions set({.dump_dir = dir.string()});
    tj::CpuProgram program(g, {y});
  }
  int kir = 0, ll = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    kir += e.path().extension() == ".kir";
    ll += e.path().extension() == ".ll";
  }
  CHECK(kir == 1);
  CHECK(ll == 1);
  // Options put back: the next program writes nothing there.
  std::filesystem::remove_all(dir);
  tj::CpuProgram again(g, {y, x});
  CHECK_FALSE(std::filesystem::exists(dir));
}
