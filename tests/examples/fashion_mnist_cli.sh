#!/bin/sh
# End-to-end checks of examples/fashion_mnist on the real data: run by ctest as
#   fashion_mnist_cli.sh <path to fashion_mnist> <case>
# Each case exits 0 when the example behaves as its docs say, and prints why otherwise.
set -u
bin=$1
case_name=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Runs the example expecting failure; its stderr must contain every later argument.
expect_error() {
  args=$1; shift
  # shellcheck disable=SC2086  # the flags are split on purpose
  if "$bin" $args >"$work/out" 2>"$work/err"; then fail "\"$args\" succeeded"; fi
  for text in "$@"; do
    grep -qF -- "$text" "$work/err" || { cat "$work/err"; fail "\"$args\": no \"$text\" in the message"; }
  done
}

# The "loss" of step $2 in metrics file $1, exactly as written.
loss_at() { grep "\"kind\":\"step\",\"step\":$2," "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

# Starts the example in the background, output in $1, pid in $pid. A shell starts background
# jobs with SIGINT ignored, and the example rightly leaves an ignored SIGINT alone: env puts
# the default back, as in a terminal.
start_in_background() {
  out=$1; shift
  env --default-signal=INT "$bin" "$@" >"$out" 2>&1 &
  pid=$!
}

# Waits (120 s at most) until file $1 holds the text $2.
wait_for() {
  tries=0
  while ! grep -qF -- "$2" "$1" 2>/dev/null; do
    tries=$((tries + 1)); [ $tries -le 1200 ] || return 1
    sleep 0.1
  done
}

small="--steps 24 --batch 64 --hidden 32 --log-every 1"
case $case_name in
resume_is_bitwise)
  "$bin" $small --checkpoint "$work/a" --metrics "$work/a.jsonl" >/dev/null || fail "uninterrupted run"
  "$bin" $small --steps 10 --checkpoint "$work/b" --metrics "$work/b.jsonl" >/dev/null || fail "first half"
  "$bin" $small --checkpoint "$work/b" --resume --metrics "$work/b.jsonl" >"$work/out" || fail "resumed run"
  grep -q "resumed at step 10" "$work/out" || fail "the resumed run does not say where it resumed"
  cmp "$work/a/ckpt-24.tjck" "$work/b/ckpt-24.tjck" || fail "the final checkpoints differ"
  # The resumed run continued the metrics file: one line per step, the same losses.
  [ "$(grep -c '"kind":"step"' "$work/b.jsonl")" = 24 ] || fail "the resumed metrics file should hold 24 steps"
  for step in 5 11 17 24; do
    [ "$(loss_at "$work/a.jsonl" $step)" = "$(loss_at "$work/b.jsonl" $step)" ] || fail "the loss of step $step differs"
  done ;;
async_checkpoints_named_by_step)
  # Two async towers apply twice a step; checkpoints are still named by the step, and a resume
  # continues the applies' count (the optimiser's global step).
  "$bin" $small --strategy async --steps 6 --checkpoint "$work/c" --checkpoint-every 3 >/dev/null || fail "first run"
  [ -f "$work/c/ckpt-6.tjck" ] && [ -f "$work/c/ckpt-3.tjck" ] || fail "no ckpt-3/ckpt-6: $(ls "$work/c")"
  [ ! -f "$work/c/ckpt-12.tjck" ] || fail "named by applies"
  "$bin" $small --strategy async --steps 10 --checkpoint "$work/c" --resume >"$work/out" || fail "resumed run"
  grep -q "resumed at step 6" "$work/out" || fail "the resumed run does not say step 6: $(cat "$work/out")"
  # 12 applies before the resume, 8 after: the checkpoint's metadata holds the count as text.
  LC_ALL=C grep -aq 'optimizer_applies........20' "$work/c/ckpt-10.tjck" || fail "ckpt-10 does not record 20 applies" ;;
async_max_staleness)
  # --max-staleness 0 over three async towers: none runs an apply ahead of the slowest; without
  # --strategy async the flag is refused.
  "$bin" $small --strategy async --towers cpu:0,cpu:1,cpu:2 --max-staleness 0 >"$work/out" 2>&1 || { cat "$work/out"; fail "run"; }
  grep -q "max_staleness=0" "$work/out" || { cat "$work/out"; fail "the strategy does not show the bound"; }
  grep -q "largest lead of a tower 0$" "$work/out" || { cat "$work/out"; fail "a tower ran ahead"; }
  "$bin" $small --max-staleness 1 >"$work/out" 2>&1; code=$?
  [ $code = 2 ] && grep -q "needs --strategy async" "$work/out" || { cat "$work/out"; fail "exit $code without async"; }
  expect_error "--strategy async --max-staleness -1" "--max-staleness: must be a whole number >= 0" ;;
