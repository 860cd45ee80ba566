#!/bin/sh
# examples/fashion_mnist over several processes under the real mpirun, on loopback: run by
# ctest (label `mpi`) as
#   mpi_cli.sh <path to fashion_mnist> <case> <path to towerjit_mpi_async_check> \
#              <path to towerjit_mpi_given_up_call> <path to towerjit_mpi_trainer_misuse> \
#              <path to towerjit_mpi_sparse_towers> <path to towerjit_mpi_compressed_all_reduce> \
#              <path to towerjit_mpi_async_sparse>
# Each case exits 0 when the run behaves as docs/distributed.md says, 77 (skipped) when mpirun
# is missing, and prints why otherwise.
set -u
bin=$1
case_name=$2
async_check=${3:-}
given_up_call=${4:-}
trainer_misuse=${5:-}
sparse_towers=${6:-}
compressed_all_reduce=${7:-}
async_sparse=${8:-}
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (install openmpi-bin)"; exit 77; }
# Under ASan (make test-asan), the complete unwinder for allocations: Open MPI has no frame
# pointers, and the leaks it leaves at exit must show their Open MPI frames to match
# scripts/sanitizers/lsan.supp (see there).
case ${ASAN_OPTIONS-} in ?*) export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" ;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-mpi.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Each run's Open MPI session directory in its own folder: two cases started at once by
# `ctest -j` had raced to create the shared /tmp/ompi.<host>.<uid>, and the loser's mpirun
# failed ("A call to mkdir was unable to create the desired directory ... File exists").
export OMPI_MCA_orte_tmpdir_base="$work"
fail() { echo "FAIL: $*"; exit 1; }

# One machine, loopback TCP; the all-reduce algorithm pinned (ring) so a layout's runs repeat.
mpi() {
  np=$1; shift
  mpirun --oversubscribe --allow-run-as-root -np "$np" --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 "$@"
}

. "$(dirname "$0")/curves.sh"  # losses, close

small="--steps 40 --batch 64 --hidden 32 --log-every 1 --optimizer momentum --lr 0.05"
case $case_name in
two_processes_same_curve)
  # 2 processes x 1 tower train as 1 process x 2 towers: 40 losses within 1e-6 relative, and
  # bitwise the same under TOWERJIT_DETERMINISTIC=layout.
  "$bin" $small --towers cpu:0,cpu:1 --metrics "$work/one.jsonl" >/dev/null 2>&1 || fail "one process"
  mpi 2 "$bin" $small --towers cpu:0 --metrics "$work/two.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "two processes"; }
  grep -q "2 processes over MPI" "$work/out" || { cat "$work/out"; fail "rank 0 does not say it runs over MPI"; }
  [ "$(grep -c "^test accuracy" "$work/out")" = 1 ] || fail "every rank printed the result; only rank 0 should"
  losses "$work/one.jsonl" >"$work/one"; losses "$work/two.jsonl" >"$work/two"
  close "$work/one" "$work/two" 40 1e-6 || { paste "$work/one" "$work/two"; fail "the loss curves differ by more than 1e-6"; }
  TOWERJIT_DETERMINISTIC=layout mpi 2 -x TOWERJIT_DETERMINISTIC "$bin" $small --towers cpu:0 \
    --metrics "$work/layout.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "two processes, layout"; }
  losses "$work/layout.jsonl" >"$work/layout"
  cmp -s "$work/one" "$work/layout" || { paste "$work/one" "$work/layout"; fail "layout determinism: not bitwise"; } ;;
layout_deterministic_any_split)
  # 4 towers as 1x4, 2x2 and 4x1 over an uneven batch (63): bitwise the same curves.
  run="--steps 20 --batch 63 --hidden 32 --log-every 1"
  export TOWERJIT_DETERMINISTIC=layout
  "$bin" $run --towers cpu:0,cpu:1,cpu:2,cpu:3 --metrics "$work/a.jsonl" >/dev/null 2>&1 || fail "1x4"
  mpi 2 -x TOWERJIT_DETERMINISTIC "$bin" $run --towers cpu:0,cpu:1 --metrics "$work/b.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "2x2"; }
  mpi 4 -x TOWERJIT_DETERMINISTIC "$bin" $run --towers cpu:0 --metrics "$work/c.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "4x1"; }
  losses "$work/a.jsonl" >"$work/a"; losses "$work/b.jsonl" >"$work/b"; losses "$work/c.jsonl" >"$work/c"
  [ "$(wc -l <"$work/a")" = 20 ] || fail "1x4 logged $(wc -l <"$work/a") steps, not 20"
  cmp -s "$work/a" "$work/b" || { paste "$work/a" "$work/b"; fail "2x2 is not bitwise 1x4"; }
  cmp -s "$work/a" "$work/c" || { paste "$work/a" "$work/c"; fail "4x1 is not bitwise 1x4"; } ;;
