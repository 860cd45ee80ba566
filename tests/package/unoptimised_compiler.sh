#!/bin/sh
# A compiler launcher (CMAKE_CXX_COMPILER_LAUNCHER) that compiles without optimisation or debug
# information, whatever the build type asks: `package: subdirectory` tests the CMake side of
# add_subdirectory (targets, options, what gets configured, that the program links and runs).
# The libraries' code is the main build's, already compiled and tested there; compiled again at
# -O3 it took 6 to 11 minutes of both cores, at -O0 a fraction of that.
#   unoptimised_compiler.sh <compiler> <arguments...>
compiler=$1
shift
for arg; do
  shift
  case $arg in
    -O*) set -- "$@" -O0 ;;
    -g | -g[0-3]) ;;
    *) set -- "$@" "$arg" ;;
  esac
done
exec "$compiler" "$@"
