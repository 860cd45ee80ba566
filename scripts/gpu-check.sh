#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds towerjit, runs the `gpu` tests (ctest -L gpu) and the
# GPU benchmark (towerjit_gpu_bench), times the three training steps of the cost model (mlp
# b4096, cnn b512, resnet b512: docs/performance.md) next to PyTorch eager and torch.compile on
# this GPU with the model's prediction beside each, and prints the tables last. Where there is
# no GPU it says so and exits 0 without building anything. See docs/cuda.md. Made to finish
# within 10 minutes on a 16-core machine: the predictions run on the emulator in the background
# while the GPU is measured.
#
#   scripts/gpu-check.sh [--build-dir DIR] [--no-build] [--jobs N] [--bench-args "ARGS"] [--no-steps]
#                        [--no-predict]
#
#   --build-dir DIR   the CMake build directory (default: build-gpu); an existing, already
#                     built tree (say one copied from a machine without a GPU) works too
#   --no-build        use DIR as it is: configure and build nothing
#   --jobs N          parallel build jobs (default: the number of CPUs)
#   --bench-args ARGS passed to towerjit_gpu_bench (e.g. "--repeat 50 --batch 4096")
#   --no-steps        skip the training steps (predicted, measured, PyTorch)
#   --no-predict      take the predictions from DIR/gpu-check/predict-W.txt, made elsewhere
#                     (towerjit_bench --gpu-model h200 --workload W --top 8 on the emulated GPU)
#
# The whole project builds, the LLVM CPU JIT included (the GPU tests compare against the CPU
# backend; CMake requires LLVM 19, there is no switch to leave it out, so a machine without it
# is told so before the build and can take a tree built elsewhere with --no-build); only the
# GPU targets and what they link are built. Results (the ctest log, the benchmark's JSON lines,
# the steps' files, the tables) are kept in DIR/gpu-check/.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build-gpu
do_build=1
jobs=$(nproc 2>/dev/null || echo 2)
test_jobs=$(( jobs < 8 ? jobs : 8 ))
bench_args=""
steps=1
predict=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --bench-args) bench_args="$2"; shift 2 ;;
    --no-steps) steps=0; shift ;;
    --no-predict) predict=0; shift ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# A quick look before a long build: no NVIDIA driver library, no GPU.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' && [[ ! -e /proc/driver/nvidia/version ]] &&
   ! command -v nvidia-smi > /dev/null; then
  echo "gpu-check: no CUDA device here (no NVIDIA driver: libcuda.so.1 is not installed); nothing to check."
  echo "gpu-check: run this on a machine with an NVIDIA GPU and its driver."
  exit 0
fi

if [[ $do_build -eq 1 ]]; then
  # CMake's find_package(LLVM 19.1 REQUIRED) would stop deep in the configure: say it first.
  if [[ ! -d /usr/lib/llvm-19/lib/cmake/llvm ]] && ! command -v llvm-config-19 > /dev/null; then
    echo "gpu-check: LLVM 19 is not installed here, and the build needs it (the CPU JIT, which the GPU tests" >&2
    echo "gpu-check: compare against): install llvm-19-dev (scripts/install-deps.sh), or build on a machine" >&2
    echo "gpu-check: that has it, copy the source and build trees to the same paths and run with --no-build." >&2
    exit 1
  fi
  echo "gpu-check: building in $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null || exit 1
  cmake --build "$build" -j "$jobs" --target towerjit_gpu_tests towerjit_gpu_bench towerjit_bench \
    towerjit_cuda_emulator || exit 1
fi
tests_bin="$build/tests_gpu/towerjit_gpu_tests"
bench_bin="$build/bench/towerjit_gpu_bench"
steps_bin="$build/bench/towerjit_bench"
for f in "$tests_bin" "$bench_bin" "$steps_bin"; do
  [[ -x "$f" ]] || { echo "gpu-check: $f is missing; build it (drop --no-build)" >&2; exit 1; }
done

# The binaries decide: they load the driver themselves and say why there is no device.
probe=$("$tests_bin" "no test has this name" 2>&1); probe_rc=$?
if [[ $probe_rc -eq 77 ]]; then
  echo "gpu-check: ${probe#SKIPPED: }"
  echo "gpu-check: nothing to check on this machine."
  exit 0
fi

out="$build/gpu-check"
mkdir -p "$out"

# The cost model's GPU: this one where the table has it, else the H200 (said in the table).
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu_name" in
  *H200*) model=h200 ;;
  *A100*) model=a100 ;;
  *) model=h200 ;;
esac
# The predictions run on the emulated GPU, on the CPU, while the GPU is measured below; with
# --no-predict, those already in DIR/gpu-check are used (made where the tree was built).
predict_pids=()
if [[ $steps -eq 1 && $predict -eq 1 ]]; then
  echo "gpu-check: predicting the three steps on the emulated GPU as an $model (background; $out/predict-*.txt)"
  for w in mlp cnn resnet; do
    TOWERJIT_CUDA=emulator timeout 420 "$steps_bin" --gpu-model "$model" --workload "$w" --top 8 \
      > "$out/predict-$w.txt" 2>&1 &
    predict_pids+=($!)
  done
fi

