// The CPU compiler turns LLVM IR text into callable native code: results, external symbols,
// coexisting modules, and the errors a broken module gives.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "dsl/error.h"
#include "jit/cpu/cpu_compiler.h"
#include "jit/cpu/cpu_isa.h"
#include "jit/cpu/llvm_codegen.h"
#include "runtime/cpu/blas.h"
#include "tests/jit/cpu_test_env.h"

namespace cpujit = towerjit::cpujit;
using towerjit::test::CacheSandbox;
using towerjit::test::kSaxpyIR;
using towerjit::test::SaxpyFn;
using towerjit::test::ScopedEnv;
using towerjit::test::TempDir;

namespace {

// Calls saxpy on x = i, y = 2i, a = 0.5 (all exact in float) and checks y = 2.5i, plus a
// guard element past the end that must stay untouched.
void check_saxpy(SaxpyFn fn, long n) {
  std::vector<float> x(n + 1), y(n + 1);
  for (long i = 0; i <= n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 2.0f * static_cast<float>(i);
  }
  fn(x.data(), y.data(), 0.5f, n);
  for (long i = 0; i < n; ++i) {
    INFO("n = " << n << ", i = " << i);
    REQUIRE(y[i] == 2.5f * static_cast<float>(i));
  }
  REQUIRE(y[n] == 2.0f * static_cast<float>(n));
}

// A runtime helper the executable does not export: reachable only via define_host_symbol.
float towerjit_test_triple(float v) { return 3.0f * v; }

}  // namespace

TEST_CASE("cpu compiler: saxpy runs correctly at n = 1, 7, 127", "[cpu]") {
  CacheSandbox sandbox;
  auto module = cpujit::compile(kSaxpyIR, "saxpy_test");
  auto fn = reinterpret_cast<SaxpyFn>(module->lookup("saxpy"));
  for (long n : {0L, 1L, 7L, 127L, 1000L}) check_saxpy(fn, n);
  CHECK(module->symbols() == std::vector<std::string>{"saxpy"});
  CHECK(module->name() == "saxpy_test");
}

// The test binary does not link OpenBLAS (it would load before main, with its core type chosen
// before TOWERJIT_CPU_ISA could say): the BLAS towerjit loads is made visible to kernels.
TEST_CASE("cpu compiler: calls to libm and OpenBLAS resolve", "[cpu]") {
  CacheSandbox sandbox;
  using Sdot = float (*)(int, const float*, int, const float*, int);
  auto sdot = reinterpret_cast<Sdot>(::dlsym(cpujit::blas().handle, "cblas_sdot"));
  REQUIRE(sdot != nullptr);
  cpujit::define_host_symbol("cblas_sdot", reinterpret_cast<void*>(sdot));
  auto module = cpujit::compile(R"(
declare float @expf(float)
declare float @cblas_sdot(i32, ptr, i32, ptr, i32)

define float @call_exp(float %x) {
  %r = call float @expf(float %x)
  ret float %r
}

define float @dot(ptr %x, ptr %y, i32 %n) {
  %r = call float @cblas_sdot(i32 %n, ptr %x, i32 1, ptr %y, i32 1)
  ret float %r
}
)",
                             "externals");
  auto call_exp = reinterpret_cast<float (*)(float)>(module->lookup("call_exp"));
  CHECK(call_exp(1.5f) == std::exp(1.5f));

  auto dot = reinterpret_cast<float (*)(const float*, const float*, int)>(module->lookup("dot"));
  std::vector<float> x(33), y(33);
  for (int i = 0; i < 33; ++i) x[i] = 0.25f * i, y[i] = 1.0f - 0.5f * i;
  CHECK(dot(x.data(), y.data(), 33) == sdot(33, x.data(), 1, y.data(), 1));
}

TEST_CASE("cpu compiler: define_host_symbol reaches helpers the process does not export",
          "[cpu]") {
  CacheSandbox sandbox;
  cpujit::define_host_symbol("towerjit_test_triple", reinterpret_cast<void*>(&towerjit_test_triple));
  // Registering the same address again is harmless; a different one is our bug.
  cpujit::define_host_symbol("towerjit_test_triple", reinterpret_cast<void*>(&towerjit_test_triple));
  CHECK_THROWS_AS(
      cpujit::define_host_symbol("towerjit_test_triple", reinterpret_cast<void*>(&check_saxpy)),
      towerjit::Error);
  auto module = cpujit::compile(R"(
declare float @towerjit_test_triple(float)
define float @f(float %x) {
  %r = call float @towerjit_test_triple(float %x)
  ret float %r
}
)",
                             "host_symbol");
  CHECK(reinterpret_cast<float (*)(float)>(module->lookup("f"))(2.0f) == 6.0f);
}

