// The fusion decisions, made once for every backend: which nodes get a buffer, which are
// inlined into the kernels that read them, which ride along in a consumer's kernel
// (multi-output fusion), which reductions share a sibling reduction's kernel, which transposes
// a GEMM reads directly, and which update ops write their variable in place.
#pragma once

#include <vector>

#include "dsl/graph.h"

namespace towerjit {

// Explicit fusion limits, as data (ArrayFire keeps these as an enum of its own).
struct FusionLimits {
  int max_exprs = 256;  // expression nodes one kernel body may inline
  int max_depth = 64;   // the longest chain of inlined ops
  // Buffers one kernel body may read: its parameters (a CUDA launch passes them in 4 KB) and
  // the base pointers its loop keeps live; past this, inlined producers get buffers of their
  // own. At least 3 (a select's operands).
  int max_reads = 32;
  // Values a kernel body keeps live at once, estimated by Sethi-Ullman numbering of its
  // expression tree (a load or constant needs 1; a node needs the most of r_i + i over its
  // operands' needs sorted largest first): the vector registers the loop needs before it
  // spills (16 with AVX2, 32 with AVX-512; more on a GPU). Past this, the inlined input that
  // needs the most gets a buffer. At least 3.
  int max_registers = 24;
};

struct FusionPlan {
  std::vector<bool> needed;    // a fetch or an update op depends on it
  std::vector<bool> buffered;  // has a buffer of its own; otherwise inlined where it is read
  std::vector<bool> folded;    // a transpose a GEMM reads as a transposed operand
  std::vector<bool> view;      // a buffered reshape of a buffered node: the same elements
  // Computed inside another node's kernel, or -1: an elementwise node in its first consumer's,
  // or in a reduction's whose input its body computes too (same loop space), a reduction in an
  // earlier sibling reduction's (same loop space and axes).
  std::vector<int> host;
  std::vector<int> in_place;   // for an update's value: the variable node it is written to, or -1
  // For a buffered value (a library routine reads it, or its own kernel stores it) whose body
  // is cheap arithmetic over one buffer of its size and smaller ones: that buffer's node, else
  // -1. A loop kernel that loads both computes the value again instead of loading it.
  std::vector<int> recompute_source;
  // Only kernels whose root node comes before this one recompute it: the first kernel that
  // writes a variable its body loads in place (the graph's size when none does).
  std::vector<int> recompute_before;
  // The node whose kernel computes `node` (itself unless it rides along in a consumer's).
  int kernel_root(int node) const;
};

FusionPlan plan_fusion(const Graph& graph, const std::vector<int>& fetches,
                       const std::vector<int>& update_ops, FusionLimits limits = {});

// Ops the backends run as library routines (GEMM, convolution, pools, ...), not loop kernels.
bool is_library(Op op);
// A transpose of the last two axes that a matrix product can read as a transposed operand.
bool swaps_last_two(const Node& n);
// For a reshape that only inserts or removes dimensions of size 1, the input dimension each
// output dimension carries (-1 for an inserted 1; {-2} for a reshape to a scalar); empty when
// the reshape moves elements.
std::vector<int> unit_reshape(const Shape& in, const Shape& out);
// A reshape kernels can read through (unit_reshape is not empty).
bool inline_reshape(const Graph& graph, const Node& n);

}  // namespace towerjit
