#!/bin/sh
# An exported model checked by ONNX's own tools (run by ctest as
#   onnx_runtime_check.sh <path to onnx_driver> <mlp|cnn|resnet|ops>):
# onnx_driver trains and exports the model (tests/onnx/programs/onnx_driver.cpp), then
# onnx_runtime_check.py runs onnx.checker and ONNX Runtime on it and compares with towerjit.
# Skipped (exit 77) where python3, numpy, onnx or onnxruntime is absent (.ci/run installs
# them), or where towerjit was built without ONNX's schema (scripts/install-deps.sh installs it).
set -u
driver=$1
what=$2
here=$(dirname "$0")
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-onnx.XXXXXX")
trap 'rm -rf "$work"' EXIT
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
for package in numpy onnx onnxruntime; do
  python3 -c "import $package" 2>/dev/null ||
    { echo "SKIP: the Python package $package is not installed (pip install onnx onnxruntime)"; exit 77; }
done
"$driver" "$what" "$work"
status=$?
[ $status -eq 77 ] && exit 77  # built without ONNX's schema: the driver said so
[ $status -eq 0 ] || { echo "FAIL: onnx_driver $what failed"; exit 1; }
python3 "$here/onnx_runtime_check.py" "$work"