lr_schedule_cosine_with_warmup)
  # --lr-schedule cosine --warmup-steps 5 over a 20-step run: step s (apply k = s - 1) logs
  # 0.001 * 0.5 * (1 + cos(pi k / 20)) * min(1, (k + 1) / 5).
  "$bin" $small --steps 20 --lr-schedule cosine --warmup-steps 5 --metrics "$work/m.jsonl" >/dev/null || fail "run"
  for step in 1 3 5 6 10 20; do
    lr=$(grep "\"kind\":\"step\",\"step\":$step," "$work/m.jsonl" | sed 's/.*"lr":\([^,]*\),.*/\1/')
    awk -v lr="$lr" -v s="$step" 'BEGIN { k = s - 1; w = (k + 1) / 5; if (w > 1) w = 1;
      want = 0.001 * 0.5 * (1 + cos(3.141592653589793 * k / 20)) * w; d = lr - want; if (d < 0) d = -d;
      exit !(lr != "" && d <= 1e-6 * want + 1e-12) }' || fail "step $step: lr $lr"
  done
  expect_error "--lr-schedule linear" "--lr-schedule" ;;
accumulate_is_the_larger_batch)
  # --batch 16 --accumulate 4 applies once per 64 examples, as --batch 64 does: the same curve.
  "$bin" $small --steps 8 --batch 64 --metrics "$work/big.jsonl" >/dev/null || fail "batch 64"
  "$bin" $small --steps 8 --batch 16 --accumulate 4 --metrics "$work/acc.jsonl" >"$work/out" || fail "accumulated"
  grep -q "batch 16 x 4 accumulated" "$work/out" || fail "the header does not say the accumulation"
  for step in 1 4 8; do
    a=$(loss_at "$work/big.jsonl" $step); b=$(loss_at "$work/acc.jsonl" $step)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * (a > 1 ? a : 1)) }' ||
      fail "step $step: loss $a with batch 64, $b accumulated"
  done ;;
check_numerics_names_the_op)
  # A learning rate that blows the MLP up: --check-numerics names the first op to overflow.
  expect_error "--steps 30 --batch 64 --hidden 32 --optimizer sgd --lr 1e6 --check-numerics" \
    "TOWERJIT_CHECK_NUMERICS:" "models.h:" ;;
check_numerics_on_the_emulated_gpu)
  # The same on a GPU tower (the emulated driver runs the CUDA kernels): the same op is named.
  "$bin" --steps 30 --batch 64 --hidden 32 --optimizer sgd --lr 1e6 --check-numerics >/dev/null 2>"$work/cpu.err" &&
    fail "the CPU run did not stop"
  TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=1 "$bin" --steps 30 --batch 64 --hidden 32 --optimizer sgd --lr 1e6 \
    --check-numerics --towers gpu:0 >/dev/null 2>"$work/gpu.err" && fail "the GPU run did not stop"
  cat "$work/gpu.err"
  grep -q "TOWERJIT_CHECK_NUMERICS: .* at examples/models.h:[0-9]*" "$work/gpu.err" || fail "the GPU run names no op"
  cpu_op=$(grep -o "TOWERJIT_CHECK_NUMERICS: [a-z_0-9]* at [^ ]*" "$work/cpu.err")
  gpu_op=$(grep -o "TOWERJIT_CHECK_NUMERICS: [a-z_0-9]* at [^ ]*" "$work/gpu.err")
  [ "$cpu_op" = "$gpu_op" ] || fail "CPU towers name '$cpu_op', the GPU tower '$gpu_op'" ;;
dump_writes_each_program_by_name)
  # --dump on CPU towers: every program's CUDA C, LLVM IR, kernel IR and index, named after it.
  "$bin" --model resnet --steps 2 --batch 16 --towers cpu:0,cpu:1 --eval-examples 64 --dump "$work/d" >/dev/null || fail "the run"
  for program in tower_step apply predict; do
    for ext in cu ll kir index.json; do
      [ -s "$work/d/$program.$ext" ] || fail "no $program.$ext in the dump: $(ls "$work/d")"
    done
  done
  grep -q '__global__' "$work/d/tower_step.cu" || fail "tower_step.cu holds no kernel"
  grep -q 'models.h:[0-9]*' "$work/d/tower_step.index.json" || fail "the index does not point at the model's lines"
  # A block used several times is told apart by its call stack (the example has line tables).
  grep -q 'models.h:[0-9]* examples::conv_bn_relu ← examples/models.h:[0-9]* examples::residual_block ← ' \
    "$work/d/tower_step.index.json" || fail "the index gives no call stack for the residual blocks' ops"
  grep -q '^//.* at examples/models.h:[0-9]* examples::conv_bn_relu ← ' "$work/d/tower_step.cu" ||
    fail "the CUDA kernels' headers give no call stack"
  if ls /usr/local/cuda/lib64/libnvrtc.so* >/dev/null 2>&1; then
    grep -q '.entry' "$work/d/tower_step.ptx" || fail "NVRTC is here, but tower_step.ptx holds no entry"
  fi ;;
