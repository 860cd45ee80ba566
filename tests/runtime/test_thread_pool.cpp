#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <vector>

#include "runtime/thread_pool.h"

using towerjit::ThreadPool;

TEST_CASE("thread pool covers every index exactly once", "[runtime]") {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 127, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
  }
}

TEST_CASE("thread pool rethrows a worker's exception", "[runtime]") {
  ThreadPool pool(2);
  REQUIRE_THROWS_WITH(pool.parallel_for(100,
                                        [](int64_t b, int64_t) {
                                          if (b > 0) throw std::runtime_error("chunk failed");
                                        }),
                      "chunk failed");
  // The pool still works afterwards.
  std::atomic<int64_t> total = 0;
  pool.parallel_for(10, [&](int64_t b, int64_t e) { total += e - b; });
  REQUIRE(total == 10);
}
