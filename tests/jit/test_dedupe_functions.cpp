// Functions equal but for their names are compiled once (jit/cpu/dedupe_functions.h): the pass
// on text, and compile() with it: every name callable and computing its own function, the
// duplicates sharing code, and the cache hit by a second compile.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "jit/cpu/cpu_compiler.h"
#include "jit/cpu/dedupe_functions.h"
#include "tests/jit/cpu_test_env.h"

namespace cpujit = towerjit::cpujit;
using towerjit::test::CacheSandbox;

namespace {

// y[i] = x[i] * k over n points, as the emitter writes a kernel (a comment line, then the
// definition up to a line "}").
std::string scale_function(const std::string& name, const std::string& k) {
  return "; " + name + ": y = x * " + k + "\n"
         "define void @" + name + "(ptr noalias %x, ptr noalias %y, i64 %n) {\n"
         "entry:\n"
         "  br label %head\n"
         "head:\n"
         "  %i = phi i64 [ 0, %entry ], [ %next, %body ]\n"
         "  %more = icmp slt i64 %i, %n\n"
         "  br i1 %more, label %body, label %done\n"
         "body:\n"
         "  %px = getelementptr inbounds float, ptr %x, i64 %i\n"
         "  %v = load float, ptr %px, align 4\n"
         "  %w = fmul float %v, " + k + "\n"
         "  %py = getelementptr inbounds float, ptr %y, i64 %i\n"
         "  store float %w, ptr %py, align 4\n"
         "  %next = add i64 %i, 1\n"
         "  br label %head\n"
         "done:\n"
         "  ret void\n"
         "}\n";
}

const std::string kModule = "; three kernels, two the same\n" + scale_function("double_a", "2.0") +
                            scale_function("triple", "3.0") + scale_function("double_b", "2.0");

using ScaleFn = void (*)(const float*, float*, long);

// Runs `symbol` over 127 points (an odd count) and checks y = x * k exactly.
bool scales_by(const cpujit::CompiledModule& module, const std::string& symbol, float k) {
  auto fn = reinterpret_cast<ScaleFn>(module.lookup(symbol));
  std::vector<float> x(127), y(127, -1.0f);
  for (int i = 0; i < 127; ++i) x[i] = 0.5f * static_cast<float>(i) - 20.0f;
  fn(x.data(), y.data(), 127);
  for (int i = 0; i < 127; ++i)
    if (y[i] != x[i] * k) return false;
  return true;
}

}  // namespace

TEST_CASE("dedupe_functions keeps one of functions equal but for their names", "[cpu]") {
  const cpujit::DedupedModule d = cpujit::dedupe_functions(kModule);
  CHECK(d.functions == 3);
  CHECK(d.distinct == 2);
  REQUIRE(d.aliases.size() == 1);
  CHECK(d.aliases[0] == std::pair<std::string, std::string>{"double_b", "double_a"});
  CHECK(d.text.find("define void @double_a(") != std::string::npos);
  CHECK(d.text.find("define void @triple(") != std::string::npos);
  CHECK(d.text.find("define void @double_b(") == std::string::npos);
  CHECK(d.text.find("; double_b: the same code as double_a") != std::string::npos);
}

TEST_CASE("dedupe_functions keeps functions that differ in a constant, and text with no definitions", "[cpu]") {
  const std::string two = scale_function("a", "2.0") + scale_function("b", "2.5");
  const cpujit::DedupedModule d = cpujit::dedupe_functions(two);
  CHECK(d.functions == 2);
  CHECK(d.distinct == 2);
  CHECK(d.aliases.empty());
  CHECK(d.text == two);
  const std::string none = "; nothing here\ndeclare float @llvm.exp.f32(float)\n";
  CHECK(cpujit::dedupe_functions(none).text == none);
  CHECK(cpujit::dedupe_functions("").text.empty());
}

TEST_CASE("a module with equal functions compiles each once, every name computing its own function", "[cpu]") {
  CacheSandbox sandbox;
  cpujit::CompileStats cold, warm;
  auto first = cpujit::compile(kModule, "dedupe_kernels", &cold);
  // One definition of the two doubles: both names find the same code.
  CHECK(first->symbols() == std::vector<std::string>{"double_a", "double_b", "triple"});
  CHECK(scales_by(*first, "double_a", 2.0f));
  CHECK(scales_by(*first, "double_b", 2.0f));
  CHECK(scales_by(*first, "triple", 3.0f));
  CHECK(first->lookup("double_a") == first->lookup("double_b"));
  first.reset();  // so the second compile reads the cache instead of sharing the live module
  auto second = cpujit::compile(kModule, "dedupe_kernels", &warm);
  CHECK_FALSE(cold.cache_hit);
  CHECK(warm.cache_hit);
  CHECK(scales_by(*second, "double_b", 2.0f));
  CHECK(scales_by(*second, "triple", 3.0f));
}
