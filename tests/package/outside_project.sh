#!/bin/sh
# towerjit used from a project of its own, exactly as the docs show it: run by ctest as
#   outside_project.sh <way> <towerjit source dir> <towerjit build dir>
# The program, the CMakeLists.txt files and the commands are the fenced blocks marked
# "<!-- tests/package: NAME -->" in docs/getting-started.md and docs/dsl.md; each command block
# runs as written, in a scratch directory that holds `build` (this build), `my_model/` and a HOME
# of its own (so "$HOME/.local" is a scratch prefix). Ways:
#   installed     cmake --install, find_package(towerjit), a plain g++ line against the prefix
#   subdirectory  add_subdirectory(towerjit) with tests, examples and benchmark OFF (builds the
#                 libraries again, without optimisation: tests/package/unoptimised_compiler.sh)
#   build_tree    docs/dsl.md's g++ line against this build, on docs/dsl.md's first program
set -u
way=$1 src=$2 build=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The fenced block after the marker "<!-- tests/package: $2 -->" in docs/$1.
block() {
  awk -v marker="<!-- tests/package: $2 -->" '
    $0 == marker { found = 1; next }
    found == 1 && /^```/ { found = 2; next }
    found == 2 && /^```/ { exit }
    found == 2 { print }' "$src/docs/$1"
}
# Writes block $2 of docs/$1 to $work/$3.
write_block() {
  mkdir -p "$(dirname "$work/$3")"
  block "$1" "$2" >"$work/$3"
  [ -s "$work/$3" ] || fail "docs/$1 has no block marked \"$2\""
}
# Runs block $2 of docs/$1 as a shell script in $work (each command echoed, the first failure
# ends it); its output goes to $work/out.
run_block() {
  write_block "$1" "$2" "commands.sh"
  echo "== docs/$1: $2"
  (cd "$work" && HOME="$work/home" sh -ex commands.sh) >"$work/out" 2>&1
  status=$?
  cat "$work/out"
  [ $status = 0 ] || fail "docs/$1 \"$2\" exited with $status"
}
# Every line of the run's output that starts with "loss" says the loss fell (the program exits
# non-zero otherwise); there must be $1 of them.
expect_losses() {
  n=$(grep -c '^loss [0-9.]* at step 1, [0-9.]* at step 20$' "$work/out")
  [ "$n" = "$1" ] || fail "expected $1 \"loss ... at step 20\" lines, found $n"
}

mkdir -p "$work/home"
ln -s "$build" "$work/build"
case $way in
installed)
  write_block getting-started.md my_model/main.cpp my_model/main.cpp
  write_block getting-started.md "my_model/CMakeLists.txt installed" my_model/CMakeLists.txt
  run_block getting-started.md install
  prefix=$work/home/.local
  for f in lib/libtowerjit_dsl.so lib/libtowerjit_jit.so lib/libtowerjit_runtime.so \
           lib/libtowerjit_cuda_emulator.so include/towerjit/towerjit.h include/towerjit/dsl/ops.def \
           lib/cmake/towerjit/towerjitConfig.cmake lib/cmake/towerjit/towerjitConfigVersion.cmake \
           lib/cmake/towerjit/towerjitTargets.cmake; do
    [ -f "$prefix/$f" ] || fail "the install has no $f"
  done
  # Only the public API is installed: every installed header is towerjit.h's or the opt-in
  # trace.h's or token_eval_hook.h's, directly or not (cmake/Install.cmake), and none of them
  # misses one it includes.
  inc=$prefix/include/towerjit
  ( cd "$inc" && g++ -std=c++20 -MM -I. towerjit.h runtime/report/trace.h runtime/towers/token_eval_hook.h ) >"$work/closure" 2>&1 ||
    { cat "$work/closure"; fail "an installed public header includes one that is not installed"; }
  tr ' \\' '\n\n' <"$work/closure" | grep -v -e '^$' -e ':$' -e '^/' | sed 's|^\./||' | sort -u >"$work/needed"
  ( cd "$inc" && find . -type f | sed 's|^\./||' | sort ) >"$work/installed"
  extra=$(comm -23 "$work/installed" "$work/needed")
  [ -z "$extra" ] || fail "the install has headers outside the public API (towerjit.h's closure): $extra"
  # A movable prefix: the package names no path of the build or the source.
  if grep -rlF -e "$build" -e "$src" "$prefix/lib/cmake"; then fail "the package names the build's paths"; fi
  run_block getting-started.md "build installed"
  expect_losses 2
  # The emulated GPU's library came from the prefix, not from the build.
  LD_DEBUG=files TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 "$work/my_model/build/my_model" gpu \
    >/dev/null 2>"$work/ld" || true
  grep -q "file=$prefix/lib/libtowerjit_cuda_emulator.so" "$work/ld" ||
    fail "TOWERJIT_CUDA=emulator did not load the installed libtowerjit_cuda_emulator.so"
  run_block getting-started.md "g++ installed"
  expect_losses 1 ;;
subdirectory)
  write_block getting-started.md my_model/main.cpp my_model/main.cpp
  write_block getting-started.md "my_model/CMakeLists.txt subdirectory" my_model/CMakeLists.txt
  ln -s "$src" "$work/my_model/towerjit"
  # The docs' commands as written; CMake takes its compiler launcher from the environment.
  export CMAKE_CXX_COMPILER_LAUNCHER="$src/tests/package/unoptimised_compiler.sh"
  run_block getting-started.md "build subdirectory"
  unset CMAKE_CXX_COMPILER_LAUNCHER
  expect_losses 2
  # Nothing but the libraries was configured, and Catch2 was never looked for.
  for dir in tests tests_gpu examples bench; do
    [ ! -e "$work/my_model/build/towerjit/$dir" ] || fail "add_subdirectory configured towerjit's $dir/"
  done
  if grep -q '^Catch2_DIR' "$work/my_model/build/CMakeCache.txt"; then fail "add_subdirectory looked for Catch2"; fi ;;
build_tree)
  # The repository's layout (its headers, `build`) around docs/dsl.md's first program.
  for dir in dsl jit runtime include; do ln -s "$src/$dir" "$work/$dir"; done
  write_block dsl.md "dsl prog.cpp" prog.cpp
  run_block dsl.md "dsl build-tree link"
  # The reference interpreter's lines are the page's (the CPU JIT's last digits may vary).
  block dsl.md "dsl prog output" | grep -v "CPU JIT" >"$work/expected"
  grep -v "CPU JIT" "$work/out" | grep -v '^+ ' >"$work/printed"
  diff "$work/expected" "$work/printed" || fail "docs/dsl.md's program printed other than the page shows" ;;
*) fail "unknown way \"$way\"" ;;
esac
echo "PASS: $way"
