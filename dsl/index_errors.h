// The error of an index or label out of range in a gather, its gradient or a one_hot, written
// once so the reference interpreter and every backend say the same words. Internal to towerjit.
//
// The kernel that finds the bad value knows the op, the value and its position in the indices
// its program was fed; the trainer knows more: the tower's first row in the global batch and
// the step. The error carries its facts so each layer can add what it knows and throw it again
// (runtime/towers/tower_state.cpp, tower_trainer.cpp, fit.cpp), as the NaN error names the
// input, the step and the example.
#pragma once

#include <cstdint>
#include <string>

#include "dsl/exception.h"
#include "dsl/node.h"

namespace towerjit::detail {

class IndexOutOfRange : public Error {
 public:
  struct Facts {
    std::string op;      // "one_hot", "gather"
    std::string noun;    // "label", "index"
    std::string input;   // the input the values come from unchanged; "" when they are computed
    int64_t value = 0, bound = 0;
    std::string position;      // where in the op's indices, in words ("flat index 3", "[1,4]")
    int64_t example = -1;      // the example (row) in the indices the program was fed; -1: no batch axis
    int64_t in_example = -1;   // the element within that example, when an example holds several
    std::string scope, where;  // the op's scope and location (towerjit::where of its node)
    std::string fix;           // what the values must be
    // Added by the trainer: `example` then counts rows of the global batch, and `step` says
    // which batch ("step 3's batch (epoch 1, batch 3 of 34)").
    bool in_batch = false;
    std::string step;
  };
  explicit IndexOutOfRange(Facts facts) : Error(message(facts)), facts_(std::move(facts)) {}
  const Facts& facts() const { return facts_; }
  // The same error once the indices' first row is known to be row `first_row` of the global
  // batch (a tower's slice); once the step is known (`step`: "step 3's batch (...)").
  IndexOutOfRange in_batch_from(int64_t first_row) const;
  IndexOutOfRange at_step(std::string step) const;

 private:
  static std::string message(const Facts& f);
  Facts facts_;
};

// The error of label `value` at row-major position `flat` of a one_hot's labels (as fed to
// the program) outside [0, depth).
IndexOutOfRange one_hot_out_of_range(const Node& node, int64_t value, int64_t flat);

// The error of index `value` at row-major position `flat` of a gather's (or its gradient's)
// `indices` (their shape, bound or with B as its first axis), `rows` the size of the table's
// gathered axis.
IndexOutOfRange gather_out_of_range(const Node& node, int64_t value, int64_t flat, const Shape& indices, int64_t rows);

}  // namespace towerjit::detail
