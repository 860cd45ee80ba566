#!/usr/bin/env bash
# Runs the test suite of a sanitized build (docs/sanitizers.md):
#   scripts/sanitizers/run-tests.sh asan <build dir>   the whole ctest suite but `package`
#   scripts/sanitizers/run-tests.sh tsan <build dir>   the towers, runtime, pipeline and async tests
# Later arguments go to ctest (-R NAME to run fewer).
# Every sanitized process writes its reports under <build dir>/sanitizer-logs/ instead of its
# stderr, so a report fails the run even where a test expects its program to fail (the CLI
# cases that check an error exit) or where the process is a child of mpirun or of a script.
set -euo pipefail
kind=$1
build=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
logs=$build/sanitizer-logs
rm -rf "$logs" "$logs-tracer-faults" "$logs-interrupted"
mkdir -p "$logs"
jobs=${JOBS:-$(nproc)}

case $kind in
asan)
  # exitcode 23 and not 1: a report never reads as a program's expected error exit. Both option
  # sets carry the same log_path and exitcode: in a combined build either may be the one read.
  # UBSan prints to stderr whatever log_path says, so it aborts and ASan handles the abort: an
  # ASan report of it (the __ubsan_handle_* frame, the line) lands in the logs too.
  # log_exe_name: each report's file is named by its program as well as its pid.
  common="log_path=$logs/asan:log_exe_name=1:exitcode=23"
  # intercept_tls_get_addr=0: GCC 12's LeakSanitizer tracks dlopen'ed libraries' thread-local
  # blocks through __tls_get_addr and, on this glibc, can record a bogus one ("DTLS 13 at
  # 0x3241-0x2000004343"), which its tracer then faults on at exit ("Tracer caught signal 11"),
  # every time in the emulated-GPU case that hit it (docs/sanitizers.md). Without the
  # interception those blocks are not scanned as roots: a leak check can only report more, never
  # hide a leak.
  export ASAN_OPTIONS="$common:handle_abort=1:detect_leaks=1:intercept_tls_get_addr=0:check_initialization_order=1:strict_init_order=1"
  export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="$common:print_stacktrace=1:halt_on_error=1:abort_on_error=1"
  # `package` rebuilds towerjit from scratch, unsanitized (a project of its own, as a user's is):
  # it tests CMake packaging, which the normal `make test` already covers. `unsanitized`: entries
  # whose towerjit code other entries run here, the rest being Python (tests/CMakeLists.txt).
  # ASAN_SKIP_LABELS (a regex of more labels, say `mpi`) leaves more out: .ci/run's budget.
  select=(-LE "^(package|unsanitized${ASAN_SKIP_LABELS:+|$ASAN_SKIP_LABELS})\$")
  ;;
tsan)
  export TSAN_OPTIONS="log_path=$logs/tsan:log_exe_name=1:exitcode=66:halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tsan.supp"
  # The Catch cases tagged [towers], [runtime], [pipeline] or [threads] (the thread pool, sync and
  # async trainers, the input pipeline, the world, the emulated driver called from many threads),
  # and the example's cases that run async towers or the pipeline's threads. Not `mpi`: not tried under TSan (docs/sanitizers.md).
  # (Catch2 exits with the number of names it listed.)
  names=$("$build/tests/towerjit_tests" --list-test-names-only "[towers],[runtime],[pipeline],[threads]" || true)
  names=$(printf '%s\n' "$names" | sed '/^$/d')
  [ -n "$names" ] || { echo "towerjit: tsan: no test matches the tags" >&2; exit 1; }
  regex=$(printf '%s\n' "$names" "fashion_mnist example: async_checkpoints_named_by_step" \
            "fashion_mnist example: one_and_two_towers_same_curve" |
          sed 's/[][\.*^$?+(){}|]/\\&/g; s/.*/^&$/' | paste -sd '|')
  select=(-R "$regex")
  ;;
*)
  echo "usage: $0 asan|tsan <build dir>" >&2
  exit 2
  ;;
esac

status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" "${select[@]}" "$@") || status=$?

# LeakSanitizer's own tracer sometimes crashes while it stops the world at a process's exit
# ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error", no SUMMARY): a
# fault of the leak checker, which then could not look, not a leak it found. Seen twice, each in
# one emulated-GPU case of a whole ASan run. When every failed test left exactly such a report
# and nothing else failed, those tests run once more and decide; any other report, or the same
# fault again, still fails the run.
tracer_fault() {
  grep -q 'LeakSanitizer has encountered a fatal error' "$1" && grep -q 'Tracer caught signal' "$1" &&
    ! grep -q '^SUMMARY: ' "$1"
}
failed_list=$build/Testing/Temporary/LastTestsFailed.log
if [ "$kind" = asan ] && [ $status -ne 0 ] && [ -f "$failed_list" ] && compgen -G "$logs/*" >/dev/null; then
  faults=0 others=0
  for f in "$logs"/*; do if tracer_fault "$f"; then faults=$((faults + 1)); else others=$((others + 1)); fi; done
  if [ $others = 0 ] && [ "$faults" = "$(wc -l <"$failed_list")" ]; then
    mkdir -p "$logs-tracer-faults" && mv "$logs"/* "$logs-tracer-faults"/
    echo "towerjit: asan: LeakSanitizer's tracer crashed in $faults test(s) (reports kept in $logs-tracer-faults); once more:"
    status=0
    (cd "$build" && ctest --output-on-failure --rerun-failed) || status=$?
  fi
fi

# A process SIGKILLed while LeakSanitizer looked at its exit (the crash-safety test kills its
# children at random times, and one may be exiting) leaves a report of nothing but "Unable to get
# registers from thread N." lines: the tracer found the threads gone, so the check never ran. That
# is no finding; it is kept aside and said. Any other line, or a SUMMARY, is still a report. The
# lines start "==PID==", or "==PROGRAM==PID==" where the log names its program
# ("==towerjit_fault_child==23295==Unable to get registers from thread 23288.").
# The kill can come earlier still, after the sanitizer opened its log and before its first byte:
# an empty file (CI, 2026-12-06, a towerjit_fault_child of the crash-safety test, every test
# passed). No finding can be read from it; it is kept aside and said too.
interrupted_leak_check() {
  [ ! -s "$1" ] && return 0
  grep -q 'Unable to get registers from thread' "$1" && ! grep -q '^SUMMARY: ' "$1" &&
    ! grep -v -q -E '^(==([A-Za-z0-9_.+-]+==)?[0-9]+==Unable to get registers from thread [0-9]+\.)?$' "$1"
}
if [ "$kind" = asan ] && compgen -G "$logs/*" >/dev/null; then
  for f in "$logs"/*; do
    if interrupted_leak_check "$f"; then
      mkdir -p "$logs-interrupted" && mv "$f" "$logs-interrupted"/
      echo "towerjit: asan: a report cut short by its process's end, not a finding: $logs-interrupted/$(basename "$f")"
    fi
  done
fi

if compgen -G "$logs/*" >/dev/null; then
  echo "towerjit: $kind: sanitizer reports (from $logs):"
  for f in "$logs"/*; do
    echo "=== $f"
    cat "$f"
    # A process ended while it wrote its report (mpirun's abort, a test's SIGKILL) leaves no summary.
    grep -q '^SUMMARY: ' "$f" || echo "(no SUMMARY line: the process was ended while it wrote this report)"
  done
  status=1
fi
exit $status