three_processes_uneven_batch)
  # 3 processes (not a power of two), batch 64 = 21 + 21 + 22, against 3 towers in one process;
  # and a fixed layout repeats bitwise.
  "$bin" $small --towers cpu:0,cpu:1,cpu:2 --metrics "$work/one.jsonl" >/dev/null 2>&1 || fail "one process"
  mpi 3 "$bin" $small --towers cpu:0 --metrics "$work/a.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "three processes"; }
  mpi 3 "$bin" $small --towers cpu:0 --metrics "$work/b.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "three processes, again"; }
  losses "$work/one.jsonl" >"$work/one"; losses "$work/a.jsonl" >"$work/a"; losses "$work/b.jsonl" >"$work/b"
  close "$work/one" "$work/a" 40 1e-6 || { paste "$work/one" "$work/a"; fail "3x1 and 1x3 differ by more than 1e-6"; }
  cmp -s "$work/a" "$work/b" || { paste "$work/a" "$work/b"; fail "two runs of one layout are not bitwise the same"; } ;;
sync_ps_across_processes)
  # The parameter-server variant over 2 processes of 2 towers: as 4 towers in one process.
  "$bin" $small --strategy sync-ps --towers cpu:0,cpu:1,cpu:2,cpu:3 --metrics "$work/one.jsonl" >/dev/null 2>&1 || fail "one process"
  mpi 2 "$bin" $small --strategy sync-ps --towers cpu:0,cpu:1 --metrics "$work/two.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "two processes"; }
  losses "$work/one.jsonl" >"$work/one"; losses "$work/two.jsonl" >"$work/two"
  close "$work/one" "$work/two" 40 1e-6 || { paste "$work/one" "$work/two"; fail "sync-ps: the curves differ by more than 1e-6"; } ;;
mismatched_flags)
  # Ranks given different flags stop at start-up, each naming the setting and the ranks.
  mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo \
    -np 1 "$bin" $small --towers cpu:0 : -np 1 "$bin" $small --towers cpu:0 --batch 32 >"$work/out" 2>&1 &&
    fail "mismatched ranks trained"
  for text in "the ranks of this run disagree" "batch: \"64\" on rank 0, \"32\" on rank 1" "towerjit: rank 0 of 2: the ranks" \
              "towerjit: rank 1 of 2: the ranks"; do
    grep -qF "$text" "$work/out" || { cat "$work/out"; fail "no \"$text\" in the output"; }
  done
  # The same for another model (the graph's hash) with the same flags but --hidden.
  mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo \
    -np 1 "$bin" $small --towers cpu:0 : -np 1 "$bin" $small --towers cpu:0 --hidden 16 >"$work/out" 2>&1 &&
    fail "ranks of different models trained"
  grep -qF "model: \"MLP 784-32-32-10\" on rank 0, \"MLP 784-16-16-10\" on rank 1" "$work/out" || { cat "$work/out"; fail "the model's difference is not named"; } ;;
raising_rank_stops_all)
  # A rank that raises (here: no data) prints why, naming itself, and every rank stops at once.
  start=$(date +%s)
  mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo \
    -np 1 "$bin" $small --towers cpu:0 : -np 1 "$bin" $small --towers cpu:0 --data "$work/none" >"$work/out" 2>&1 &&
    fail "the run succeeded"
  [ $(($(date +%s) - start)) -le 30 ] || fail "the other rank took more than 30 s to stop"
  grep -q "towerjit: rank 1 of 2: .*$work/none" "$work/out" || { cat "$work/out"; fail "the error does not name rank 1 and the cause"; } ;;
rank_that_never_arrives)
  # A rank that does not start (here: it sleeps 90 s first): the others give up after
  # TOWERJIT_MPI_START_TIMEOUT (3 s here, 30 by default), naming themselves and the cause, and
  # the run ends long before the late rank would arrive. (Under ASan on a loaded 2-core machine
  # the first rank's own start took most of 20 s once: the bound leaves room for that.)
  start=$(date +%s)
  TOWERJIT_MPI_START_TIMEOUT=3 mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo \
    -x TOWERJIT_MPI_START_TIMEOUT -np 1 "$bin" $small --towers cpu:0 : -np 1 sh -c "sleep 90; exec $bin" \
    >"$work/out" 2>&1 && fail "the run succeeded"
  [ $(($(date +%s) - start)) -le 60 ] || fail "took $(($(date +%s) - start)) s to stop"
  grep -q "towerjit: rank 0 of 2: MPI could not start under mpirun: .* did not finish within 3 s" "$work/out" ||
    { cat "$work/out"; fail "the error does not name the rank and the cause"; } ;;
