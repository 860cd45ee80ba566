// The check of the environment (knobs::check_environment): every TOWERJIT_* variable is a
// declared knob with a value it can read, whether or not the run reads it. An unknown name is a
// warning naming the closest knob, once per process; a bad value is a towerjit::Error.
#include <catch2/catch.hpp>
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "dsl/error.h"
#include "jit/knobs.h"
#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"

namespace knobs = towerjit::knobs;
using towerjit::test::ScopedEnv;
using towerjit::testing::ChildProcess;
using towerjit::testing::fault_child_path;

namespace {

// A value each checked knob cannot read, and one it can.
struct Values {
  const char* name;
  const char* bad;
  const char* good;
};
const Values kChecked[] = {
    {"TOWERJIT_CACHE", "maybe", "off"},
    {"TOWERJIT_DEBUG", "4", "2"},
    {"TOWERJIT_GROUP_KERNELS", "sometimes", "on"},
    {"TOWERJIT_MATMUL_EPILOGUES", "maybe", "off"},
    {"TOWERJIT_CONV_EPILOGUES", "maybe", "off"},
    {"TOWERJIT_FACTOR_SUMS", "factored", "off"},
    {"TOWERJIT_RECOMPUTE_IN_READERS", "again", "off"},
    {"TOWERJIT_REDUCTION_FINISHERS", "later", "off"},
    {"TOWERJIT_FUSED_MAX_POOLS", "never", "off"},
    {"TOWERJIT_CPU_ISA", "avx9", "baseline"},
    {"TOWERJIT_DIRECT_CONV", "avx2", "off"},
    {"TOWERJIT_CHECK_NUMERICS", "y", "yes"},
    {"TOWERJIT_PIN_TOWERS", "2", "0"},
    {"TOWERJIT_GPU_VARIABLES", "gpu", "true"},
    {"TOWERJIT_PREFETCH_FEEDS", "ahead", "off"},
    {"TOWERJIT_BUCKET_MB", "abc", "0.5"},
    {"TOWERJIT_DETERMINISTIC", "bitwise", "layout"},
    {"TOWERJIT_MPI", "openmpi", "off"},
    {"TOWERJIT_MPI_START_TIMEOUT", "0", "2.5"},
    {"TOWERJIT_MPI_STALL_WARNING", "soon", "60"},
    {"TOWERJIT_MPI_STALL_TIMEOUT", "-1", "0"},
    {"TOWERJIT_CUDA", "nvidia", "emulator"},
    {"TOWERJIT_CUDA_CACHING", "none", "off"},
    {"TOWERJIT_CUDA_GRAPHS", "graphs", "on"},
    {"TOWERJIT_ONE_PASS_REDUCTIONS", "once", "off"},
    {"TOWERJIT_ALLOW_TF32", "tf32", "on"},
    {"TOWERJIT_NCCL", "ring", "off"},
    {"TOWERJIT_NCCL_WORLD", "all", "on"},
    {"TOWERJIT_CUDNN", "9", "off"},
    {"TOWERJIT_CONV_IMPLICIT_GEMM", "race", "off"},
    {"TOWERJIT_CUDNN_WORKSPACE_MB", "1.5", "0"},
    {"TOWERJIT_EMULATED_GPUS", "0", "7"},
    {"TOWERJIT_EMULATED_GPU_MB", "4G", "127"},
    {"TOWERJIT_EMULATED_GPU_SMS", "-1", "1"},
    {"TOWERJIT_EMULATED_CUDNN_MS", "0", "1e6"},
    {"TOWERJIT_EMULATOR_SCHEDULE", "random:", "random:7"},
    {"TOWERJIT_EMULATED_NCCL_TIMEOUT", "never", "1"},
};
// Knobs whose value is any text (a path, or set-means-on), read as given.
const char* const kText[] = {"TOWERJIT_CACHE_DIR",        "TOWERJIT_DUMP",         "TOWERJIT_MPI_LIBRARY",
                             "TOWERJIT_CUDA_ARCH",        "TOWERJIT_EMULATOR_LIBRARY", "TOWERJIT_BENCH_PYTHON",
                             "TOWERJIT_FUZZ_VERBOSE",     "TOWERJIT_BENCH_PEER_PYTHON"};

bool is_towerjit(const std::string& name) { return name.rfind("TOWERJIT_", 0) == 0; }

}  // namespace

