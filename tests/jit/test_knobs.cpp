// Environment knobs: a value that cannot be read is an error naming the knob and what it
// takes, never a silent default.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "dsl/error.h"
#include "jit/knobs.h"

namespace knobs = towerjit::knobs;

namespace {

struct Env {
  const char* name;
  Env(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~Env() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("every switch knob takes on or off and names itself when set to anything else", "[knobs][errors]") {
  struct Switch { const char* name; bool (*read)(); bool fallback; };
  const Switch switches[] = {{"TOWERJIT_CACHE", knobs::cache_enabled, true},
                             {"TOWERJIT_GROUP_KERNELS", knobs::group_kernels_enabled, true},
                             {"TOWERJIT_PIN_TOWERS", knobs::pin_towers, true},
                             {"TOWERJIT_NCCL", knobs::nccl_enabled, true},
                             {"TOWERJIT_CUDA_CACHING", knobs::cuda_caching, true},
                             {"TOWERJIT_GPU_VARIABLES", knobs::gpu_variables, false},
                             {"TOWERJIT_DIRECT_CONV", knobs::direct_conv, true},
                             {"TOWERJIT_CHECK_NUMERICS", knobs::check_numerics, false},
                             {"TOWERJIT_ALLOW_TF32", knobs::allow_tf32, false}};
  for (const Switch& s : switches) {
    INFO(s.name);
    ::unsetenv(s.name);
    CHECK(s.read() == s.fallback);
    for (const char* on : {"on", "1", "TRUE", "yes"}) {
      Env e(s.name, on);
      CHECK(s.read());
    }
    for (const char* off : {"off", "0", "False", "NO"}) {
      Env e(s.name, off);
      CHECK_FALSE(s.read());
    }
    Env e(s.name, "abc");
    CHECK_THROWS_WITH(s.read(), Catch::Contains(std::string(s.name) + "=abc is not a switch: set on or off"));
  }
}

TEST_CASE("TOWERJIT_BUCKET_MB and TOWERJIT_DEBUG that cannot be read are errors naming the valid values", "[knobs][errors]") {
  {
    Env e("TOWERJIT_BUCKET_MB", "abc");
    CHECK_THROWS_WITH(knobs::bucket_mb(), Catch::Contains("TOWERJIT_BUCKET_MB=abc is not a size in MB") &&
                                              Catch::Contains("25 (the default)"));
  }
  {
    Env e("TOWERJIT_BUCKET_MB", "-1");
    CHECK_THROWS_AS(knobs::bucket_mb(), towerjit::Error);
  }
  {
    Env e("TOWERJIT_BUCKET_MB", "0.5");
    CHECK(knobs::bucket_mb() == 0.5);
  }
  CHECK(knobs::bucket_mb() == 25);
  {
    Env e("TOWERJIT_DEBUG", "verbose");
    CHECK_THROWS_WITH(knobs::debug_level(), Catch::Contains("TOWERJIT_DEBUG=verbose is not a level: set 0"));
  }
  {
    Env e("TOWERJIT_DEBUG", "2");
    CHECK(knobs::debug_level() == 2);
  }
}

TEST_CASE("TOWERJIT_MPI_START_TIMEOUT that is not a positive time is an error", "[knobs][errors]") {
  {
    Env e("TOWERJIT_MPI_START_TIMEOUT", "soon");
    CHECK_THROWS_WITH(knobs::mpi_start_timeout_s(), Catch::Contains("TOWERJIT_MPI_START_TIMEOUT=soon is not a time"));
  }
  {
    Env e("TOWERJIT_MPI_START_TIMEOUT", "2.5");
    CHECK(knobs::mpi_start_timeout_s() == 2.5);
  }
  CHECK(knobs::mpi_start_timeout_s() == 30);
}

TEST_CASE("the MPI stall knobs read seconds, and anything else is an error naming the knob", "[knobs][errors]") {
  CHECK(knobs::mpi_stall_warning_s() == 60);
  CHECK(knobs::mpi_stall_timeout_s() == 0);
  {
    Env e("TOWERJIT_MPI_STALL_TIMEOUT", "120");
    CHECK(knobs::mpi_stall_timeout_s() == 120);
  }
  {
    Env e("TOWERJIT_MPI_STALL_TIMEOUT", "-1");
    CHECK_THROWS_WITH(knobs::mpi_stall_timeout_s(),
                      Catch::Contains("TOWERJIT_MPI_STALL_TIMEOUT=-1 is not a time") && Catch::Contains("0 (the default) never"));
  }
  {
    Env e("TOWERJIT_MPI_STALL_WARNING", "0");  // a warning every 0 s is no setting
    CHECK_THROWS_WITH(knobs::mpi_stall_warning_s(), Catch::Contains("TOWERJIT_MPI_STALL_WARNING=0 is not a time"));
  }
}