one_and_two_towers_same_curve)
  "$bin" $small --towers cpu:0 --metrics "$work/one.jsonl" >/dev/null || fail "one tower"
  "$bin" $small --towers cpu:0,cpu:1 --metrics "$work/two.jsonl" >/dev/null || fail "two towers"
  for step in 1 12 24; do
    a=$(loss_at "$work/one.jsonl" $step); b=$(loss_at "$work/two.jsonl" $step)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * (a > 1 ? a : 1)) }' ||
      fail "step $step: loss $a on one tower, $b on two"
  done ;;
same_curve_at_every_cpu_level)
  # The CNN (convolutions, pools, matrix products) at every TOWERJIT_CPU_ISA level this CPU has:
  # 40 steps from one seed give losses within 1e-4 relative of the widest level's. Not bitwise:
  # the levels sum in other orders.
  cnn="--model cnn --steps 40 --batch 32 --log-every 1 --towers cpu:0 --eval-examples 512"
  "$bin" $cnn --metrics "$work/widest.jsonl" >/dev/null || fail "the widest level"
  for level in avx512 avx2 baseline; do
    if ! TOWERJIT_CPU_ISA=$level "$bin" $cnn --metrics "$work/$level.jsonl" >/dev/null 2>"$work/err"; then
      grep -q "which this CPU lacks" "$work/err" || { cat "$work/err"; fail "level $level"; }
      continue
    fi
    for step in $(seq 1 40); do
      a=$(loss_at "$work/widest.jsonl" $step); b=$(loss_at "$work/$level.jsonl" $step)
      awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4 * (a < 0 ? -a : a)) }' ||
        fail "step $step: loss $a at the widest level, $b at $level"
    done
  done ;;
gpu_towers_on_the_emulator_same_curve)
  # Two emulated GPUs (TOWERJIT_CUDA=emulator) train as two CPU towers do, within 1e-4 relative
  # at every one of 40 steps: the variables on the host, on the GPUs, one bucket per gradient,
  # and every buffer its own exact allocation (so the guard zones see a write past any of them).
  run="--steps 40 --batch 64 --optimizer momentum --lr 0.05 --seed 7 --log-every 1 --eval-examples 512"
  "$bin" $run --towers cpu:0,cpu:1 --metrics "$work/cpu.jsonl" >/dev/null || fail "CPU towers"
  for variant in "TOWERJIT_GPU_VARIABLES=off" "TOWERJIT_GPU_VARIABLES=on" "TOWERJIT_GPU_VARIABLES=on TOWERJIT_BUCKET_MB=0" \
                 "TOWERJIT_GPU_VARIABLES=on TOWERJIT_CUDA_CACHING=off"; do
    env $variant TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 "$bin" $run --towers gpu:0,gpu:1 \
      --metrics "$work/gpu.jsonl" >/dev/null 2>"$work/err" || { cat "$work/err"; fail "GPU towers, $variant"; }
    for step in $(seq 1 40); do
      a=$(loss_at "$work/cpu.jsonl" $step); b=$(loss_at "$work/gpu.jsonl" $step)
      awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-4 * (a < 0 ? -a : a)) }' ||
        fail "step $step, $variant: loss $a on CPU towers, $b on emulated GPUs"
    done
    rm -f "$work/gpu.jsonl"
  done ;;
async_gpu_towers_place_each_variable)
  # Async towers on emulated GPUs keep each variable on a GPU and apply it there (the seed's
  # rule, docs/strategies.md): one tower trains as with the variables in host memory, within
  # 1e-4 relative at each of 20 Adam steps; two towers on two GPUs train, checkpoint and resume.
  run="--steps 20 --batch 64 --hidden 32 --optimizer adam --lr 0.003 --seed 7 --log-every 1 --strategy async --eval-examples 512"
  TOWERJIT_CUDA=emulator TOWERJIT_GPU_VARIABLES=off "$bin" $run --towers gpu:0 --metrics "$work/host.jsonl" \
    >/dev/null 2>"$work/err" || { cat "$work/err"; fail "variables in host memory"; }
  TOWERJIT_CUDA=emulator "$bin" $run --towers gpu:0 --metrics "$work/placed.jsonl" >/dev/null 2>"$work/err" ||
    { cat "$work/err"; fail "placed variables"; }
  for step in $(seq 1 20); do
    a=$(loss_at "$work/host.jsonl" $step); b=$(loss_at "$work/placed.jsonl" $step)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-4 * (a < 0 ? -a : a)) }' ||
      fail "step $step: loss $a with the variables in host memory, $b placed on the GPU"
  done
  two="--batch 64 --hidden 32 --strategy async --towers gpu:0,gpu:1 --checkpoint $work/c --checkpoint-every 3"
  TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 "$bin" $two --steps 6 >/dev/null 2>"$work/err" ||
    { cat "$work/err"; fail "two GPUs"; }
  TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 "$bin" $two --steps 9 --resume >"$work/out" 2>"$work/err" ||
    { cat "$work/err"; fail "two GPUs, resumed"; }
  grep -q "resumed at step 6" "$work/out" || { cat "$work/out"; fail "the resumed run does not say where it resumed"; } ;;