TEST_CASE("knob check: an unknown TOWERJIT_ name is a warning naming the closest knob", "[knobs][errors]") {
  const auto found = knobs::detail::check_variables({"TOWERJIT_GPU_VARIABLE=on", "PATH=/usr/bin", "TOWERJIT_CACHE=off"});
  CHECK_FALSE(found.error);
  REQUIRE(found.warnings.size() == 1);
  CHECK(found.warnings[0] ==
        "towerjit: warning: TOWERJIT_GPU_VARIABLE is not a towerjit setting (did you mean TOWERJIT_GPU_VARIABLES?); "
        "it is ignored");
  // A letter dropped, one swapped, the wrong case: each finds its knob.
  CHECK(knobs::detail::closest_knob("TOWERJIT_BUCKETMB") == "TOWERJIT_BUCKET_MB");
  CHECK(knobs::detail::closest_knob("TOWERJIT_DEBGU") == "TOWERJIT_DEBUG");
  CHECK(knobs::detail::closest_knob("TOWERJIT_EMULATED_GPU") == "TOWERJIT_EMULATED_GPUS");
  const auto lower = knobs::detail::check_variables({"towerjit_cache=off"});
  REQUIRE(lower.warnings.size() == 1);
  CHECK_THAT(lower.warnings[0], Catch::Contains("towerjit_cache is not a towerjit setting (did you mean TOWERJIT_CACHE?)"));
  // Names of others are none of towerjit's business.
  CHECK(knobs::detail::check_variables({"TOWERJITX=1", "MY_TOWERJIT_CACHE=1", "HOME=/root"}).warnings.empty());
}

TEST_CASE("knob check: a name far from every knob is a warning without a suggestion", "[knobs][errors]") {
  const auto found = knobs::detail::check_variables({"TOWERJIT_XYZZY_PLUGH=1", "TOWERJIT_FOO=1"});
  CHECK_FALSE(found.error);
  REQUIRE(found.warnings.size() == 2);
  CHECK(found.warnings[0] ==
        "towerjit: warning: TOWERJIT_XYZZY_PLUGH is not a towerjit setting (docs/cpu-jit.md lists them); it is ignored");
  CHECK_THAT(found.warnings[1], !Catch::Contains("did you mean"));
  CHECK_FALSE(knobs::detail::closest_knob("TOWERJIT_FOO"));
}

TEST_CASE("knob check: the tests cover every declared TOWERJIT_ knob", "[knobs]") {
  std::set<std::string> covered(std::begin(kText), std::end(kText));
  for (const Values& v : kChecked) CHECK(covered.insert(v.name).second);
  std::set<std::string> declared;
  for (const std::string& name : knobs::detail::declared_names())
    if (is_towerjit(name)) declared.insert(name);
  CHECK(declared == covered);
}

TEST_CASE("knob check: every knob's bad value is an error, its good value passes", "[knobs][errors]") {
  for (const Values& v : kChecked) {
    INFO(v.name);
    const auto bad = knobs::detail::check_variables({std::string(v.name) + "=" + v.bad});
    CHECK(bad.warnings.empty());
    REQUIRE(bad.error);
    CHECK_THAT(*bad.error, Catch::StartsWith(std::string("towerjit: ") + v.name + "="));
    const auto good = knobs::detail::check_variables({std::string(v.name) + "=" + v.good});
    CHECK(good.warnings.empty());
    CHECK_FALSE(good.error);
  }
  for (const char* name : kText) {
    INFO(name);
    const auto any = knobs::detail::check_variables({std::string(name) + "=anything at all"});
    CHECK(any.warnings.empty());
    CHECK_FALSE(any.error);
  }
  // An empty value is unset, as for the accessors.
  CHECK_FALSE(knobs::detail::check_variables({"TOWERJIT_BUCKET_MB="}).error);
  // Every entry at once: all good passes; one bad among them is reported by name.
  std::vector<std::string> all;
  for (const Values& v : kChecked) all.push_back(std::string(v.name) + "=" + v.good);
  CHECK_FALSE(knobs::detail::check_variables(all).error);
  all.push_back("TOWERJIT_EMULATED_GPU_MB=4G");
  CHECK_THAT(knobs::detail::check_variables(all).error.value_or(""),
             Catch::Contains("TOWERJIT_EMULATED_GPU_MB=4G is not a positive whole number"));
}

