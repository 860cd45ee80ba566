#!/usr/bin/env bash
# Installs the Debian packages towerjit builds with, and only those that are missing,
# so a second run on a ready machine takes well under a second.
set -euo pipefail

packages=(
  g++ cmake ninja-build make pkg-config
  llvm-19-dev libzstd-dev zlib1g-dev libedit-dev libxml2-dev libffi-dev
  libopenblas-dev librange-v3-dev catch2 libcli11-dev nlohmann-json3-dev libfmt-dev
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (runtime/report/tensorboard.cpp)
  libonnx-dev  # ONNX's schema, onnx.proto, compiled for export_onnx (runtime/interop/onnx_model.cpp)
  dataset-fashion-mnist
  libopenmpi-dev openmpi-bin
  slurm-wlm  # srun, slurmctld, slurmd and the PMIx plugin (slurm-wlm-basic-plugins), for tests/mpi/srun_cli.sh
)
# Only for `make bench` (scripts/install-deps.sh --bench): PyTorch, the baseline the benchmark
# compares against. Large, so `make test` and `make demo` do not install it.
bench_packages=(python3 python3-torch)
if [[ "${1:-}" == "--bench" ]]; then packages+=("${bench_packages[@]}"); fi
# Only for CI (--ci, .ci/run): pip, which installs TensorBoard's reader for
# tests/examples/tensorboard_reader.sh and ONNX's checker and ONNX Runtime for
# tests/onnx/onnx_runtime_check.sh (each skipped where its package is absent).
ci_packages=(python3 python3-pip)
if [[ "${1:-}" == "--ci" ]]; then packages+=("${ci_packages[@]}"); fi
# Only for `make fuzz` (--fuzz): clang 19, the one that matches the LLVM 19 the CPU JIT links,
# and its runtime libraries (libFuzzer, the sanitizers).
fuzz_packages=(clang-19 libclang-rt-19-dev)
if [[ "${1:-}" == "--fuzz" ]]; then packages+=("${fuzz_packages[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "towerjit: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