cnn_on_the_emulated_gpu_with_and_without_cudnn)
  # The cnn (convolutions and pools) on one emulated GPU trains as on one CPU tower (batch 16,
  # evaluated on 512 test images: the emulator runs kernels on the host, and under ASan batch 128
  # and the whole test set took 7 minutes), within
  # 1e-4 relative at each of 3 steps: its convolutions through the emulator's cuDNN stand-in,
  # then through the fallback (TOWERJIT_CUDNN=off), which warns once; then with no workspace
  # allowed (TOWERJIT_CUDNN_WORKSPACE_MB=0), which passes over the algorithms that need one
  # and says so once.
  run="--model cnn --steps 3 --batch 16 --log-every 1 --seed 3 --eval-examples 512"
  "$bin" $run --towers cpu:0 --metrics "$work/cpu.jsonl" >/dev/null || fail "CPU tower"
  for variant in "TOWERJIT_CUDNN=on" "TOWERJIT_CUDNN=off" "TOWERJIT_CUDNN_WORKSPACE_MB=0"; do
    env $variant TOWERJIT_CUDA=emulator "$bin" $run --towers gpu:0 --metrics "$work/gpu.jsonl" >/dev/null \
      2>"$work/err" || { cat "$work/err"; fail "GPU tower, $variant"; }
    warnings=$(grep -c "cuDNN is not used for convolutions: TOWERJIT_CUDNN=off" "$work/err")
    [ "$variant" = "TOWERJIT_CUDNN=off" ] && want=1 || want=0
    [ "$warnings" = "$want" ] || { cat "$work/err"; fail "$variant: $warnings fallback warnings, expected $want"; }
    notes=$(grep -c "of workspace, more than the 0 bytes available (free device memory, or TOWERJIT_CUDNN_WORKSPACE_MB); an algorithm that fits is used instead (further cases are not reported)" "$work/err")
    [ "$variant" = "TOWERJIT_CUDNN_WORKSPACE_MB=0" ] && want=1 || want=0
    [ "$notes" = "$want" ] || { cat "$work/err"; fail "$variant: $notes workspace notes, expected $want"; }
    for step in 1 2 3; do
      a=$(loss_at "$work/cpu.jsonl" $step); b=$(loss_at "$work/gpu.jsonl" $step)
      awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-4 * (a < 0 ? -a : a)) }' ||
        fail "step $step, $variant: loss $a on a CPU tower, $b on the emulated GPU"
    done
    rm -f "$work/gpu.jsonl"
  done ;;
steps_alone_run_past_the_epochs)
  # --steps alone trains that many steps, past the default 3 epochs (10 batches each at batch
  # 6000); with --epochs too, steps the epochs cannot hold are refused, saying which to change.
  "$bin" --batch 6000 --hidden 16 --steps 35 --log-every 1 --metrics "$work/s.jsonl" >/dev/null || fail "run"
  [ "$(grep -c '"kind":"step"' "$work/s.jsonl")" = 35 ] || fail "not 35 steps"
  expect_error "--batch 6000 --hidden 16 --epochs 1 --steps 35" \
    "fit: max_steps 35 is more than the 10 steps that epochs = 1 holds (10 batches an epoch)" \
    "leave epochs unset to train 35 steps, or set epochs = 4" ;;
eval_every)
  # Evaluations every 10 steps and at the end (24), each step once.
  "$bin" $small --eval-every 10 --metrics "$work/e.jsonl" >/dev/null || fail "run"
  steps=$(grep '"kind":"eval"' "$work/e.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')
  [ "$steps" = "10 20 24 " ] || fail "evaluations at steps $steps, expected 10 20 24" ;;
plots_and_trace)
  "$bin" $small --metrics "$work/run.jsonl" --trace "$work/trace.json" --strategy async >/dev/null || fail "run"
  grep -q '"kind":"eval"' "$work/run.jsonl" || fail "no evaluation in the metrics"
  grep -q '<svg' "$work/run-loss.svg" && grep -q '<svg' "$work/run-accuracy.svg" || fail "no plots"
  grep -q '"name":"forward+backward"' "$work/trace.json" && grep -q '"name":"apply"' "$work/trace.json" ||
    fail "the trace lacks the towers' spans"
  tail -c 40 "$work/trace.json" | tr -d '\n' | grep -q '"displayTimeUnit":"ms"}$' || fail "the trace is not closed" ;;
missing_data)
  expect_error "--data $work/none" "data directory \"$work/none\" does not exist" "dataset-fashion-mnist" ;;
