// Where each process's towers sit in the world's tower order (runtime/dist/world.h has the
// world itself): the part of the world a user reads, through TowerTrainer::world_layout().
#pragma once

#include <vector>

namespace towerjit::dist {

struct WorldLayout {
  std::vector<int> towers_of_rank;  // every rank's tower count, in rank order
  int rank = 0;
  int first_tower = 0;  // this rank's first tower's global index
  int towers() const;   // every rank's together
  int own() const { return towers_of_rank.at(rank); }
};

}  // namespace towerjit::dist
