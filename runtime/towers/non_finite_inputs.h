// Where a batch holds a value that is not finite: what the messages of a NaN or infinite loss
// (TowerTrainer::step, fit) name as its cause before blaming the learning rate.
#pragma once

#include <string>

#include "runtime/host_tensor.h"

namespace towerjit {

// The first f32 element of `feeds` that is NaN or infinite, in words (`input "image" holds NaN
// at example 3`), or "" when every element is finite.
std::string first_non_finite_input(const HostFeeds& feeds);

}  // namespace towerjit