TEST_CASE("cpu compiler: modules defining the same symbol coexist", "[cpu]") {
  CacheSandbox sandbox;
  auto make = [](int value) {
    return "define i32 @kernel() {\n  ret i32 " + std::to_string(value) + "\n}\n";
  };
  auto first = cpujit::compile(make(1), "same_name");
  auto second = cpujit::compile(make(2), "same_name");
  auto f1 = reinterpret_cast<int (*)()>(first->lookup("kernel"));
  auto f2 = reinterpret_cast<int (*)()>(second->lookup("kernel"));
  CHECK(f1() == 1);
  CHECK(f2() == 2);
  second.reset();  // freeing one module leaves the other's code in place
  CHECK(f1() == 1);
}

TEST_CASE("cpu compiler: looking up a missing symbol names the module and what it has",
          "[cpu]") {
  CacheSandbox sandbox;
  auto module = cpujit::compile(kSaxpyIR, "lookup_missing");
  try {
    module->lookup("sgemm");
    FAIL("lookup of a missing symbol did not throw");
  } catch (const towerjit::Error& e) {
    std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("lookup_missing") && Catch::Contains("\"sgemm\"") &&
                            Catch::Contains("saxpy"));
  }
}

namespace {

// Compiles `ir`, expects towerjit::Error, and checks the message names the module, a dumped
// .ll file under `dump_dir` holding the IR, and LLVM's own words.
void expect_compile_error(const std::string& ir, const std::string& module,
                          const std::string& dump_dir, const std::string& llvm_words) {
  try {
    cpujit::compile(ir, module);
    FAIL("compile of broken IR did not throw");
  } catch (const towerjit::Error& e) {
    std::string message = e.what();
    INFO(message);
    std::string path = (std::filesystem::path(dump_dir) / (module + ".ll")).string();
    CHECK_THAT(message, Catch::Contains("internal error") && Catch::Contains(module) &&
                            Catch::Contains(path) && Catch::Contains(llvm_words));
    REQUIRE(std::filesystem::exists(path));
  }
}

}  // namespace

TEST_CASE("cpu compiler: IR that fails to parse is an internal error with the .ll path",
          "[cpu]") {
  CacheSandbox sandbox;  // no TOWERJIT_DUMP: the IR goes next to the cache
  expect_compile_error("define void @f( {\n", "broken_parse", sandbox.dir.path(), "expected");
}

TEST_CASE("cpu compiler: IR that fails to verify is an internal error with the .ll path",
          "[cpu]") {
  CacheSandbox sandbox;
  TempDir dump;
  ScopedEnv dump_env("TOWERJIT_DUMP", dump.path());
  expect_compile_error(R"(
define i32 @f(i32 %a) {
entry:
  %x = add i32 %y, 1
  %y = add i32 %a, 1
  ret i32 %x
}
)",
                       "broken_verify", dump.path(), "does not dominate");
}

TEST_CASE("cpu compiler: an unresolvable external is reported when the module is compiled",
          "[cpu]") {
  CacheSandbox sandbox;
  expect_compile_error(R"(
declare void @towerjit_no_such_helper()
define void @f() {
  call void @towerjit_no_such_helper()
  ret void
}
)",
                       "unresolved", sandbox.dir.path(), "towerjit_no_such_helper");
}

TEST_CASE("cpu compiler: TOWERJIT_DUMP receives every module's IR", "[cpu]") {
  CacheSandbox sandbox;
  TempDir dump;
  ScopedEnv dump_env("TOWERJIT_DUMP", dump.path());
  cpujit::compile(kSaxpyIR, "dumped/saxpy");  // '/' is not file-name-safe: becomes '_'
  CHECK(std::filesystem::exists(std::filesystem::path(dump.path()) / "dumped_saxpy.ll"));
}

TEST_CASE("cpu compiler: the target description names the triple and the CPU", "[cpu]") {
  // Its features: the level test below (a capped level names a generic CPU and no features).
  std::string target = cpujit::target_description();
  CHECK_THAT(target, Catch::Contains(";cpu=") && Catch::Contains(";features="));
#if defined(__x86_64__)
  CHECK_THAT(target, Catch::StartsWith("x86_64"));
#endif
}

// TOWERJIT_CPU_ISA caps what the CPU code uses; ctest runs this at every level the CPU has.
TEST_CASE("cpu compiler: the CPU level caps the LLVM target and the OpenBLAS core", "[cpu][isa]") {
  const cpujit::CpuIsa level = cpujit::cpu_isa();
  const std::string target = cpujit::target_description();
  INFO("level " << cpujit::isa_name(level) << ", target " << target);
  if (cpujit::vector_level(level) < cpujit::vector_level(cpujit::widest_isa()))
    CHECK_THAT(target, Catch::Contains(level == cpujit::CpuIsa::avx2 ? ";cpu=x86-64-v3;" : ";cpu=x86-64;"));
  else
    CHECK_THAT(target, Catch::Contains(";features=+"));
  // Compiled for that target, a kernel still runs and computes.
  CacheSandbox sandbox;
  auto module = cpujit::compile(kSaxpyIR, "saxpy_at_level");
  auto saxpy = reinterpret_cast<SaxpyFn>(module->lookup("saxpy"));
  std::vector<float> x(37, 2.0f), y(37, 1.0f);
  saxpy(x.data(), y.data(), 3.0f, 37);
  CHECK(y[0] == 7.0f);
  CHECK(y[36] == 7.0f);
  // OpenBLAS runs the core type of the level (unless the user chose one: theirs wins).
  const std::string core = cpujit::blas().core;
  const char* asked = std::getenv("OPENBLAS_CORETYPE");  // set by towerjit unless by the user
  const char* want = cpujit::vector_level(level) == cpujit::CpuIsa::avx512 ? "skylakex" : level == cpujit::CpuIsa::avx2 ? "haswell" : "prescott";
  std::string lower_core;
  for (char c : core) lower_core += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  INFO("OpenBLAS core " << core << ", OPENBLAS_CORETYPE " << (asked ? asked : "unset"));
  if (asked && std::string(asked) == cpujit::openblas_core(level)) CHECK(lower_core == want);
}

