#!/usr/bin/env bash
# Takes a built tree to a machine with an NVIDIA GPU that lacks this machine's build
# dependencies (LLVM 19, Protobuf, OpenBLAS: the GPU machines lent to this project have CUDA and
# PyTorch but no Debian packages), so that scripts/gpu-check.sh --no-build runs there.
#
#   scripts/carry-tree.sh pack <build dir> <carry dir>     here: <carry dir>/tree.tar.xz, libs.tar.xz
#   scripts/carry-tree.sh unpack <carry dir> <build dir>   there; then, as it says:
#       export LD_LIBRARY_PATH=<carry dir>/lib:...; scripts/gpu-check.sh --no-build --build-dir <build dir>
#
# The tree is what gpu-check.sh runs: the libraries, the gpu tests and their ctest files, the two
# benchmarks. The binaries find their libraries by the absolute paths they were built with (their
# RUNPATH, the ctest files), so `unpack` links the source directory's old path to where it now is
# when that path is free. The shared libraries come from ldd: every one the binaries and OpenBLAS
# need but the C and C++ runtimes, which the other machine has in newer versions. `unpack`
# keeps only those the machine does not have.
set -euo pipefail
cmd=${1:-} ; from=${2:-} ; to=${3:-}
[[ -n $cmd && -n $from && -n $to ]] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
source_dir=$(cd "$(dirname "$0")/.." && pwd)

case $cmd in
pack)
  build=$(cd "$from" && pwd)
  mkdir -p "$to"
  carry=$(cd "$to" && pwd)
  bins=(tests_gpu/towerjit_gpu_tests bench/towerjit_bench bench/towerjit_gpu_bench)
  libs=()
  for f in "$build"/lib/libtowerjit_*.so; do [[ $f == *_mpi.so ]] || libs+=("lib/${f##*/}"); done
  (cd "$build" && tar -cf - "${bins[@]}" "${libs[@]}" tests_gpu/*.cmake | xz -6 -T0 > "$carry/tree.tar.xz")
  echo "$source_dir" > "$carry/source_dir"
  openblas=$(readlink -f "$(ldconfig -p | awk '/libopenblas\.so\.0 /{print $NF; exit}')")
  needed=$(for f in "${bins[@]}" "${libs[@]}"; do ldd "$build/$f"; done; ldd "$openblas")
  mkdir -p "$carry/lib"
  printf '%s\n' "$needed" | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
    case $name in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|libdl.so*|libpthread*|librt.so*|libtowerjit_*) ;;
      *) cp -L "$path" "$carry/lib/$name" ;;
    esac
  done
  cp -L "$openblas" "$carry/lib/libopenblas.so.0"
  ln -sf libopenblas.so.0 "$carry/lib/libopenblas.so"
  (cd "$carry" && tar -cf - lib | xz -6 -T0 > libs.tar.xz && rm -rf lib)
  du -sh "$carry"/* ;;
unpack)
  carry=$(cd "$from" && pwd)
  mkdir -p "$to"
  build=$(cd "$to" && pwd)
  old_source=$(cat "$carry/source_dir")
  if [[ $old_source != "$source_dir" && ! -e $old_source ]]; then
    mkdir -p "$(dirname "$old_source")" && ln -s "$source_dir" "$old_source"
  fi
  [[ -e $old_source ]] || { echo "carry-tree: $old_source is missing" >&2; exit 1; }
  # The build directory by its old path as well: the RUNPATHs and ctest files name it.
  old_build=$old_source/${build#"$source_dir"/}
  xz -dc "$carry/tree.tar.xz" | tar -xf - -C "$build"
  [[ -e $old_build ]] || ln -s "$build" "$old_build"
  (cd "$carry" && xz -dc libs.tar.xz | tar -xf -)
  for f in "$carry"/lib/*; do
    name=${f##*/}
    if ldconfig -p | grep -q "^[[:space:]]$name "; then rm -f "$f"; fi
  done
  echo "carry-tree: libraries this machine lacks, in $carry/lib: $(ls "$carry/lib" | tr '\n' ' ')"
  echo "export LD_LIBRARY_PATH=$carry/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" ;;
*) echo "carry-tree: pack or unpack, not $cmd" >&2; exit 2 ;;
esac
