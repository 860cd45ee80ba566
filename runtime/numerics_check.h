// TOWERJIT_CHECK_NUMERICS (tf.debugging.check_numerics, torch.autograd.detect_anomaly): after
// each step of a program, CPU or GPU (whose buffers are copied back to the host for it), its
// output buffer is scanned for NaN and infinities; the first step
// to write one stops the run with a towerjit::Error naming the op (and the ops fused with it),
// the user's file:line and scope, and where the bad value came from: an input or variable
// already holding one, or finite operands (the op itself overflowed, divided 0 by 0, took the
// log of 0...). It costs a pass over every buffer written, so it is off by default.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"
#include "runtime/host_tensor.h"

namespace towerjit {

// The run's feeds and variables as host tensors; asked for only when a fused kernel went wrong
// (a GPU's are copied back then).
using HostInputs = std::function<std::pair<HostFeeds, HostVariables>()>;

// Checks what step `step` of `program` wrote (buffers bound at `base`, in host memory, for
// `batch`); throws on the first non-finite element. `graph` is the program's optimised graph;
// `inputs` and `random_step` are the run's, with which the reference interpreter finds, inside
// a fused kernel, the first op whose value is not finite in float.
void check_step_numerics(const Graph& graph, const kir::Program& program, size_t step,
                         const std::vector<void*>& base, int64_t batch, const HostInputs& inputs,
                         uint64_t random_step);

}  // namespace towerjit