# The steps first: each run is short and bounded, the figures the table is for.
if [[ $steps -eq 1 ]]; then
  echo "gpu-check: timing the three steps on this GPU (towerjit: $out/measure.jsonl; PyTorch: $out/torch.jsonl)"
  : > "$out/measure.jsonl"
  # Each step in f32 (the default), under the bf16 precision policy, and with TF32 products
  # (TOWERJIT_ALLOW_TF32=on).
  for mode in "" "--precision bf16" "--tf32"; do
    for w in mlp cnn resnet; do
      # shellcheck disable=SC2086
      env -u TOWERJIT_CUDA timeout 60 "$steps_bin" --gpu-model "$model" --workload "$w" --measure 20 $mode \
        >> "$out/measure.jsonl" 2>> "$out/measure.log" || echo "gpu-check: towerjit $w step ${mode:-f32} failed (measure.log)"
    done
  done
  # The convolutions without cuDNN: towerjit's own implicit GEMMs (TOWERJIT_CUDNN=off).
  for w in cnn resnet; do
    env -u TOWERJIT_CUDA TOWERJIT_CUDNN=off timeout 60 "$steps_bin" --gpu-model "$model" --workload "$w" --measure 20 \
      >> "$out/measure.jsonl" 2>> "$out/measure.log" || echo "gpu-check: towerjit $w step without cuDNN failed (measure.log)"
  done
  # The convolutions on cuDNN's algorithms alone, the implicit GEMM not timed beside them
  # (TOWERJIT_CONV_IMPLICIT_GEMM=off), against the f32 steps above that chose per pass.
  for w in cnn resnet; do
    env -u TOWERJIT_CUDA TOWERJIT_CONV_IMPLICIT_GEMM=off timeout 60 "$steps_bin" --gpu-model "$model" --workload "$w" \
      --measure 20 >> "$out/measure.jsonl" 2>> "$out/measure.log" || echo "gpu-check: towerjit $w step on cuDNN alone failed (measure.log)"
  done
  # fit() over a dataset in host memory, each batch copied at its step and prefetched.
  : > "$out/fit.jsonl"
  for w in mlp cnn resnet; do
    env -u TOWERJIT_CUDA timeout 60 "$steps_bin" --gpu-model "$model" --workload "$w" --measure-fit 20 \
      >> "$out/fit.jsonl" 2>> "$out/measure.log" || echo "gpu-check: towerjit $w fit() failed (measure.log)"
  done
  python=$(command -v python3 || command -v python)
  if [[ -n "$python" ]]; then
    # Eager for the three models first (batch on the GPU, then from host memory), then
    # torch.compile (its compiles take most of the time).
    timeout 150 "$python" bench/torch_gpu_baseline.py --steps 20 --warmup 5 > "$out/torch.jsonl" 2> "$out/torch.log" ||
      echo "gpu-check: PyTorch's steps stopped early (torch.log)"
  fi
fi

# The real GPU's entries (label `gpu`; their emulated twins ran where the tree was built), several
# processes at once on the one GPU, each with a time limit.
echo "gpu-check: running the gpu tests (log: $out/ctest.log)"
(cd "$build/tests_gpu" && timeout 300 ctest -L '^gpu$' -j "$test_jobs" --timeout 120 --output-on-failure) 2>&1 |
  tee "$out/ctest.log"
tests_rc=${PIPESTATUS[0]}
passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$out/ctest.log")
failed=$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Failed|Exception|Timeout)|Test +#[0-9]+: .* (SEGFAULT|Child aborted)' "$out/ctest.log")
skipped=$(grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped' "$out/ctest.log")

echo "gpu-check: running the GPU benchmark (JSON lines: $out/bench.jsonl)"
# shellcheck disable=SC2086
timeout 120 "$bench_bin" $bench_args > "$out/bench.jsonl"
bench_rc=$?
cat "$out/bench.jsonl"
for pid in "${predict_pids[@]}"; do wait "$pid"; done

device=$(grep -o '"detail":"[^"]*' "$out/bench.jsonl" | head -1 | sed 's/.*; //')
{
  echo
  echo "towerjit gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC')${device:+, $device}"
  printf '%-36s %12s  %-8s %s\n' "check" "value" "unit" "detail"
  printf '%-36s %12s  %-8s %s\n' "------------------------------------" "------------" "--------" "------"
  printf '%-36s %12s  %-8s %s\n' "gpu tests (ctest -L gpu)" "$passed" "passed" "$failed failed, $skipped skipped"
  while IFS= read -r line; do
    row=$(printf '%s\n' "$line" |
          sed -nE 's/^\{"name":"([^"]*)","value":([^,]*),"unit":"([^"]*)","detail":"(.*)"\}$/\1\t\2\t\3\t\4/p')
    [[ -n "$row" ]] || continue
    IFS=$'\t' read -r name value unit detail <<< "$row"
    printf '%-36s %12s  %-8s %s\n' "$name" "$value" "$unit" "${detail%%; *}"
  done < "$out/bench.jsonl"
  [[ $bench_rc -eq 0 ]] || printf '%-36s %12s  %-8s %s\n' "gpu benchmark" "FAILED" "" "exit code $bench_rc"
  if [[ $steps -eq 1 ]]; then
    echo
    echo "training steps, ms: the cost model ($model${gpu_name:+; this GPU: $gpu_name}) beside this GPU and PyTorch"
    python3 scripts/gpu_step_table.py "$out" 2>&1 || echo "(no python3: the step files are in $out)"
  fi
} | tee "$out/table.txt"

[[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