killed_rank_stops_all)
  # kill -9 of one rank mid-run: mpirun ends the others within 30 s, naming the rank; the last
  # checkpoint rank 0 wrote (every 20 steps) is intact, and a run resumes from it.
  mpi 2 sh -c 'echo $$ >"$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$work" "$bin" --epochs 100000 --batch 64 \
    --hidden 32 --towers cpu:0 --checkpoint "$work/c" --checkpoint-every 20 >"$work/out" 2>&1 &
  launcher=$!
  for _ in $(seq 1 150); do [ -s "$work/pid.1" ] && [ -s "$work/c/latest" ] && break; sleep 0.2; done
  [ -s "$work/pid.1" ] && [ -s "$work/c/latest" ] || { kill $launcher; fail "rank 1 did not start or no checkpoint was written"; }
  sleep 1
  kill -9 "$(cat "$work/pid.1")"
  killed=$(date +%s)
  wait $launcher && fail "the run ended with status 0 after a rank was killed"
  [ $(($(date +%s) - killed)) -le 30 ] || fail "the other rank took more than 30 s to stop"
  grep -q "rank 1 .*signal 9" "$work/out" || { cat "$work/out"; fail "the message does not name rank 1"; }
  kept=$(head -n 1 "$work/c/latest" | sed 's/ckpt-\([0-9]*\)\.tjck/\1/')
  mpi 2 "$bin" --steps $((kept + 2)) --batch 64 --hidden 32 --towers cpu:0 --checkpoint "$work/c" --resume \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "resuming from the kept checkpoint (step $kept)"; }
  grep -q "resumed at step $kept" "$work/out" || { cat "$work/out"; fail "did not resume at step $kept"; } ;;
stalled_rank_stops_all)
  # A rank that stops (SIGSTOP: alive, but it never reaches the next collective): the other
  # warns after TOWERJIT_MPI_STALL_WARNING (1 s here), stops after TOWERJIT_MPI_STALL_TIMEOUT
  # (8 s here: more than a rank may lag behind the other at start-up on a loaded machine under
  # a sanitizer) naming the call it waited in, and mpirun ends the stopped rank too.
  TOWERJIT_MPI_STALL_WARNING=1 TOWERJIT_MPI_STALL_TIMEOUT=8 mpi 2 -x TOWERJIT_MPI_STALL_WARNING \
    -x TOWERJIT_MPI_STALL_TIMEOUT sh -c 'echo $$ >"$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$work" "$bin" \
    --epochs 100000 --batch 64 --hidden 32 --towers cpu:0 --log-every 10 >"$work/out" 2>&1 &
  launcher=$!
  for _ in $(seq 1 300); do [ -s "$work/pid.1" ] && grep -q "step 10" "$work/out" && break; sleep 0.2; done
  [ -s "$work/pid.1" ] && grep -q "step 10" "$work/out" ||
    { kill $launcher; cat "$work/out"; fail "the run did not reach step 10"; }
  kill -STOP "$(cat "$work/pid.1")"
  stopped=$(date +%s)
  before=$(wc -l <"$work/out")
  wait $launcher && fail "the run ended with status 0 with a rank stopped"
  kill -9 "$(cat "$work/pid.1")" 2>/dev/null
  [ $(($(date +%s) - stopped)) -le 30 ] || fail "took $(($(date +%s) - stopped)) s to stop"
  # Both after the SIGSTOP, not from a rank that lagged at start-up.
  tail -n +$((before + 1)) "$work/out" >"$work/after"
  grep -q "towerjit: rank 0 of 2: MPI_.* has waited 1 s for the other ranks; one may be stalled" "$work/after" ||
    { cat "$work/out"; fail "no stall warning from rank 0 after the stop"; }
  grep -q "towerjit: rank 0 of 2: .*MPI_.* has waited 8 s for the other ranks: one is stopped" "$work/after" ||
    { cat "$work/out"; fail "rank 0's error does not name the stalled call"; } ;;
