// The world: every process of one training run. A process started by hand is a world of one,
// with the in-process transport. A process started by mpirun or srun (its environment says so:
// OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK) joins the launch's world over MPI: the MPI plugin
// is loaded then, and only then, so a binary run alone never loads libmpi nor waits in
// MPI_Init. towerjit never launches processes itself.
//
// Under MPI each process runs its own towers (the example's --towers); the world's towers are
// every process's, in rank order (WorldLayout). The sync trainer reduces its towers in-process,
// then the processes all-reduce through world(); see docs/distributed.md.
#pragma once

#include <cstdint>
#include <map>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/dist/transport.h"
#include "runtime/dist/world_layout.h"

namespace towerjit::dist {

using Loc = std::source_location;

// How this process was started: by a launcher (and which), or by hand.
struct Launch {
  bool launched = false;
  std::string launcher;  // "mpirun", "srun" or "a PMI launcher"; empty when started by hand
};
// From the environment; TOWERJIT_MPI=off says "started by hand" whatever it holds.
Launch detect_launch();

// This process's world, made on the first call (MPI's start-up then, under a launcher).
// Errors (towerjit::Error): launched, but the MPI plugin cannot be loaded or MPI cannot start
// (the message names the plugin and MPI's reason).
Transport& world(Loc loc = Loc::current());
// Whether world() was made with several processes, without making it.
bool world_is_shared();

// "rank 1 of 4: " in a world of several processes, else "": the start of every message a rank
// prints about itself.
std::string rank_prefix();

// Gathers every rank's tower count into a WorldLayout (runtime/dist/world_layout.h); collective:
// every rank calls it.
WorldLayout world_layout(int own_towers, Loc loc = Loc::current());

// Checks that every rank has the same value for each key (a hash of the graph, the flags):
// a difference is an error on every rank, naming the key, the ranks and their values (long
// values are shown by their hash). Collective. Every rank must pass the same keys.
void check_agreement(const std::map<std::string, std::string>& items, Loc loc = Loc::current());

// For a rank's main() after it printed an error: in a world of several processes, ends every
// rank now (MPI_Abort), so none waits for this one in a collective; alone, returns.
void abort_world_on_error(int code);

// A short, stable hash of `text` (FNV-1a, 64 bits, hex), for comparing large values.
std::string text_hash(const std::string& text);

}  // namespace towerjit::dist
