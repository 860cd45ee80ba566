// Checkpoints: everything a training run needs to continue where it stopped — every variable
// (model, optimiser slots, EMA shadows, the global step), the step, the input pipeline's
// position and a few strings describing the run — in one binary file per step, written so that
// a crash at any moment leaves the previous checkpoints and `latest` intact.
//
// A checkpoint directory holds ckpt-<step>.tjck files and a text file `latest`: its first line
// names the newest checkpoint, the following lines the other kept ones, newest first.
#pragma once

#include <cstdint>
#include <map>
#include <source_location>
#include <string>

#include "runtime/data/batch_pipeline.h"
#include "runtime/host_tensor.h"

namespace towerjit {

struct Checkpoint {
  int64_t step = 0;                                  // optimiser applies so far
  data::PipelinePosition position = {};              // the next batch the run reads
  HostVariables variables = {};                      // f32, bf16, f16 or i32 tensors, by name
  std::map<std::string, std::string> metadata = {};  // e.g. "model", "strategy": for people and checks
  // (The `= {}` lets designated initialisers omit them without -Wmissing-field-initializers.)
};

// Writes <dir>/ckpt-<step>.tjck atomically (a temporary file in `dir`, written, fsynced, renamed
// into place, then the directory fsynced), then replaces <dir>/latest the same way, then
// deletes the checkpoints that fall out of the newest `keep` ones (newest = most recently
// saved, so a run resumed from an older step prunes the abandoned run's later checkpoints
// first). Files the directory's `latest` never listed are left alone. Saving a step that
// exists replaces it. Creates `dir` if missing. Returns the checkpoint's path. Errors
// (towerjit::Error, at `loc`): a negative step, keep below 1, a variable whose data does not
// fill its shape, a directory that cannot be created or written (naming the path and the
// system's reason); after an error the previous checkpoints and `latest` are as they were and
// no temporary file is left behind (nor the new checkpoint, when `latest` could not be written).
std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep = 3,
                            Loc loc = Loc::current());

// Writes `checkpoint` to the file `path` atomically (as save_checkpoint writes its files), with
// no `latest` and no rotation: for a checkpoint kept by another rule, such as the best one.
// Errors as save_checkpoint's.
void write_checkpoint(const std::string& path, const Checkpoint& checkpoint, Loc loc = Loc::current());

// Removes the temporary files that writes cut short by a crash left in `dir`
// (".ckpt-<step>.tjck.tmp-<pid>-<n>", and those of `latest` and best.tjck); other files stay.
// Only safe while no other process saves to `dir`: CheckpointHook calls it holding the
// directory's lock. Returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

// Reads a checkpoint file, or the one a directory's `latest` names; when that one is damaged,
// the newest older one `latest` lists that loads, with a warning on stderr naming both.
// Errors name the file and the problem: missing (or a directory without `latest`), not a
// towerjit checkpoint (magic), an unsupported format version, truncated, damaged (checksum
// mismatch) — for a directory, when no checkpoint it lists loads.
Checkpoint load_checkpoint(const std::string& path, Loc loc = Loc::current());

// Checks that a checkpoint's variables are exactly the model's: the same names, shapes and
// dtypes. Errors name the first problem and count the others; the model's variables are
// checked first, in name order (one the checkpoint lacks, or holds with another shape or
// dtype: both printed), then the checkpoint's extras (a variable the model lacks).
void check_matches(const Checkpoint& checkpoint, const HostVariables& model, Loc loc = Loc::current());

}  // namespace towerjit