TEST_CASE("knob check: the accessors read what the check passes and refuse what it refuses", "[knobs][errors]") {
  struct Read { const char* name; void (*read)(); };
  const Read reads[] = {{"TOWERJIT_BUCKET_MB", [] { knobs::bucket_mb(); }},
                        {"TOWERJIT_DEBUG", [] { knobs::debug_level(); }},
                        {"TOWERJIT_CUDNN_WORKSPACE_MB", [] { knobs::cudnn_workspace_mb(); }},
                        {"TOWERJIT_EMULATOR_SCHEDULE", [] { knobs::emulator_random_schedule(); }},
                        {"TOWERJIT_EMULATED_NCCL_TIMEOUT", [] { knobs::emulated_nccl_timeout_s(); }},
                        {"TOWERJIT_CUDA", [] { knobs::cuda_emulated(); }}};
  for (const Read& r : reads) {
    const auto v = std::find_if(std::begin(kChecked), std::end(kChecked),
                                [&](const Values& c) { return std::string(c.name) == r.name; });
    REQUIRE(v != std::end(kChecked));
    INFO(r.name);
    {
      ScopedEnv e(r.name, std::string(v->bad));
      CHECK_THROWS_AS(r.read(), towerjit::Error);
    }
    ScopedEnv e(r.name, std::string(v->good));
    CHECK_NOTHROW(r.read());
  }
}

TEST_CASE("knob check: a run warns once about a misspelt knob and trains on", "[knobs][errors][faults]") {
  ScopedEnv typo("TOWERJIT_GPU_VARIABLE", std::string("on"));
  ChildProcess child(fault_child_path(), {"train", "", "2"});
  const int code = child.exit_code();
  const std::string& output = child.output();
  INFO(output);
  CHECK(code == 0);
  const std::string warning =
      "towerjit: warning: TOWERJIT_GPU_VARIABLE is not a towerjit setting (did you mean TOWERJIT_GPU_VARIABLES?); "
      "it is ignored\n";
  CHECK_THAT(output, Catch::Contains(warning) && Catch::Contains("done 2"));
  CHECK(output.find(warning) == output.rfind(warning));  // once, though it reads many knobs
}

TEST_CASE("knob check: a bad value of a knob the run never reads stops it with an error",
          "[knobs][errors][faults]") {
  // One CPU tower: nothing reads the GPU buckets' size, yet TOWERJIT_BUCKET_MB=abc is refused.
  ScopedEnv bad("TOWERJIT_BUCKET_MB", std::string("abc"));
  const std::string message =
      "towerjit: TOWERJIT_BUCKET_MB=abc is not a size in MB: set a number from 0 (a bucket per gradient) up, e.g. 25 "
      "(the default) (towerjit checks every TOWERJIT_ variable when it starts, whether or not this run reads it)";
  {
    ChildProcess caught(fault_child_path(), {"train", "", "2"});
    const int code = caught.exit_code();
    INFO(caught.output());
    CHECK(code == 1);
    CHECK_THAT(caught.output(), Catch::Contains("error: " + message));
  }
  // Where nothing catches it, it ends the program as an error, not an abort.
  ChildProcess uncaught(fault_child_path(), {"train", "", "2", "uncaught"});
  const int code = uncaught.exit_code();
  INFO(uncaught.output());
  CHECK(code == 1);
  CHECK_THAT(uncaught.output(), Catch::Contains(message));
  CHECK_THAT(uncaught.output(), !Catch::Contains("done"));
}

TEST_CASE("knob check: every knob's bad value stops a CPU run that never reads it", "[knobs][errors][faults]") {
  for (const Values& v : kChecked) {
    INFO(v.name << "=" << v.bad);
    ScopedEnv bad(v.name, std::string(v.bad));
    ChildProcess child(fault_child_path(), {"train", "", "2"});
    const int code = child.exit_code();
    INFO(child.output());
    CHECK(code == 1);
    CHECK_THAT(child.output(), Catch::Contains(std::string("error: towerjit: ") + v.name + "=") &&
                                   Catch::Contains("whether or not this run reads it") && !Catch::Contains("done"));
  }
}
