#!/bin/sh
# Keeps docs/errors.md true: run by ctest as
#   errors_catalogue.sh <docs/errors.md> <towerjit_tests> <file of the CLI test names>
# Every entry ("### N. title", numbered 1, 2, ... in order) quotes at least one message (a
# ```text block, or a ```console block for what an example printed) and names at least one test ("Test: `name`"); the count in the first line that
# says "N entries" is the number of entries; every named test exists (a Catch2 case of
# towerjit_tests or a ctest entry of the CLI scripts); and every quoted message appears, word
# for word, in what its Catch2 test prints with -s (line numbers after "file.cpp:" and "file.h:"
# aside, so moving a test does not break its entry). A ```console message, the example's, is
# checked by its CLI script (tests/examples/fashion_mnist_cli.sh, tests/mpi/mpi_cli.sh).
set -u
doc=$1
tests_bin=$2
cli_names=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/towerjit-errors.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# Records, tab-separated: E <n> <title> | M <n> <message> | C <n> <message the example printed,
# a ```console block, checked by its CLI script> | T <n> <test name>.
awk '
  /^### [0-9]+\. / { n = $2; sub(/\.$/, "", n); t = $0; sub(/^### [0-9]+\. /, "", t); print "E\t" n "\t" t; next }
  /^```(text|console)$/ { if (n != "") { inmsg = 1; kind = $0 ~ /text/ ? "M" : "C"; msg = "" } next }
  /^```$/ { if (inmsg) print kind "\t" n "\t" msg; inmsg = 0; next }
  inmsg { msg = msg (msg == "" ? "" : " ") $0; next }
  /^Tests?: / && n != "" {
    line = $0
    while (match(line, /`[^`]+`/)) { print "T\t" n "\t" substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, RSTART + RLENGTH) }
  }
' "$doc" >"$work/records"

# (Catch2 2 exits with the number of tests it listed.)
"$tests_bin" --list-test-names-only >"$work/catch_names"
[ -s "$work/catch_names" ] || fail "cannot list the tests of $tests_bin"
cat "$work/catch_names" "$cli_names" >"$work/all_names"

# Numbered in order, and counted in the first line that gives a count.
entries=$(grep -c '^E' "$work/records")
expected=1
for n in $(awk -F '\t' '$1 == "E" { print $2 }' "$work/records"); do
  [ "$n" = "$expected" ] || fail "entry $n comes where entry $expected should"
  expected=$((expected + 1))
done
stated=$(grep -m 1 -o '[0-9][0-9]* entries' "$doc" | cut -d ' ' -f 1)
[ "${stated:-none}" = "$entries" ] || fail "$doc says ${stated:-no number of} entries but holds $entries"

# What a line or a message reads as once spacing, line numbers (file.cpp:N), temporary paths
# (/tmp/towerjit-...: named by the process), checksums (of files holding such paths) and the
# numbers Catch2 gives its test functions (the outermost frame of a call stack) are set aside.
normalise() {
  tr -s ' \t\n' '   ' |
    sed -E 's/\.(cpp|h):[0-9]+/.\1:N/g; s#/tmp/towerjit-[^/" ]*#/tmp/towerjit-T#g; s/\.tmp-[0-9-]+/.tmp-N/g;
            s/stored [0-9a-f]+, computed [0-9a-f]+/stored X, computed X/g; s/C_A_T_C_H_T_E_S_T_[0-9]+/C_A_T_C_H_T_E_S_T_N/g'
}

n=1
while [ "$n" -le "$entries" ]; do
  awk -F '\t' -v n="$n" '$1 == "T" && $2 == n { print $3 }' "$work/records" >"$work/tests"
  awk -F '\t' -v n="$n" '$1 == "M" && $2 == n { print $3 }' "$work/records" >"$work/messages"
  [ -s "$work/tests" ] || fail "entry $n names no test"
  grep -q "^[MC]	$n	" "$work/records" || fail "entry $n quotes no message"
  : >"$work/printed"
  while IFS= read -r name; do
    grep -qxF -- "$name" "$work/all_names" || { fail "entry $n names \"$name\", which is not a test"; continue; }
    if grep -qxF -- "$name" "$work/catch_names"; then
      # Catch2 reads a leading/trailing space, a comma or a backslash in a name as syntax.
      spec=$(printf '%s' "$name" | sed 's/[\\,]/\\&/g')
      "$tests_bin" "$spec" -s -r compact --use-colour no 2>&1 | normalise >>"$work/printed"
    fi
  done <"$work/tests"
  if [ -s "$work/printed" ]; then
    while IFS= read -r message; do
      want=$(printf '%s' "$message" | normalise)
      grep -qF -- "$want" "$work/printed" || fail "entry $n: its test does not print the message: $message"
    done <"$work/messages"
  fi
  n=$((n + 1))
done
[ "$status" = 0 ] && echo "docs/errors.md: $entries entries, each with its test and its message"
exit "$status"