ctrl_c_stops_every_rank_after_one_step)
  # Ctrl-C to mpirun: it sends every rank a SIGTERM (and a SIGKILL a second later); the ranks
  # agree at the end of the step, all stop after it, rank 0 writes its checkpoint and says how
  # to resume, and nobody is left for the SIGKILL. The resumed run continues from that step.
  # (5 s rather than mpirun's 1 before the SIGKILL, which it waits out: a sanitizer's exit checks take time too.)
  env --default-signal=INT sh -c 'exec mpirun --oversubscribe --allow-run-as-root -np 2 --mca odls_base_sigkill_timeout 5 --mca btl self,tcp \
    --mca btl_tcp_if_include lo "$@"' mpirun "$bin" --epochs 100000 --batch 64 --hidden 32 --towers cpu:0 \
    --checkpoint "$work/c" --checkpoint-every 20 --log-every 10 >"$work/out" 2>&1 &
  launcher=$!
  for _ in $(seq 1 300); do [ -s "$work/c/latest" ] && break; sleep 0.2; done
  [ -s "$work/c/latest" ] || { kill $launcher; cat "$work/out"; fail "no checkpoint was written"; }
  kill -INT $launcher
  wait $launcher && fail "mpirun exited with status 0 after Ctrl-C"
  step=$(sed -n 's/.*training stopped by SIGTERM after step \([0-9]*\) .*/\1/p' "$work/out")
  [ -n "$step" ] || { cat "$work/out"; fail "no \"training stopped by SIGTERM after step N\""; }
  grep -qF "the newest checkpoint, $work/c/ckpt-$step.tjck, is kept" "$work/out" || { cat "$work/out"; fail "kept checkpoint"; }
  [ "$(head -n 1 "$work/c/latest")" = "ckpt-$step.tjck" ] || fail "latest does not name ckpt-$step.tjck"
  grep -q "^to resume: mpirun (any -np) .* --resume$" "$work/out" || { cat "$work/out"; fail "no resume command"; }
  ! grep -q "signal 9" "$work/out" || { cat "$work/out"; fail "a rank was still running at mpirun's SIGKILL"; }
  mpi 2 "$bin" --steps $((step + 2)) --batch 64 --hidden 32 --towers cpu:0 --checkpoint "$work/c" --resume \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "resuming from step $step"; }
  grep -q "resumed at step $step" "$work/out" || { cat "$work/out"; fail "did not resume at step $step"; } ;;
gpu_towers_on_the_emulator)
  # 2 processes x 2 emulated GPUs (TOWERJIT_CUDA=emulator) train as 4 CPU towers in one process,
  # within 1e-5 relative at each of 12 steps: the variables on the host (each process reduces
  # its GPUs' gradients on the host, then MPI), and on the GPUs (NCCL between a process's GPUs,
  # then MPI between the processes, one bucket per gradient or the default buckets).
  run="--steps 12 --batch 64 --optimizer momentum --lr 0.05 --seed 7 --log-every 1 --hidden 32 --eval-examples 512"
  "$bin" $run --towers cpu:0,cpu:1,cpu:2,cpu:3 --metrics "$work/cpu.jsonl" >/dev/null 2>&1 || fail "CPU towers"
  losses "$work/cpu.jsonl" >"$work/cpu"
  # TOWERJIT_NCCL_WORLD=on: one NCCL communicator over the 4 GPUs (the emulated NCCL's
  # ncclCommInitRank meets the other process in shared memory), no MPI for the gradients.
  for variant in "TOWERJIT_GPU_VARIABLES=off TOWERJIT_BUCKET_MB=25" "TOWERJIT_GPU_VARIABLES=on TOWERJIT_BUCKET_MB=25" \
                 "TOWERJIT_GPU_VARIABLES=on TOWERJIT_BUCKET_MB=0" "TOWERJIT_GPU_VARIABLES=on TOWERJIT_NCCL_WORLD=on"; do
    rm -f "$work/gpu.jsonl"
    # shellcheck disable=SC2086  # $variant is split into its assignments on purpose
    (export $variant TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2
     mpi 2 -x TOWERJIT_CUDA -x TOWERJIT_EMULATED_GPUS -x TOWERJIT_GPU_VARIABLES -x TOWERJIT_BUCKET_MB -x TOWERJIT_NCCL_WORLD \
       "$bin" $run --towers gpu:0,gpu:1 --metrics "$work/gpu.jsonl") >"$work/out" 2>&1 ||
      { cat "$work/out"; fail "GPU towers, $variant"; }
    losses "$work/gpu.jsonl" >"$work/gpu"
    close "$work/cpu" "$work/gpu" 12 1e-5 || { paste "$work/cpu" "$work/gpu"; fail "$variant: the curves differ"; }
    case $variant in *NCCL_WORLD=on*)
      grep -q "TOWERJIT_NCCL_WORLD=on: one NCCL communicator over the 4 GPUs of 2 processes" "$work/out" ||
        { cat "$work/out"; fail "no NCCL communicator over the world"; }
      # The loss and the stop agreement alone go over MPI.
      grep -q "mpi: rank 0 handed 24 bytes per step" "$work/out" || { cat "$work/out"; fail "gradients went over MPI"; } ;;
    esac
  done
  # TOWERJIT_NCCL_WORLD=on where one process cannot join (here: its NCCL is off): the ranks
  # agree to stay hierarchical, and say so.
  rm -f "$work/gpu.jsonl"
  (export TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 TOWERJIT_GPU_VARIABLES=on TOWERJIT_NCCL_WORLD=on
   mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo -x TOWERJIT_CUDA \
     -x TOWERJIT_EMULATED_GPUS -x TOWERJIT_GPU_VARIABLES -x TOWERJIT_NCCL_WORLD \
     -np 1 "$bin" $run --towers gpu:0,gpu:1 --metrics "$work/gpu.jsonl" : -np 1 -x TOWERJIT_NCCL=off "$bin" $run \
     --towers gpu:0,gpu:1) >"$work/out" 2>&1 || { cat "$work/out"; fail "one process without NCCL"; }
  grep -q "TOWERJIT_NCCL_WORLD=on, but 1 of 2 processes have no NCCL with ncclCommInitRank" "$work/out" ||
    { cat "$work/out"; fail "no word of the hierarchical fallback"; }
  losses "$work/gpu.jsonl" >"$work/gpu"
  close "$work/cpu" "$work/gpu" 12 1e-5 || { paste "$work/cpu" "$work/gpu"; fail "the fallback's curves differ"; }
  # Ranks that would reduce in different places (host, GPUs) are stopped at start-up.
  mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo -x TOWERJIT_CUDA=emulator \
    -np 1 "$bin" $run --towers gpu:0 : -np 1 -x TOWERJIT_GPU_VARIABLES=on "$bin" $run --towers gpu:0 >"$work/out" 2>&1 &&
    fail "ranks with the variables in different places trained"
  grep -qF "the variables (TOWERJIT_GPU_VARIABLES and the towers' devices): \"on the host\" on rank 0, \"on the GPUs\" on rank 1" \
    "$work/out" || { cat "$work/out"; fail "the difference is not named"; }
  # One emulated GPU per process with two towers on it (no NCCL in the process).
  rm -f "$work/gpu.jsonl"
  (export TOWERJIT_GPU_VARIABLES=on TOWERJIT_CUDA=emulator
   mpi 2 -x TOWERJIT_CUDA -x TOWERJIT_GPU_VARIABLES "$bin" $run --towers gpu:0,gpu:0 --metrics "$work/gpu.jsonl") \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "one GPU per process"; }
  losses "$work/gpu.jsonl" >"$work/gpu"
  close "$work/cpu" "$work/gpu" 12 1e-5 || { paste "$work/cpu" "$work/gpu"; fail "one GPU per process: the curves differ"; } ;;