data_npz_missing)
  expect_error "--data-npz $work/none.npz" "\"$work/none.npz\" does not exist or is not a file; check the path" \
    "examples/fashion_mnist.cpp" ;;
data_npz_not_an_archive)
  # An IDX file where an .npz archive should be.
  expect_error "--data-npz /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz" \
    "is not an .npz file (no zip end record); write it with numpy.savez" ;;
unknown_device)
  expect_error "--towers cpu:0,tpu:1" "unknown device \"tpu:1\"" ;;
gpu_without_a_device)
  # Where the machine has an NVIDIA driver, GPU towers run: nothing to check here.
  if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then exit 0; fi
  expect_error "--towers gpu:0 --steps 1" "no CUDA device" "examples/fashion_mnist.cpp"
  # A GPU the machine lacks, on the emulated one (a machine of one GPU): the ordinals it has.
  TOWERJIT_CUDA=emulator expect_error "--towers gpu:0,gpu:3 --steps 1" \
    "no CUDA device gpu:3: this machine has 1 (gpu:0); pick one of those" "examples/fashion_mnist.cpp" ;;
more_towers_than_examples)
  expect_error "--towers cpu:0,cpu:1,cpu:2 --batch 2" "more towers than examples in a batch" ;;
negative_learning_rate)
  expect_error "--lr -1" "learning rate -1 must be finite and >= 0" "use e.g. 0.001 for Adam" "examples/fashion_mnist.cpp:" ;;
eval_on_the_first_examples)
  # --eval-examples N evaluates on the test set's first N: the accuracy is a count out of N
  # (300 here), and N = 10000, the whole set, gives what leaving the flag out gives.
  run="--steps 3 --batch 16 --hidden 8 --towers cpu:0 --log-every 1"
  "$bin" $run --eval-examples 300 --metrics "$work/300.jsonl" >/dev/null || fail "--eval-examples 300"
  acc=$(sed -n 's/.*"kind":"eval".*"test_accuracy":\([^,]*\),.*/\1/p' "$work/300.jsonl")
  awk -v a="$acc" 'BEGIN { c = a * 300; d = c - int(c + 0.5); exit !(a != "" && d < 1e-9 && d > -1e-9) }' ||
    fail "accuracy $acc is not a count out of 300"
  "$bin" $run --eval-examples 10000 --metrics "$work/all.jsonl" >/dev/null || fail "--eval-examples 10000"
  "$bin" $run --metrics "$work/default.jsonl" >/dev/null || fail "no --eval-examples"
  [ "$(grep '"kind":"eval"' "$work/all.jsonl")" = "$(grep '"kind":"eval"' "$work/default.jsonl")" ] ||
    fail "the whole test set, named, evaluates otherwise than by default" ;;
flags_out_of_range)
  # Each flag out of its range is refused before training, naming the flag, what its values
  # mean and the value given.
  expect_error "--accumulate 0" "--accumulate: must be a whole number >= 1 (1: one apply per batch), not 0"
  expect_error "--warmup-steps -1" "--warmup-steps: must be a whole number >= 0 (0: no warmup), not -1"
  expect_error "--decay-steps 2.5" "--decay-steps: must be a whole number >= 0 (0: the whole run), not 2.5"
  expect_error "--eval-every -2" "--eval-every: must be 0 (after each epoch only) or a number of steps"
  expect_error "--model vgg" "--model: vgg not in {mlp,cnn,resnet}"
  expect_error "--steps -3" "fit: max_steps -3 must be 0 (no limit) or positive" "examples/fashion_mnist.cpp:"
  expect_error "--ema 1.5 --steps 1" "ExponentialMovingAverage: decay is 1.5 but must be in [0, 1] (e.g. 0.9999)"
  expect_error "--batch 0 --steps 1" "split_batch: a batch of 0 examples over" "a batch needs at least one example"
  expect_error "--batch 100000 --steps 1" "batch size 100000 is larger than the dataset (60000 examples); use a batch of at most 60000"
  expect_error "--hidden 0 --steps 1" "dense \"fc1\": units must be positive but is 0" "examples/models.h:"
  expect_error "--eval-examples 0" "--eval-examples: must be a whole number >= 1 (the test set's first N examples), not 0"
  expect_error "--eval-examples 10001 --steps 1" "--eval-examples 10001 is more than the test set's 10000 examples; give at most 10000" ;;
unwritable_metrics)
  expect_error "--metrics $work/no/such/dir/m.jsonl" "cannot write the metrics file" "create it first" ;;
