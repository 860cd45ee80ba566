// Helpers shared by the files that build op nodes. Not part of the public DSL.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dsl/error.h"
#include "dsl/ops.h"

namespace towerjit::detail {

// Appends a node to `graph` and returns its tensor.
Tensor make(Graph& graph, Op op, std::vector<int> inputs, Shape shape, DType dtype,
            Attrs attrs, Loc loc);

// Errors, naming `op` and the shapes of `inputs`, when `shape` holds the batch dimension twice
// (a broadcast of [1,B] with [B,1]); make() checks every node under its op's name.
void check_batch_once(const Shape& shape, std::string_view op, const std::vector<int>& inputs,
                      const Graph& graph, Loc loc);

// ` in "fc1/dense"` when the graph is inside a scope, else "": the "where" of a message.
std::string in_scope(const Graph& graph);

// The graph the operands belong to; errors when they belong to different graphs or none is
// a tensor (then the current graph is used).
Graph& graph_of(std::initializer_list<const Operand*> operands, const char* op, Loc loc);

// The operand as a tensor of `graph`: a number becomes a scalar constant of `dtype`.
Tensor as_tensor(const Operand& operand, Graph& graph, DType dtype);

// Every axis in range, made non-negative, sorted and distinct; an empty list means all axes.
std::vector<int> normalize_axes(const std::vector<int>& axes, const Tensor& x, const char* op,
                                Loc loc);

// One axis in range, made non-negative.
int one_axis(int axis, const Tensor& x, const char* op, Loc loc);

// Checks that `x` is f32 (the op computes on real numbers).
void require_f32(const Tensor& x, const char* op, Loc loc);

// The name of the input whose values node `id` carries unchanged (through layout ops and
// casts), for an out-of-range message (dsl/index_errors.h); "" when the values are computed.
std::string source_input(const Graph& g, int id);

}  // namespace towerjit::detail