checkpoint_reshards)
  # A checkpoint written at np=2 (by rank 0, recording the world) resumes at np=3: the curve
  # continues as the uninterrupted np=2 run's (1e-6 relative; other layout, other sum order).
  # Resuming another model is an error on every rank.
  mpi 2 "$bin" $small --steps 20 --towers cpu:0 --metrics "$work/a.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "uninterrupted"; }
  mpi 2 "$bin" $small --steps 10 --towers cpu:0 --checkpoint "$work/c" --metrics "$work/b.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "first half at np=2"; }
  [ "$(ls "$work/c"/*.tjck)" = "$work/c/ckpt-10.tjck" ] || fail "expected one checkpoint, ckpt-10.tjck: $(ls "$work/c")"
  grep -qa "2 processes, 2 towers" "$work/c/ckpt-10.tjck" || fail "the checkpoint does not record the world"
  mpi 3 "$bin" $small --steps 20 --towers cpu:0 --checkpoint "$work/c" --resume --metrics "$work/b.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "resumed at np=3"; }
  grep -q "resumed at step 10" "$work/out" || { cat "$work/out"; fail "the resumed run does not say where it resumed"; }
  losses "$work/a.jsonl" >"$work/a"; losses "$work/b.jsonl" >"$work/b"
  close "$work/a" "$work/b" 20 1e-6 || { paste "$work/a" "$work/b"; fail "the resumed curve does not continue"; }
  mpi 2 "$bin" $small --steps 20 --hidden 48 --towers cpu:0 --checkpoint "$work/c" --resume >"$work/out" 2>&1 &&
    fail "another model resumed"
  for r in 0 1; do
    grep -qF "towerjit: rank $r of 2: checkpoint $work/c was written by a run with model" "$work/out" ||
      { cat "$work/out"; fail "rank $r does not report the mismatch"; }
  done ;;
a_call_given_up_on_keeps_its_buffer)
  # Rank 1 comes to an all-reduce once rank 0 has given up on it (after 1 s) and dropped the
  # buffer, yet MPI still writes rank 1's bytes into it: the call keeps it alive
  # (tests/mpi/given_up_call.cpp).
  TOWERJIT_MPI_STALL_TIMEOUT=1 mpi 2 -x TOWERJIT_MPI_STALL_TIMEOUT "$given_up_call" "$work" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "see above"; }
  [ "$(grep -c ': ok$' "$work/out")" = 2 ] || { cat "$work/out"; fail "not every rank reported"; } ;;
