#!/usr/bin/env bash
# Counts the branch sites on strategy kind, device kind or transport in the tower runtime (the
# measure docs/architecture.md quotes). A branch site is a source line that both
#   - branches: `if (`, `else if`, `while (`, `? ... :`, `switch (`, or a user_check / internal_check
#     condition (a check on the strategy refuses a combination: a branch by another name), and
#   - tests one of the predicates below: the reduction kind (is_async, holds_alternative<Sync*|
#     AsyncApply>, sync_variant, SyncVariant::), where the variables live (on_gpus, gpu_variables,
#     replicated(), GpuResidentSync members), the device kind (DeviceKind::), or the transport
#     (world size, shared, across_processes, async_world, parameter_server_rank, nccl_, combine_,
#     deterministic layout).
# Comments are skipped. Usage: scripts/count_branch_sites.sh [files...] (default: the trainer's
# folders, dsl/towers.*, the fashion_mnist example and the GPU bench); prints per file, then the total.
set -euo pipefail
cd "$(dirname "$0")/.."
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(ls runtime/towers/*.{h,cpp} runtime/towers/strategies/*.{h,cpp} runtime/dist/*.{h,cpp} \
                          dsl/towers.{h,cpp} examples/fashion_mnist.cpp bench/gpu_bench.cpp 2>/dev/null)
fi
branch='(\bif \(|\bwhile \(|\bswitch \(|[?][^:]*:|user_check\(|internal_check\()'
pred='(is_async|holds_alternative<(Sync|Async)|sync_variant|SyncVariant::|on_gpus|gpu_variables|replicated\(\)|'\
'DeviceKind::|->size\(\) > 1|world[_a-z]*(\.|->)size\(\) == 1|\bw\.size\(\) == 1|\bshared\b|across_processes|mpi_between_processes|async_world|'\
'parameter_server_rank|nccl_|combine_|deterministic_layout|world_is_shared)'
total=0
for f in "${files[@]}"; do
  n=$(sed -e 's://.*$::' "$f" | grep -E "$branch" | grep -cE "$pred" || true)
  if [ "$n" -gt 0 ]; then printf '%4d  %s\n' "$n" "$f"; total=$((total + n)); fi
done
printf '%4d  total\n' "$total"