export_onnx)
  # --export-onnx writes the inference program after training; onnx.checker accepts it where
  # the Python package is installed (tests/onnx/ runs it in ONNX Runtime).
  if ! "$bin" $small --steps 2 --export-onnx "$work/m.onnx" >"$work/out" 2>"$work/err"; then
    grep -q "built without ONNX's schema" "$work/err" && { echo "SKIP: built without ONNX's schema"; exit 77; }
    cat "$work/err"; fail "the run failed"
  fi
  grep -qF "onnx: $work/m.onnx" "$work/out" || fail "the run does not name the ONNX file"
  [ -s "$work/m.onnx" ] || fail "no ONNX file"
  if python3 -c 'import onnx' 2>/dev/null; then
    python3 -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)' "$work/m.onnx" ||
      fail "onnx.checker refuses the file"
  else
    echo "note: the Python package onnx is not installed; onnx.checker skipped"
  fi ;;
export_onnx_unwritable)
  if "$bin" $small --steps 1 --export-onnx "$work/no-such-dir/m.onnx" >"$work/out" 2>"$work/err"; then
    fail "the run succeeded"
  fi
  grep -q "built without ONNX's schema" "$work/err" && { echo "SKIP: built without ONNX's schema"; exit 77; }
  grep -qF -- "export_onnx: cannot write \"$work/no-such-dir/m.onnx\": No such file or directory; give a path" \
    "$work/err" || { cat "$work/err"; fail "no message naming the path"; } ;;
unwritable_checkpoint)
  touch "$work/file"
  expect_error "--checkpoint $work/file/ckpt" "cannot write checkpoints to \"$work/file/ckpt\"" ;;
nan_loss_keeps_last_checkpoint)
  expect_error "$small --optimizer sgd --lr 1e30 --checkpoint $work/c --checkpoint-every 1" \
    "the loss is NaN at step 2" "the newest checkpoint, $work/c/ckpt-1.tjck, is kept" "the training diverged"
  [ -f "$work/c/ckpt-1.tjck" ] && [ ! -f "$work/c/ckpt-2.tjck" ] || fail "checkpoint 1 should be the last one"
  head -n 1 "$work/c/latest" | grep -q "ckpt-1.tjck" || fail "latest should name checkpoint 1" ;;
resume_past_a_damaged_checkpoint)
  # The newest checkpoint damaged: --resume warns and continues from the newest older one.
  "$bin" $small --steps 4 --checkpoint-every 1 --checkpoint "$work/f" >/dev/null || fail "run"
  printf 'X' | dd of="$work/f/ckpt-4.tjck" bs=1 seek=100 conv=notrunc 2>/dev/null
  "$bin" $small --steps 6 --checkpoint "$work/f" --resume >"$work/out" 2>"$work/err" || { cat "$work/err"; fail "resume"; }
  grep -q "ckpt-4.tjck" "$work/err" && grep -q "resuming from the older $work/f/ckpt-3.tjck" "$work/err" ||
    { cat "$work/err"; fail "no warning naming the damaged and the older checkpoint"; }
  grep -q "resumed at step 3" "$work/out" || fail "did not resume at step 3" ;;
resume_from_a_checkpoint_file)
  "$bin" $small --steps 4 --checkpoint-every 2 --checkpoint "$work/g" >/dev/null || fail "run"
  "$bin" $small --steps 6 --checkpoint "$work/g/ckpt-2.tjck" --resume >"$work/out" 2>"$work/err" ||
    { cat "$work/err"; fail "resume from a file"; }
  grep -q "resumed at step 2" "$work/out" || fail "did not resume at step 2"
  [ -f "$work/g/ckpt-6.tjck" ] || fail "the resumed run should save beside the file"
  expect_error "$small --checkpoint $work/g/ckpt-2.tjck" "is a file; add --resume" ;;
resume_without_the_ema_flag)
  "$bin" $small --steps 2 --ema 0.99 --checkpoint "$work/h" >/dev/null || fail "run"
  expect_error "$small --steps 4 --checkpoint $work/h --resume" "ema = \"--ema 0.99\"" "this run has ema = \"off (no --ema)\"" ;;
damaged_checkpoint)
  "$bin" $small --steps 2 --checkpoint "$work/d" >/dev/null || fail "run"
  printf 'X' | dd of="$work/d/ckpt-2.tjck" bs=1 seek=100 conv=notrunc 2>/dev/null
  expect_error "$small --checkpoint $work/d --resume" "ckpt-2.tjck" "checksum" ;;
mismatched_checkpoint)
  "$bin" $small --steps 2 --checkpoint "$work/e" >/dev/null || fail "run"
  expect_error "--steps 24 --batch 64 --hidden 48 --checkpoint $work/e --resume" "model" "MLP 784-32-32-10" "MLP 784-48-48-10" ;;