gradient_compression_across_processes)
  # The 16-bit all-reduce on its own (tests/mpi/compressed_all_reduce.cpp): every rounding case,
  # with 2 and 3 ranks, the same bits on every rank.
  for np in 2 3; do
    mpi $np "$compressed_all_reduce" >"$work/out" 2>&1 || { cat "$work/out"; fail "$np ranks"; }
    [ "$(grep -c ': ok$' "$work/out")" = $np ] || { cat "$work/out"; fail "not every one of $np ranks reported"; }
  done
  # Training with --gradient-compression bf16 over 2 processes: the gradients' bytes halve (the
  # loss, the model updates stay f32), the curve stays near the uncompressed one, and two runs
  # are bitwise the same.
  small="--steps 24 --batch 64 --hidden 32 --log-every 1"
  # shellcheck disable=SC2086
  mpi 2 "$bin" $small --metrics "$work/f32.jsonl" >"$work/f32" 2>&1 || { cat "$work/f32"; fail "uncompressed run"; }
  for run in a b; do
    # shellcheck disable=SC2086
    mpi 2 "$bin" $small --gradient-compression bf16 --metrics "$work/$run.jsonl" >"$work/$run" 2>&1 ||
      { cat "$work/$run"; fail "compressed run $run"; }
  done
  bytes() { sed -n 's/^mpi: rank 0 handed \([0-9]*\) bytes per step.*/\1/p' "$1"; }
  full=$(bytes "$work/f32"); half=$(bytes "$work/a")
  [ -n "$full" ] && [ -n "$half" ] || { cat "$work/f32" "$work/a"; fail "no bytes per step printed"; }
  awk -v h="$half" -v f="$full" 'BEGIN { exit !(h < 0.55 * f) }' || fail "compressed $half bytes a step, uncompressed $full"
  step_loss() { grep "\"kind\":\"step\",\"step\":$2," "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
  a=$(step_loss "$work/a.jsonl" 24); b=$(step_loss "$work/b.jsonl" 24); f=$(step_loss "$work/f32.jsonl" 24)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "two compressed runs differ at step 24: $a, $b"
  awk -v a="$a" -v f="$f" 'BEGIN { d = a - f; if (d < 0) d = -d; exit !(d < 0.05 * f) }' ||
    fail "the compressed run's step-24 loss $a is far from the uncompressed $f"
  # The same with the variables on 2 emulated GPUs per process: NCCL between a process's GPUs
  # and MPI between the processes both in bf16 (the MPI bytes halve), or one NCCL communicator
  # over the world's 4 GPUs in bf16 (no gradient bytes over MPI); two runs bitwise the same.
  gpus="--steps 12 --batch 64 --hidden 32 --log-every 1 --towers gpu:0,gpu:1"
  for variant in "TOWERJIT_NCCL_WORLD=off" "TOWERJIT_NCCL_WORLD=on"; do
    for run in f32 a b; do
      compression=$([ $run = f32 ] || echo "--gradient-compression bf16")
      # shellcheck disable=SC2086  # $variant, $gpus and $compression split on purpose
      (export $variant TOWERJIT_CUDA=emulator TOWERJIT_EMULATED_GPUS=2 TOWERJIT_GPU_VARIABLES=on
       mpi 2 -x TOWERJIT_CUDA -x TOWERJIT_EMULATED_GPUS -x TOWERJIT_GPU_VARIABLES -x TOWERJIT_NCCL_WORLD \
         "$bin" $gpus $compression --metrics "$work/gpu_$run.jsonl") >"$work/gpu_$run" 2>&1 ||
        { cat "$work/gpu_$run"; fail "GPU towers, $variant, run $run"; }
    done
    full=$(bytes "$work/gpu_f32"); half=$(bytes "$work/gpu_a")
    case $variant in
      *=off) awk -v h="$half" -v f="$full" 'BEGIN { exit !(h != "" && h < 0.55 * f) }' ||
               fail "GPU towers: compressed $half bytes a step over MPI, uncompressed $full" ;;
      *=on) [ "$half" = 24 ] && [ "$full" = 24 ] || fail "GPU towers, one NCCL world: $half and $full bytes a step over MPI" ;;
    esac
    a=$(step_loss "$work/gpu_a.jsonl" 12); b=$(step_loss "$work/gpu_b.jsonl" 12); f=$(step_loss "$work/gpu_f32.jsonl" 12)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "GPU towers, $variant: two compressed runs differ at step 12: $a, $b"
    [ "$a" != "$f" ] || fail "GPU towers, $variant: the compressed loss $a is the uncompressed one"
    awk -v a="$a" -v f="$f" 'BEGIN { d = a - f; if (d < 0) d = -d; exit !(d < 0.05 * f) }' ||
      fail "GPU towers, $variant: the compressed step-12 loss $a is far from the uncompressed $f"
  done ;;
