// A row's sum in kLanes interleaved lanes (lane l adds terms l, l + 8, ... in order), the lanes
// then added in a fixed tree: the compiler turns the lanes into one vector add a step without
// reordering any float sum, so the result is the same at every vector width and run to run.
// For the hand-written CPU routines (layer_norm.cpp, softmax.cpp, attention.cpp).
#pragma once

#include <cstdint>

namespace towerjit::cpujit {

constexpr int kLanes = 8;

// sum over j < n of term(j), lane by lane, then the lanes in a fixed tree.
template <typename Term>
inline __attribute__((always_inline)) float lane_sum(int64_t n, Term term) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += term(j + l);
  for (int l = 0; j + l < n; ++l) acc[l] += term(j + l);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace towerjit::cpujit
