// The program that sums the towers' values on a GPU, each weighted: the in-device reduction of
// the GPU-resident sync strategy (gpu_resident_sync.h) and of the placed sync strategy
// (strategies/sync_placed.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_program.h"

namespace towerjit {

// The inputs' names: set i's k-th tensor, and set i's weights for gradients and for the
// model's updates.
std::string part(int set, size_t k);
std::string gradient_weight(int set);
std::string update_weight(int set);

// A program on `device` forming, for every k, Σ_i weight_i · s<i>/<k> over `sets` sets of
// tensors of `shapes`: gradients weighted by the scalar input w<i>, the model's updates
// (`is_update[k]`) by m<i>. towerjit fuses it into a few elementwise kernels. The gradients
// come in `gradients_in` and leave in `gradients_out` (bf16 or f16 for a compressed all-reduce:
// the sum taken in f32, rounded once); the updates stay f32.
std::unique_ptr<CudaProgram> weighted_sum(int sets, const std::vector<Shape>& shapes, const std::vector<bool>& is_update,
                                          const Device& device, const std::string& name, Loc loc,
                                          DType gradients_in = DType::f32, DType gradients_out = DType::f32);

// A program on `device` widening tensors of `shapes` from bf16 or f16 (inputs s0/<k>) to f32:
// a compressed all-reduce's result, for the apply.
std::unique_ptr<CudaProgram> widened(const std::vector<Shape>& shapes, DType from, const Device& device,
                                     const std::string& name, Loc loc);

}  // namespace towerjit
