# Loss curves of the example's metrics files, for tests/mpi/mpi_cli.sh and srun_cli.sh (sourced).

# Every step's loss in metrics file $1, one a line, exactly as written.
losses() { grep '"kind":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
# Whether files $1 and $2 hold $3 losses each, within a relative $4 of each other.
close() {
  paste "$1" "$2" | awk -v n="$3" -v tol="$4" '
    { d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; if ($2 == "" || d > tol * a) bad++ }
    END { exit !(NR == n && bad == 0) }'
}
