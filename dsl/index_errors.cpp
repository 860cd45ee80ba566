#include "dsl/index_errors.h"

#include <algorithm>
#include <sstream>

#include "dsl/op.h"

namespace towerjit::detail {
namespace {

// The example holding row-major position `flat` of indices shaped `shape` whose first axis is
// the batch, and the element within it (-1 when an example holds one); {-1, -1} without a
// batch axis.
std::pair<int64_t, int64_t> example_of(int64_t flat, const Shape& shape, bool batch_first) {
  if (!batch_first || shape.rank() == 0) return {-1, -1};
  int64_t per = 1;
  for (int d = 1; d < shape.rank(); ++d) per *= shape[d];
  return {flat / per, per > 1 ? flat % per : -1};
}

std::string in_scope_of(const std::string& scope) { return scope.empty() ? "" : " in \"" + scope + "\""; }

}  // namespace

std::string IndexOutOfRange::message(const Facts& f) {
  std::ostringstream s;
  s << "towerjit: ";
  if (!f.in_batch && f.step.empty()) {
    // A program run by itself: positions in the indices it was fed.
    s << f.op << ": " << f.noun << " " << f.value << " at " << f.position << " of "
      << (f.input.empty() ? "the indices" : "input \"" + f.input + "\"") << " is out of range [0, " << f.bound << ")"
      << in_scope_of(f.scope) << "; " << f.fix;
  } else {
    // A trainer's step: the example's row in the global batch, and the step.
    s << (f.input.empty() ? "the computed " + std::string(f.noun == "index" ? "indices" : "labels") + " of " + f.op +
                                " hold "
                          : "input \"" + f.input + "\" holds ")
      << f.noun << " " << f.value;
    if (f.example >= 0) {
      s << " at example " << f.example;
      if (f.in_example >= 0) s << " (element " << f.in_example << " of it)";
      s << " of " << (f.step.empty() ? std::string("the batch") : f.step) << (f.in_batch ? "" : ", counted in its tower's slice");
    } else {
      s << " at " << f.position << (f.step.empty() ? "" : " in " + f.step);
    }
    s << ", out of range [0, " << f.bound << ") for " << f.op << in_scope_of(f.scope) << "; " << f.fix
      << (f.input.empty() ? "" : "; the data is the cause: check the dataset and its transform");
  }
  s << " (" << f.where << ")";
  return s.str();
}

IndexOutOfRange IndexOutOfRange::in_batch_from(int64_t first_row) const {
  Facts f = facts_;
  if (f.in_batch) return IndexOutOfRange(std::move(f));
  if (f.example >= 0) f.example += first_row;
  f.in_batch = true;
  return IndexOutOfRange(std::move(f));
}

IndexOutOfRange IndexOutOfRange::at_step(std::string step) const {
  Facts f = facts_;
  if (f.step.empty()) f.step = std::move(step);
  return IndexOutOfRange(std::move(f));
}

IndexOutOfRange one_hot_out_of_range(const Node& node, int64_t value, int64_t flat) {
  IndexOutOfRange::Facts f;
  f.op = "one_hot";
  f.noun = "label";
  f.input = node.attrs.name;
  f.value = value;
  f.bound = node.attrs.depth;
  f.position = "flat index " + std::to_string(flat);
  // The labels are the output's shape without its last axis (the classes).
  const std::vector<int64_t> out = node.shape.dims();
  const Shape labels(std::vector<int64_t>(out.begin(), out.end() - 1));
  std::tie(f.example, f.in_example) = example_of(flat, labels, labels.rank() > 0 && labels[0] == kBatch);
  f.scope = node.scope;
  f.where = towerjit::where(node);
  f.fix = "labels must be class indices below the number of classes";
  return IndexOutOfRange(std::move(f));
}

IndexOutOfRange gather_out_of_range(const Node& node, int64_t value, int64_t flat, const Shape& indices, int64_t rows) {
  IndexOutOfRange::Facts f;
  f.op = op_name(node.op);
  f.noun = "index";
  f.input = node.attrs.name;
  f.value = value;
  f.bound = rows;
  // The multi-index of a higher rank's element; a batch axis first needs no size to unravel.
  const bool unravels = indices.rank() >= 2 && std::find(indices.dims().begin() + 1, indices.dims().end(),
                                                         kBatch) == indices.dims().end();
  std::ostringstream at;
  if (unravels) {
    std::vector<int64_t> idx(indices.rank());
    int64_t rest = flat;
    for (int d = indices.rank() - 1; d >= 1; --d) idx[d] = rest % indices[d], rest /= indices[d];
    idx[0] = rest;
    for (int d = 0; d < indices.rank(); ++d) at << (d ? "," : "[") << idx[d];
    at << "]";
  } else {
    at << (indices.rank() <= 1 ? "" : "flat position ") << flat;
  }
  f.position = at.str();
  // The indices' first axis is the batch when the op's output has B where they sit (a gather
  // on axis a puts the indices' axes at a; its gradient's indices sit beside dy's).
  const int axis = node.attrs.axis;
  const bool batch_first = (node.op == Op::Gather && axis < node.shape.rank() && node.shape[axis] == kBatch) ||
                           (indices.rank() > 0 && indices[0] == kBatch);
  std::tie(f.example, f.in_example) = example_of(flat, indices, batch_first);
  f.scope = node.scope;
  f.where = towerjit::where(node);
  std::ostringstream fix;
  fix << "an index must name a row of the table's axis " << axis << " (for an embedding: ids below the vocabulary size, "
      << rows << ")";
  f.fix = fix.str();
  return IndexOutOfRange(std::move(f));
}

}  // namespace towerjit::detail