sparse_gradients_across_processes)
  # An embedding's sparse gradient over 2 processes x 1 tower, batch 11 (5 + 6): the world's
  # rows and values all-gathered and concatenated (tests/mpi/sparse_towers.cpp), as 2 towers
  # in one process: within 1e-6 relative (the dense bias is summed in float across processes,
  # in double in one), and bitwise under TOWERJIT_DETERMINISTIC=layout.
  "$sparse_towers" train 2 "$work/one" >"$work/out" 2>&1 || { cat "$work/out"; fail "one process"; }
  mpi 2 "$sparse_towers" train 1 "$work/two" >"$work/out" 2>&1 || { cat "$work/out"; fail "two processes"; }
  [ "$(grep -c ': ok$' "$work/out")" = 2 ] || { cat "$work/out"; fail "not every rank reported"; }
  "$sparse_towers" compare "$work/one" "$work/two" 1e-6 || fail "2 processes and 2 towers differ"
  TOWERJIT_DETERMINISTIC=layout mpi 2 -x TOWERJIT_DETERMINISTIC "$sparse_towers" train 1 "$work/layout" \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "two processes, layout"; }
  "$sparse_towers" compare "$work/one" "$work/layout" 0 || fail "layout determinism: not bitwise"
  # The per-variable rule (Towers::with): every rank applies every world tower's rows of the
  # table, in world tower order, after an all-gather; as 2 towers in one process (which apply
  # in the order they finish) within 1e-6 relative, and bitwise between two runs.
  "$sparse_towers" train 2 "$work/rules_one" rules >"$work/out" 2>&1 || { cat "$work/out"; fail "rules, one process"; }
  mpi 2 "$sparse_towers" train 1 "$work/rules_a" rules >"$work/out" 2>&1 || { cat "$work/out"; fail "rules, two processes"; }
  mpi 2 "$sparse_towers" train 1 "$work/rules_b" rules >"$work/out" 2>&1 || { cat "$work/out"; fail "rules, two processes again"; }
  "$sparse_towers" compare "$work/rules_one" "$work/rules_a" 1e-6 || fail "rules: 2 processes and 2 towers differ"
  "$sparse_towers" compare "$work/rules_a" "$work/rules_b" 0 || fail "rules: two runs of 2 processes differ"
  # Two processes x 1 emulated GPU with the variables on the GPUs: the bias all-reduced over MPI,
  # the table's rows and values all-gathered on the host after it; as the CPU towers within
  # 1e-5 relative (the GPU's float sums in another order).
  TOWERJIT_CUDA=emulator mpi 2 -x TOWERJIT_CUDA "$sparse_towers" train 1 "$work/gpus" gpus >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "two processes, GPU towers"; }
  "$sparse_towers" compare "$work/one" "$work/gpus" 1e-5 || fail "GPU towers over 2 processes differ" ;;
async_sparse_gradients)
  # Sparse gradients pushed to the parameter server as rows and values (tests/mpi/async_sparse_server.cpp):
  # none lost with 2 workers x 1 tower, 3 workers x 1 and 2 workers x 2 (V = 1, 7, 127); a
  # server and one worker on Adam bitwise as one process's async tower, and apart from the
  # dense gradient's Adam (so the push was sparse: SparseAdam's rows not read keep their moments);
  # and a reply's changed rows reaching the other worker.
  for layout in "3 1" "4 1" "3 2"; do
    set -- $layout
    mpi "$1" "$async_sparse" none_lost "$2" >"$work/out" 2>&1 || { cat "$work/out"; fail "$1 processes x $2 towers"; }
    [ "$(grep -c '; ok$' "$work/out")" = 3 ] || { cat "$work/out"; fail "$1 processes x $2 towers: not every vocabulary checked"; }
  done
  "$async_sparse" train "$work/alone" >"$work/out" 2>&1 || { cat "$work/out"; fail "one process"; }
  mpi 2 "$async_sparse" train "$work/served" >"$work/out" 2>&1 || { cat "$work/out"; fail "a server and a worker"; }
  "$async_sparse" train "$work/dense" dense >"$work/out" 2>&1 || { cat "$work/out"; fail "one process, dense"; }
  "$sparse_towers" compare "$work/alone" "$work/served" 0 || fail "the server's run is not one process's"
  if "$sparse_towers" compare "$work/alone" "$work/dense" 1e-3 >/dev/null; then fail "sparse and dense Adam agree: no sparse push"; fi
  # Replies carry a table's changed rows: one worker's rows reach the other (closed form).
  mpi 3 "$async_sparse" replies >"$work/out" 2>&1 || { cat "$work/out"; fail "a reply lost another worker's rows"; }
  grep -q '; ok$' "$work/out" || { cat "$work/out"; fail "replies: rank 0 did not report"; } ;;
