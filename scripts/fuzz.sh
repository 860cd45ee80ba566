#!/usr/bin/env bash
# Runs each libFuzzer target of a fuzz build for a while (`make fuzz`, docs/fuzzing.md) and
# fails on any finding. Usage: scripts/fuzz.sh <build dir> <seconds per target> <target>...
#
# Each target starts from its committed corpus and regression inputs (fuzz/corpus/<target>/,
# fuzz/regressions/<target>/) and grows a working corpus under <build dir>/fuzz-corpus/<target>,
# so the committed seeds stay small. A crash, leak, timeout or sanitizer report is written to
# <build dir>/fuzz-findings/<target>/; keep it in fuzz/regressions/<target>/ once it is fixed.
set -uo pipefail

build=$1 seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
failed=()
summary=()
for target in "$@"; do
  exe="$build/fuzz/fuzz_$target"
  corpus="$build/fuzz-corpus/$target" findings="$build/fuzz-findings/$target"
  mkdir -p "$corpus" "$findings"
  seeds=("$root/fuzz/corpus/$target")
  [[ -d "$root/fuzz/regressions/$target" ]] && seeds+=("$root/fuzz/regressions/$target")
  # The graph builder's inputs are short call sequences, and one run compiles a program (slow
  # under load): short inputs, a generous timeout.
  extra=()
  [[ $target == graph_builder ]] && extra=(-max_len=160)
  log="$build/fuzz-findings/$target.log"
  echo "fuzz: $target for ${seconds}s (log: $log)"
  "$exe" "$corpus" "${seeds[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
         -artifact_prefix="$findings/" -print_final_stats=1 "${extra[@]}" > "$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  summary+=("$target: ${execs:-?} executions, ${cov:-cov: ?} edges, rc $rc")
  if [[ $rc -ne 0 ]]; then
    failed+=("$target")
    tail -n 40 "$log"
  fi
done
printf 'fuzz: %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in ${failed[*]}: see $build/fuzz-findings/" >&2
  exit 1
fi
