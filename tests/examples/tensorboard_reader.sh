#!/bin/sh
# TensorBoard's reader on the event files of examples/fashion_mnist (run by ctest as
#   tensorboard_reader.sh <path to fashion_mnist>):
# a short run with --metrics and --tensorboard, then tensorboard_reader.py checks that
# EventAccumulator reads every metric at its step with its value, and survives a truncated last
# record; then the same for an async run, whose records also hold the staleness. Skipped
# (exit 77) where python3 or its tensorboard package is absent: .ci/run installs it.
set -u
bin=$1
here=$(dirname "$0")
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-tb.XXXXXX")
trap 'rm -rf "$work"' EXIT
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
python3 -c 'import tensorboard' 2>/dev/null ||
  { echo "SKIP: the Python package tensorboard is not installed (pip install tensorboard)"; exit 77; }
"$bin" --steps 24 --batch 64 --hidden 32 --log-every 1 --eval-every 10 --metrics "$work/m.jsonl" \
  --tensorboard "$work/tb" --histogram-every 10 >/dev/null || { echo "FAIL: the run failed"; exit 1; }
python3 "$here/tensorboard_reader.py" "$work/m.jsonl" "$work/tb" 10 || exit 1
# An async run: its lines and scalars also hold the staleness.
"$bin" --steps 24 --batch 64 --hidden 32 --log-every 1 --strategy async --metrics "$work/a.jsonl" \
  --tensorboard "$work/tb-async" >/dev/null || { echo "FAIL: the async run failed"; exit 1; }
grep -q '"staleness":' "$work/a.jsonl" || { echo "FAIL: no staleness in the async run's metrics"; exit 1; }
python3 "$here/tensorboard_reader.py" "$work/a.jsonl" "$work/tb-async"