trainer_misuse_is_named)
  # The mistakes only a world allows, each named with its line and fix on every rank
  # (tests/mpi/trainer_misuse.cpp): step() and run_async() with async towers, a sync step fed
  # the whole batch; and the layout determinism with the variables on the (emulated) GPUs.
  mpi 2 "$trainer_misuse" >"$work/out" 2>&1 || { cat "$work/out"; fail "see above"; }
  [ "$(grep -c ': ok$' "$work/out")" = 2 ] || { cat "$work/out"; fail "not every rank reported"; }
  (export TOWERJIT_CUDA=emulator TOWERJIT_GPU_VARIABLES=on TOWERJIT_DETERMINISTIC=layout
   mpi 2 -x TOWERJIT_CUDA -x TOWERJIT_GPU_VARIABLES -x TOWERJIT_DETERMINISTIC "$bin" $small --towers gpu:0) \
    >"$work/out" 2>&1 && fail "trained with the layout determinism and the variables on the GPUs"
  # Every rank finds the same error; the first to report it aborts the world, which may end the
  # other before it prints: either rank's line will do.
  grep -q "towerjit: rank [01] of 2: TOWERJIT_DETERMINISTIC=layout with the variables on the GPUs is not built; unset TOWERJIT_GPU_VARIABLES" \
    "$work/out" || { cat "$work/out"; fail "no error naming the two settings"; } ;;
async_loses_no_update)
  # The parameter server on rank 0: 2 workers x 1 tower, 3 workers (not a power of two) x 1,
  # and 2 workers x 2 towers, then with staleness bounds 0 and 1; every push applied once (the
  # linear model's w is exact), no tower past the bound.
  for layout in "3 1" "4 1" "3 2" "4 1 0" "3 2 1"; do
    set -- $layout
    mpi "$1" "$async_check" "$2" ${3:-} >"$work/out" 2>&1 || { cat "$work/out"; fail "$1 processes x $2 towers ${3:+bound $3}"; }
    grep -q "; ok" "$work/out" || { cat "$work/out"; fail "$1 processes x $2 towers: no result"; }
  done ;;
async_across_processes)
  # The example over a parameter server and 2 workers: it trains (the test loss falls below
  # the untrained 2.3), applies every slice once, and reports the staleness over every worker.
  mpi 3 "$bin" --steps 100 --batch 64 --hidden 32 --strategy async --towers cpu:0 >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "async over 3 processes"; }
  grep -q "^async: 200 applies, staleness mean" "$work/out" || { cat "$work/out"; fail "expected 200 applies"; }
  awk '/^test accuracy/ { ok = $6 + 0 < 1.5 } END { exit !ok }' "$work/out" || { cat "$work/out"; fail "it did not train"; } ;;
async_schedule_counts_every_worker)
  # A decaying learning rate's default length is the whole run's applies: 20 steps of 2 workers
  # (the server's own tower stays idle) are 40, whichever rank computes it.
  mpi 3 "$bin" --steps 20 --batch 64 --hidden 32 --strategy async --towers cpu:0 --lr-schedule cosine >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "async over 3 processes, cosine"; }
  grep -q "cosine_decay(lr0=0.001, decay_steps=40," "$work/out" || { cat "$work/out"; fail "expected decay_steps=40"; } ;;
launcher_detection)
  # Without a launcher a binary runs alone (tested everywhere else); a launcher's environment
  # with TOWERJIT_MPI=off runs alone too; with a plugin that cannot load, the error says what to do.
  OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 TOWERJIT_MPI=off "$bin" $small --steps 2 --towers cpu:0 >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "TOWERJIT_MPI=off under a launcher's environment"; }
  grep -q "processes over MPI" "$work/out" && fail "TOWERJIT_MPI=off still joined a world"
  OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 TOWERJIT_MPI_LIBRARY="$work/none.so" "$bin" $small --steps 2 \
    --towers cpu:0 >"$work/out" 2>&1 && fail "ran without its MPI plugin"
  grep -qF "this process was started by mpirun but the MPI transport $work/none.so cannot be loaded" "$work/out" ||
    { cat "$work/out"; fail "no clear error for a missing plugin"; }
  grep -qF "build towerjit with OpenMPI installed (libopenmpi-dev), set TOWERJIT_MPI_LIBRARY to the plugin, or TOWERJIT_MPI=off" \
    "$work/out" || { cat "$work/out"; fail "the missing plugin's error gives no fix"; }
  # A library that loads but is no MPI plugin of this build (here: towerjit's DSL library).
  other=$(cd "$(dirname "$bin")/../lib" && pwd)/libtowerjit_dsl.so
  OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 TOWERJIT_MPI_LIBRARY="$other" "$bin" $small --steps 2 \
    --towers cpu:0 >"$work/out" 2>&1 && fail "ran with a library that is no MPI plugin"
  grep -qF "the MPI transport $other has no towerjit_make_mpi_transport_v3; it belongs to another towerjit build" \
    "$work/out" || { cat "$work/out"; fail "no clear error for a plugin of another build"; } ;;
*) fail "unknown case $case_name" ;;
esac