TEST_CASE("cpu compiler: a CPU level the CPU lacks is an error naming its features", "[cpu]") {
  using cpujit::CpuIsa;
  CHECK(cpujit::checked_isa(CpuIsa::avx2, CpuIsa::avx512, "any") == CpuIsa::avx2);
  CHECK(cpujit::checked_isa(CpuIsa::baseline, CpuIsa::baseline, "any") == CpuIsa::baseline);
  CHECK_THROWS_WITH(cpujit::checked_isa(CpuIsa::avx512, CpuIsa::avx2, "AMD EPYC: sse2 avx2 fma"),
                    Catch::Contains("TOWERJIT_CPU_ISA=avx512 asks for AVX-512") &&
                        Catch::Contains("AMD EPYC: sse2 avx2 fma") &&
                        Catch::Contains("set TOWERJIT_CPU_ISA=avx2 or baseline"));
  CHECK_THROWS_WITH(cpujit::checked_isa(CpuIsa::avx512bf16, CpuIsa::avx512, "Xeon: sse2 avx2 fma avx512f avx512bw"),
                    Catch::Contains("TOWERJIT_CPU_ISA=avx512bf16 asks for AVX-512 with AVX512_BF16") &&
                        Catch::Contains("set TOWERJIT_CPU_ISA=avx512 or avx2 or baseline"));
  CHECK_THROWS_WITH(cpujit::checked_isa(CpuIsa::amx, CpuIsa::avx512bf16, "Zen 4: sse2 avx2 fma avx512f avx512bw avx512_bf16"),
                    Catch::Contains("TOWERJIT_CPU_ISA=amx asks for AMX-BF16 tiles the kernel supports") &&
                        Catch::Contains("set TOWERJIT_CPU_ISA=avx512bf16 or avx512 or avx2 or baseline"));
  CHECK_THROWS_WITH(cpujit::checked_isa(CpuIsa::avx2, CpuIsa::baseline, "old: sse2"),
                    Catch::Contains("asks for AVX2 and FMA") && Catch::Contains("TOWERJIT_CPU_ISA=baseline"));
  // A spelling the knob does not know, and the old TOWERJIT_DIRECT_CONV=avx2.
  {
    ScopedEnv bad("TOWERJIT_CPU_ISA", "avx3");
    CHECK_THROWS_WITH(cpujit::cpu_isa(), Catch::Contains("avx512, avx2 or baseline"));
  }
  ScopedEnv old("TOWERJIT_DIRECT_CONV", "avx2");
  CHECK_THROWS_WITH(towerjit::knobs::direct_conv(), Catch::Contains("TOWERJIT_CPU_ISA=avx2"));
}

TEST_CASE("cpu compiler: a module of many kernels is split over threads and every kernel still links and runs", "[cpu]") {
  // 23 functions, one calling libm and one a function in another part: each returns its index.
  std::string ir = "declare double @sqrt(double)\n";
  for (int i = 0; i < 23; ++i)
    ir += "define i32 @f" + std::to_string(i) + "() {\n  ret i32 " + std::to_string(i) + "\n}\n";
  ir += "define i32 @calls_f3() {\n  %v = call i32 @f3()\n  ret i32 %v\n}\n";
  ir += "define double @root(double %x) {\n  %r = call double @sqrt(double %x)\n  ret double %r\n}\n";
  const cpujit::ObjectCode split = cpujit::compile_ir_to_objects(ir, "many", 4);
  REQUIRE(split.error.empty());
  CHECK(split.objects.size() == 4);
  CHECK(cpujit::compile_ir_to_objects(ir, "many", 1).objects.size() == 1);

  auto module = cpujit::compile(ir, "many");
  for (int i = 0; i < 23; ++i) {
    auto* f = reinterpret_cast<int (*)()>(module->lookup("f" + std::to_string(i)));
    CHECK(f() == i);
  }
  CHECK(reinterpret_cast<int (*)()>(module->lookup("calls_f3"))() == 3);
  CHECK(reinterpret_cast<double (*)(double)>(module->lookup("root"))(2.25) == 1.5);
}
