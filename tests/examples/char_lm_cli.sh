#!/bin/sh
# End-to-end checks of examples/char_lm: run by ctest as
#   char_lm_cli.sh <path to char_lm> <case>
# Each case exits 0 when the example behaves as its docs say, and prints why otherwise.
set -u
bin=$1
case_name=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-char-lm.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A small model for a few steps: seconds, not minutes.
small="--steps 30 --batch 16 --context 32 --dim 32 --heads 2 --layers 1 --lr 0.01 --sample 40 --log-every 10"

case "$case_name" in
  trains_and_samples)
    # Two CPU towers: the held-out loss falls below its value before training, every figure
    # the docs promise is printed, and the sample is as long as asked.
    [ -d /usr/share/common-licenses ] || { echo "SKIP: no /usr/share/common-licenses"; exit 77; }
    # shellcheck disable=SC2086
    "$bin" $small >"$work/out" 2>&1 || { cat "$work/out"; fail "the run failed"; }
    cat "$work/out"
    before=$(sed -n 's/^held-out loss \([0-9.]*\) at step 0 .*/\1/p' "$work/out")
    after=$(sed -n 's/^held-out loss \([0-9.]*\), perplexity.*/\1/p' "$work/out")
    [ -n "$before" ] && [ -n "$after" ] || fail "no held-out loss before and after training"
    awk -v a="$after" -v b="$before" 'BEGIN { exit !(a < b - 0.2) }' || fail "held-out loss $before -> $after: no fall"
    for text in "perplexity" "token accuracy" "unigram model (train counts, add-one): held-out loss" "sample (temperature"; do
      grep -qF -- "$text" "$work/out" || fail "no \"$text\" in the output"
    done
    ;;
  resume_is_the_uninterrupted_run)
    # 20 steps, then 10 more resumed from the checkpoint, end where 30 straight steps end: the
    # same held-out figures to every printed digit.
    [ -d /usr/share/common-licenses ] || { echo "SKIP: no /usr/share/common-licenses"; exit 77; }
    # shellcheck disable=SC2086
    "$bin" $small --steps 30 --sample 0 >"$work/straight" 2>&1 || { cat "$work/straight"; fail "the straight run failed"; }
    # shellcheck disable=SC2086
    "$bin" $small --steps 20 --sample 0 --checkpoint "$work/ck" >"$work/first" 2>&1 || { cat "$work/first"; fail "the first part failed"; }
    # shellcheck disable=SC2086
    "$bin" $small --steps 30 --sample 0 --checkpoint "$work/ck" --resume >"$work/resumed" 2>&1 ||
      { cat "$work/resumed"; fail "the resumed run failed"; }
    grep -qF "held-out loss" "$work/resumed" && grep -q "at step 20 " "$work/resumed" || { cat "$work/resumed"; fail "it did not resume at step 20"; }
    a=$(grep '^held-out loss .*perplexity' "$work/straight"); b=$(grep '^held-out loss .*perplexity' "$work/resumed")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "straight: \"$a\", resumed: \"$b\""
    ;;
  precision_f16_trains)
    # --precision f16: every matmul takes f16 operands, the loss scaled dynamically (the banner
    # shows the scale); the held-out loss falls as the f32 run's does.
    [ -d /usr/share/common-licenses ] || { echo "SKIP: no /usr/share/common-licenses"; exit 77; }
    # shellcheck disable=SC2086
    "$bin" $small --precision f16 >"$work/out" 2>&1 || { cat "$work/out"; fail "the run failed"; }
    grep -qF "precision=f16" "$work/out" && grep -qF "loss_scale=65536" "$work/out" ||
      { cat "$work/out"; fail "the banner does not show the f16 policy and the loss scale"; }
    before=$(sed -n 's/^held-out loss \([0-9.]*\) at step 0 .*/\1/p' "$work/out")
    after=$(sed -n 's/^held-out loss \([0-9.]*\), perplexity.*/\1/p' "$work/out")
    [ -n "$before" ] && [ -n "$after" ] || { cat "$work/out"; fail "no held-out loss before and after training"; }
    awk -v a="$after" -v b="$before" 'BEGIN { exit !(a < b - 0.2) }' || fail "held-out loss $before -> $after: no fall"
    ;;
  sync_async_embedding_trains)
    # The per-variable strategy: the token table applied from each of two towers' gradients as
    # it comes, the rest averaged; the held-out loss falls as the sync run's does.
    [ -d /usr/share/common-licenses ] || { echo "SKIP: no /usr/share/common-licenses"; exit 77; }
    # shellcheck disable=SC2086
    "$bin" $small --strategy sync-async-embed >"$work/out" 2>&1 || { cat "$work/out"; fail "the run failed"; }
    grep -qF "with(tok/*)=async_apply" "$work/out" || { cat "$work/out"; fail "the towers do not show the rule"; }
    before=$(sed -n 's/^held-out loss \([0-9.]*\) at step 0 .*/\1/p' "$work/out")
    after=$(sed -n 's/^held-out loss \([0-9.]*\), perplexity.*/\1/p' "$work/out")
    [ -n "$before" ] && [ -n "$after" ] || { cat "$work/out"; fail "no held-out loss before and after training"; }
    awk -v a="$after" -v b="$before" 'BEGIN { exit !(a < b - 0.2) }' || fail "held-out loss $before -> $after: no fall"
    ;;
  missing_corpus)
    "$bin" --corpus "$work/none.txt" >"$work/out" 2>&1 && fail "a missing corpus was accepted"
    grep -qF "char_lm: no corpus at $work/none.txt" "$work/out" || { cat "$work/out"; fail "no clear message"; }
    grep -qF -- "--corpus FILE" "$work/out" || fail "the message does not say how to give a corpus"
    ;;
  rank_zero_prints)
    # Under mpirun (2 processes on loopback, as tests/mpi/mpi_cli.sh runs them) both ranks
    # train and rank 0 alone prints: one banner, one final figure, one sample.
    [ -d /usr/share/common-licenses ] || { echo "SKIP: no /usr/share/common-licenses"; exit 77; }
    command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (install openmpi-bin)"; exit 77; }
    # Under ASan, the complete unwinder, so Open MPI's leaks at exit match lsan.supp (as in
    # tests/mpi/mpi_cli.sh: Open MPI has no frame pointers).
    case ${ASAN_OPTIONS-} in ?*) export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" ;; esac
    # shellcheck disable=SC2086
    mpirun --oversubscribe --allow-run-as-root -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo \
      "$bin" $small --steps 10 >"$work/out" 2>&1 || { cat "$work/out"; fail "the run failed"; }
    for text in "towerjit: GPT" "trained to step 10" "sample (temperature"; do
      [ "$(grep -cF -- "$text" "$work/out")" = 1 ] || { cat "$work/out"; fail "\"$text\" is not printed exactly once"; }
    done
    ;;
  *) fail "unknown case $case_name" ;;
esac
