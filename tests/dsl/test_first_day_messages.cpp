// Message details a new user ran into (issue 14, item 8): counts agree with their nouns, an f32
// label is told to be declared i32, a negative learning rate is refused, and a data directory
// without the files is reported at the caller's line.
#include <catch2/catch.hpp>

#include <string>

#include "tests/jit/cpu_test_env.h"
#include "towerjit.h"

namespace tj = towerjit;

namespace {
// "test_first_day_messages.cpp:<line>" of the line that calls it.
std::string here(std::source_location loc = std::source_location::current()) {
  return "test_first_day_messages.cpp:" + std::to_string(loc.line());
}
}  // namespace

TEST_CASE("messages count in the singular where there is one", "[errors]") {
  CHECK(tj::count_of(1, "example") == "1 example");
  CHECK(tj::count_of(0, "example") == "0 examples");
  CHECK(tj::count_of(7, "tower") == "7 towers");
  CHECK(tj::count_of(3, "batch", "batches") == "3 batches");
  CHECK_THROWS_WITH(tj::split_batch(1, 2, tj::Split::remainder_last),
                    Catch::Contains("2 towers for a batch of 1 example would leave 1 of them with 0 examples"));
}

TEST_CASE("an f32 label of class-index shape is told to be declared i32, at the user's line", "[errors]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto logits = tj::input("logits", {tj::kBatch, 10});
  auto label = tj::input("label", {tj::kBatch});  // f32 by default: the mistake
  std::string line;
  try {
    line = here(), (void)tj::softmax_cross_entropy(logits, label);  // one line: the error names it
    FAIL("no error");
  } catch (const tj::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("declare the label input DType::i32") && Catch::Contains(line));
  }
}

TEST_CASE("a negative or non-finite learning rate is refused at the user's line", "[errors]") {
  std::string line;
  try {
    line = here(), (void)tj::adam(-1);
    FAIL("no error");
  } catch (const tj::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("learning rate -1 must be finite and >= 0") && Catch::Contains(line));
  }
  CHECK_THROWS_WITH(tj::sgd(std::nan("")), Catch::Contains("must be finite"));
  CHECK_THROWS_WITH(tj::exponential_decay(-0.1, 100, 0.5), Catch::Contains("initial learning rate -0.1"));
  CHECK_NOTHROW(tj::sgd(0.0));  // as torch.optim: 0 is allowed
}

TEST_CASE("a data directory without the dataset's files is reported at the caller's line", "[errors][data]") {
  tj::test::TempDir empty;
  std::string line;
  try {
    line = here(), (void)tj::data::load_mnist_format("train", empty.path());
    FAIL("no error");
  } catch (const tj::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("does not exist") && Catch::Contains(line) && !Catch::Contains("idx.cpp"));
  }
}
