#!/bin/sh
# examples/fashion_mnist over several processes under Slurm's real srun, on a private one-node
# Slurm cluster this script starts for the case and stops after it: run by ctest (label `mpi`) as
#   srun_cli.sh <path to fashion_mnist> <case>
# Each case exits 0 when the run behaves as docs/distributed.md says, 77 (skipped) when Slurm
# (slurmctld, slurmd, srun) is missing, and prints why otherwise.
set -u
bin=$1
case_name=$2
for tool in slurmctld slurmd srun sinfo scancel; do
  command -v $tool >/dev/null 2>&1 || { echo "SKIP: no $tool (install slurm-wlm)"; exit 77; }
done
# The private cluster's slurmd runs as root, as slurmd does, to start tasks as their user (CI
# runs as root).
[ "$(id -u)" = 0 ] || { echo "SKIP: not root: the private Slurm cluster's slurmd runs as root"; exit 77; }
# As in mpi_cli.sh: under ASan, the complete unwinder, for scripts/sanitizers/lsan.supp.
case ${ASAN_OPTIONS-} in ?*) export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-srun.XXXXXX")
ctld_pid="" slurmd_pid=""
# Always: cancel what is left of the jobs, stop both daemons (SIGTERM, then SIGKILL after 10 s)
# and wait for them, so nothing outlives the test.
stop_cluster() {
  [ -n "$ctld_pid" ] && timeout 10 scancel --quiet --full --user="$(id -un)" 2>/dev/null
  for pid in $slurmd_pid $ctld_pid; do
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
}
trap 'stop_cluster; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP PIPE
fail() { echo "FAIL: $*"; [ -s "$work/slurmd.log" ] && { echo "--- slurmd.log"; tail -n 20 "$work/slurmd.log"; }; exit 1; }

# A Slurm cluster of its own: no SLURM_* of an enclosing job (srun would join that job), and
# SLURM_CONF names this cluster's file for every client command (never /etc/slurm).
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export SLURM_CONF="$work/slurm.conf"

# Two free TCP ports (controller, node daemon), drawn at random so that two of these clusters,
# from two builds' ctest runs, can run at once on one machine.
free_port() {
  for _ in $(seq 1 100); do
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 40000))
    ss -Htln "sport = :$port" | grep -q . || { echo "$port"; return; }
  done
  echo "no free port found" >&2
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
[ -n "$ctld_port" ] && [ -n "$slurmd_port" ] || fail "no free TCP port for the private Slurm cluster"
[ "$slurmd_port" != "$ctld_port" ] || slurmd_port=$((ctld_port + 1))
node=$(hostname -s)
mkdir -p "$work/state" "$work/spool" "$work/tmp"
# auth/none and cred/none: one node of one user that lives as long as this test, so no munged
# (Debian's Slurm 22.05 still ships both plugins). select/linear gives a job the whole node and
# srun -O (overcommit) lets it run more tasks than the node has CPUs: 3 ranks on 2 cores.
# proctrack/linuxproc and task/none: no cgroups, which a container may not offer. MpiDefault=pmix:
# Debian's Open MPI 4.1 starts its ranks over PMIx (its ext3x component on libpmix2), and Slurm's
# mpi/pmix (PMIx v4, the same libpmix2) serves them; the cases still say --mpi=pmix, as a user
# would on a cluster whose default is another. TmpFS: the PMIx plugin's sockets go there.
# 127.0.0.1 for both daemons: the host's name need not resolve.
cat >"$SLURM_CONF" <<EOF
ClusterName=towerjit
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
TmpFS=$work/tmp
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
ReturnToService=2
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=towerjit Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D >"$work/slurmctld.out" 2>&1 &
ctld_pid=$!
slurmd -D >"$work/slurmd.out" 2>&1 &
slurmd_pid=$!
# Up when the node is idle (30 s at most: both daemons start in about a second).
for _ in $(seq 1 150); do sinfo -h -o %T 2>/dev/null | grep -q '^idle' && break; sleep 0.2; done
sinfo -h -o %T 2>/dev/null | grep -q '^idle' ||
  { cat "$work/slurmctld.out" "$work/slurmd.out"; tail -n 20 "$work/slurmctld.log"; fail "the private Slurm cluster did not come up within 30 s"; }

# srun as a user runs it, bounded: a job that cannot be placed would otherwise wait for ever.
# Open MPI's settings come through the environment (srun passes it on; there is no mpirun to
# give --mca to): loopback TCP and the ring all-reduce, as mpi_cli.sh pins them, so a layout's
# runs repeat and compare with the single process's.
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=4
# The ranks' session directories in this run's folder, as mpi_cli.sh keeps them apart from a
# concurrent case's.
export OMPI_MCA_orte_tmpdir_base="$work"
slurm_run() { timeout 150 srun --mpi=pmix -O --immediate=30 "$@"; }

