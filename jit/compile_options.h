// How towerjit compiles from now on, for the whole process: where the compile cache lives,
// whether each compiled program's sources are written out for reading, whether programs check
// their outputs for NaN and infinities. A program chooses through these fields; each has an
// environment variable that, when set, overrides it (jit/knobs.h), a way to try a setting
// without rebuilding.
//
//   tj::set_compile_options({.dump_dir = "runs/dump", .check_numerics = true});
#pragma once

#include <string>

namespace towerjit {

struct CompileOptions {
  // TOWERJIT_CACHE_DIR: the compile cache's directory; empty: $XDG_CACHE_HOME/towerjit, else
  // ~/.cache/towerjit.
  std::string cache_dir = {};
  // TOWERJIT_DUMP: each compiled program's kernels (.cu, .ptx, .ll), kernel IR and an index of
  // which of your lines went into which kernel, written to this directory; empty: no dumps.
  std::string dump_dir = {};
  // TOWERJIT_CHECK_NUMERICS: every program, CPU or GPU, checks each step's outputs and stops at
  // the first NaN or infinity, naming the op and your line (docs/getting-started.md).
  bool check_numerics = false;
};

// Programs compiled after this call follow `options` (those compiled before keep what they
// had). Thread-safe; meant to be called once, at the start of main().
void set_compile_options(const CompileOptions& options);
// The options as last set (before the environment's overrides).
CompileOptions compile_options();

}  // namespace towerjit