keep_best_checkpoint)
  # --keep-best accuracy: best.tjck holds the evaluation with the highest test accuracy, with its
  # value in the metadata, and survives the rotation of the regular checkpoints.
  "$bin" $small --eval-every 6 --checkpoint-every 4 --checkpoint "$work/k" --keep-best accuracy \
    --metrics "$work/k.jsonl" >"$work/out" || fail "run"
  [ -f "$work/k/best.tjck" ] || fail "no best.tjck in $(ls "$work/k")"
  [ "$(ls "$work/k" | grep -c '^ckpt-')" = 3 ] || fail "the rotation should keep 3 regular checkpoints: $(ls "$work/k")"
  best=$(grep '"kind":"eval"' "$work/k.jsonl" | sed 's/.*"test_accuracy":\([^,]*\),.*/\1/' | sort -g | tail -1)
  grep -q "best checkpoint: $work/k/best.tjck (test accuracy " "$work/out" || { cat "$work/out"; fail "no best line"; }
  printed=$(sed -n 's/^best checkpoint: .*(test accuracy \([0-9.]*\) at step.*/\1/p' "$work/out")
  awk -v a="$best" -v b="$printed" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-4) }' ||
    fail "best.tjck has accuracy $printed, the best evaluation was $best"
  grep -qa "best_metric" "$work/k/best.tjck" && grep -qa "test_accuracy" "$work/k/best.tjck" ||
    fail "best.tjck's metadata does not name its metric"
  expect_error "$small --keep-best loss" "--keep-best needs --checkpoint" ;;
plain_log_lines)
  # Output to a file, not a terminal: a plain line every --log-every steps, before the epoch ends.
  "$bin" --steps 12 --batch 64 --hidden 32 --log-every 4 >"$work/log" 2>&1 || { cat "$work/log"; fail "run"; }
  steps=$(sed -n 's/^step \([0-9]*\), epoch 1: loss [0-9.]*, [0-9]* samples\/s, lr 0.001$/\1/p' "$work/log" | tr '\n' ' ')
  [ "$steps" = "4 8 12 " ] || { cat "$work/log"; fail "plain lines at steps \"$steps\", expected 4 8 12"; }
  if grep -q "$(printf '\r')" "$work/log"; then fail "a progress bar was drawn into a file"; fi ;;
augment)
  # --augment trains on cropped and flipped images: other losses than without it, the same twice.
  "$bin" $small --augment --metrics "$work/a1.jsonl" >/dev/null || fail "augmented run"
  "$bin" $small --augment --metrics "$work/a2.jsonl" >/dev/null || fail "second augmented run"
  "$bin" $small --metrics "$work/plain.jsonl" >/dev/null || fail "plain run"
  [ "$(loss_at "$work/a1.jsonl" 24)" = "$(loss_at "$work/a2.jsonl" 24)" ] || fail "augmentation is not reproducible"
  [ "$(loss_at "$work/a1.jsonl" 2)" != "$(loss_at "$work/plain.jsonl" 2)" ] || fail "--augment changed nothing" ;;
sigint_checkpoints_and_resumes)
  # Ctrl-C mid-epoch: the step finishes, a final checkpoint, the metrics so far, exit 130 and the
  # command that resumes; that command, run as printed, ends bitwise where a run never stopped ends.
  run="--steps 900 --batch 64 --hidden 32 --log-every 1"
  "$bin" $run --checkpoint "$work/a" --metrics "$work/a.jsonl" >/dev/null || fail "uninterrupted run"
  start_in_background "$work/out" $run --checkpoint-every 50 --checkpoint "$work/b" --metrics "$work/b.jsonl"
  wait_for "$work/b.jsonl" '"step":20,' || { kill $pid; fail "the run never reached step 20"; }
  kill -INT $pid
  wait $pid; code=$?
  [ $code = 130 ] || { cat "$work/out"; fail "exit $code after SIGINT, expected 130"; }
  step=$(sed -n 's/.*training stopped by SIGINT after step \([0-9]*\) .*/\1/p' "$work/out")
  [ -n "$step" ] && [ "$step" -lt 900 ] || { cat "$work/out"; fail "no \"stopped by SIGINT after step N\" before the end"; }
  grep -qF "the newest checkpoint, $work/b/ckpt-$step.tjck, is kept" "$work/out" || { cat "$work/out"; fail "kept checkpoint"; }
  [ "$(head -n 1 "$work/b/latest")" = "ckpt-$step.tjck" ] || fail "latest does not name ckpt-$step.tjck"
  [ "$(grep -c '"kind":"step"' "$work/b.jsonl")" = "$step" ] || fail "the metrics file should hold steps 1 to $step"
  resume=$(sed -n 's/^to resume: //p' "$work/out")
  [ "$resume" = "$bin $run --checkpoint-every 50 --checkpoint $work/b --metrics $work/b.jsonl --resume" ] ||
    fail "resume command \"$resume\""
  sh -c "$resume" >"$work/out2" 2>&1 || { cat "$work/out2"; fail "the printed resume command failed"; }
  grep -q "resumed at step $step" "$work/out2" || fail "the resumed run does not say step $step"
  cmp "$work/a/ckpt-900.tjck" "$work/b/ckpt-900.tjck" || fail "the final checkpoints differ"
  for s in 1 $step $((step + 1)) 300 900; do
    [ "$(loss_at "$work/a.jsonl" $s)" = "$(loss_at "$work/b.jsonl" $s)" ] || fail "the loss of step $s differs"
  done ;;