. "$(dirname "$0")/curves.sh"  # losses, close

small="--steps 40 --batch 64 --hidden 32 --log-every 1 --optimizer momentum --lr 0.05"
case $case_name in
two_processes_same_curve)
  # srun -n 2 x 1 tower trains as 1 process x 2 towers: 40 losses within 1e-6 relative; rank 0
  # alone prints the result and writes the metrics.
  "$bin" $small --towers cpu:0,cpu:1 --metrics "$work/one.jsonl" >/dev/null 2>&1 || fail "one process"
  slurm_run -n 2 "$bin" $small --towers cpu:0 --metrics "$work/two.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "two processes under srun"; }
  grep -q "towerjit: 2 processes over MPI" "$work/out" || { cat "$work/out"; fail "rank 0 does not say it runs over MPI"; }
  [ "$(grep -c "^test accuracy" "$work/out")" = 1 ] || { cat "$work/out"; fail "every rank printed the result; only rank 0 should"; }
  losses "$work/one.jsonl" >"$work/one"; losses "$work/two.jsonl" >"$work/two"
  close "$work/one" "$work/two" 40 1e-6 || { paste "$work/one" "$work/two"; fail "the loss curves differ by more than 1e-6"; } ;;
three_processes_uneven_batch)
  # 3 ranks on the node's 2 CPUs (srun -O), batch 64 = 21 + 21 + 22, as 3 towers in one process.
  "$bin" $small --towers cpu:0,cpu:1,cpu:2 --metrics "$work/one.jsonl" >/dev/null 2>&1 || fail "one process"
  slurm_run -n 3 "$bin" $small --towers cpu:0 --metrics "$work/three.jsonl" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "three processes under srun"; }
  grep -q "towerjit: 3 processes over MPI" "$work/out" || { cat "$work/out"; fail "rank 0 does not say it runs over MPI"; }
  losses "$work/one.jsonl" >"$work/one"; losses "$work/three.jsonl" >"$work/three"
  close "$work/one" "$work/three" 40 1e-6 || { paste "$work/one" "$work/three"; fail "3x1 and 1x3 differ by more than 1e-6"; } ;;
raising_rank_stops_all)
  # A rank that raises (here rank 1, given no data through srun --multi-prog) prints why, naming
  # itself; its MPI_Abort reaches Slurm over PMIx, which cancels the step: the other rank stops
  # at once rather than wait in a collective, and srun fails.
  printf '0 %s %s --towers cpu:0\n1 %s %s --towers cpu:0 --data %s\n' "$bin" "$small" "$bin" "$small" "$work/none" \
    >"$work/ranks.conf"
  start=$(date +%s)
  slurm_run -n 2 --multi-prog "$work/ranks.conf" >"$work/out" 2>&1 && { cat "$work/out"; fail "the run succeeded"; }
  [ $(($(date +%s) - start)) -le 30 ] || { cat "$work/out"; fail "the other rank took more than 30 s to stop"; }
  grep -q "towerjit: rank 1 of 2: .*$work/none" "$work/out" || { cat "$work/out"; fail "the error does not name rank 1 and the cause"; }
  # srun reports rank 0 alone ("task 0: Killed"), or with rank 1 when the step's cancel reached
  # rank 1 before its own MPI_Abort returned ("tasks 0-1: Killed").
  grep -Eq "tasks? 0(-1)?: Killed" "$work/out" || { cat "$work/out"; fail "Slurm did not end rank 0"; } ;;
srun_without_pmi_stops)
  # srun --mpi=none (what a cluster whose MpiDefault is none gives) starts the tasks without PMI:
  # rather than each train the whole run alone over the same files, every task stops at start-up
  # saying what to run; TOWERJIT_MPI=off runs them alone on purpose.
  timeout 150 srun --mpi=none -O --immediate=30 -n 2 "$bin" $small --towers cpu:0 >"$work/out" 2>&1 &&
    { cat "$work/out"; fail "the tasks trained, each alone"; }
  for task in 0 1; do
    grep -qF "srun started this process as task $task of 2 without PMI (no PMIX_RANK nor PMI_RANK: srun --mpi=none," \
      "$work/out" || { cat "$work/out"; fail "task $task does not say it has no PMI"; }
  done
  grep -q "^test accuracy" "$work/out" && { cat "$work/out"; fail "a task trained"; }
  TOWERJIT_MPI=off timeout 150 srun --mpi=none -O --immediate=30 -n 2 "$bin" $small --steps 2 --towers cpu:0 \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "TOWERJIT_MPI=off: the tasks did not run alone"; }
  [ "$(grep -c "^test accuracy" "$work/out")" = 2 ] || { cat "$work/out"; fail "TOWERJIT_MPI=off: not 2 runs alone"; } ;;
*) fail "unknown case $case_name" ;;
esac
exit 0