sigterm_exit_143)
  start_in_background "$work/out" --steps 900 --batch 64 --hidden 32 --log-every 1 --checkpoint-every 50 \
    --checkpoint "$work/t" --metrics "$work/t.jsonl"
  wait_for "$work/t.jsonl" '"step":5,' || { kill $pid; fail "the run never reached step 5"; }
  kill -TERM $pid
  wait $pid; code=$?
  [ $code = 143 ] || { cat "$work/out"; fail "exit $code after SIGTERM, expected 143"; }
  step=$(sed -n 's/.*training stopped by SIGTERM after step \([0-9]*\) .*/\1/p' "$work/out")
  [ -n "$step" ] || { cat "$work/out"; fail "no \"stopped by SIGTERM\" message"; }
  [ "$(head -n 1 "$work/t/latest")" = "ckpt-$step.tjck" ] || fail "latest does not name ckpt-$step.tjck"
  grep -q "^to resume: .* --resume$" "$work/out" || fail "no resume command" ;;
second_sigint_exits_at_once)
  # Big ResNet steps: the first Ctrl-C waits for the step in progress; the second, sent as soon
  # as the first is acknowledged, ends the process by the signal, with no stop message.
  start_in_background "$work/out" --model resnet --towers cpu:0 --batch 512 --steps 50 --log-every 1 \
    --checkpoint "$work/r" --metrics "$work/r.jsonl"
  wait_for "$work/r.jsonl" '"step":1,' || { kill $pid; fail "the run never finished a step"; }
  kill -INT $pid
  wait_for "$work/out" "SIGINT received" || { kill -9 $pid; fail "the first SIGINT was not acknowledged"; }
  kill -INT $pid
  wait $pid; code=$?
  [ $code = 130 ] || { cat "$work/out"; fail "exit $code, expected death by SIGINT (130)"; }
  if grep -q "training stopped by" "$work/out"; then cat "$work/out"; fail "it wound down instead of stopping at once"; fi ;;
precision_bf16)
  # --precision bf16: every matmul takes bf16 operands (f32 weights); the curve differs from
  # f32's, stays finite, and is bitwise reproducible.
  "$bin" $small --metrics "$work/f32.jsonl" >/dev/null || fail "f32 run"
  "$bin" $small --precision bf16 --metrics "$work/a.jsonl" >/dev/null || fail "bf16 run"
  "$bin" $small --precision bf16 --metrics "$work/b.jsonl" >/dev/null || fail "second bf16 run"
  a=$(loss_at "$work/a.jsonl" 24); b=$(loss_at "$work/b.jsonl" 24); f=$(loss_at "$work/f32.jsonl" 24)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "the bf16 runs' step-24 losses differ: $a, $b"
  [ "$a" != "$f" ] || fail "the bf16 run's loss equals the f32 run's ($a): was the policy applied?"
  case $a in *nan*|*inf*) fail "the bf16 loss is $a" ;; esac
  expect_error "--precision f8" "--precision" "f8" ;;
precision_f16)
  # --precision f16: f16 operands with the loss scaled dynamically; the metrics carry the scale
  # (2^16, nothing skipped on this short run) and the run is bitwise reproducible.
  "$bin" $small --precision f16 --metrics "$work/a.jsonl" >"$work/out" || { cat "$work/out"; fail "f16 run"; }
  "$bin" $small --precision f16 --metrics "$work/b.jsonl" >/dev/null || fail "second f16 run"
  a=$(loss_at "$work/a.jsonl" 24); b=$(loss_at "$work/b.jsonl" 24)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "the f16 runs' step-24 losses differ: $a, $b"
  case $a in *nan*|*inf*) fail "the f16 loss is $a" ;; esac
  grep -q '"step":24,.*"loss_scale":65536,"skipped_steps":0' "$work/a.jsonl" || { cat "$work/a.jsonl"; fail "no loss scale in the metrics"; }
  grep -qF "loss_scale=65536" "$work/out" || { cat "$work/out"; fail "the banner does not show the loss scale"; }
  # The scale's state is checkpointed: a run resumed at step 10 ends bitwise as the straight one
  # (its count of finite steps, 24, included).
  "$bin" $small --precision f16 --checkpoint "$work/c" >/dev/null || fail "uninterrupted f16 run"
  "$bin" $small --precision f16 --steps 10 --checkpoint "$work/d" >/dev/null || fail "first half"
  "$bin" $small --precision f16 --checkpoint "$work/d" --resume >/dev/null || fail "resumed f16 run"
  cmp "$work/c/ckpt-24.tjck" "$work/d/ckpt-24.tjck" || fail "the final f16 checkpoints differ" ;;
*) fail "unknown case $case_name" ;;
esac
