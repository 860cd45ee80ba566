#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>
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

// Workers spin for the next loop for up to 1 ms after a chunk, then sleep (runtime/thread_pool.cpp):
// loops back to back (taken while spinning), loops 2 ms apart (each after a sleep) and an
// exception in between, with 2 threads (which spin here) and with 64 (more than any machine
// running this has cores: they never spin), lose no chunk and run none twice.
TEST_CASE("thread pool loops back to back and after sleeping", "[runtime][threads]") {
  for (int threads : {2, 64}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(257);
    int64_t loops = 0;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 500; ++i, ++loops)
        pool.parallel_for(257, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) hits[j]++;
        });
      for (int i = 0; i < 5; ++i, ++loops) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        pool.parallel_for(257, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) hits[j]++;
        });
      }
      REQUIRE_THROWS(pool.parallel_for(257, [](int64_t b, int64_t) {
        if (b > 0) throw std::runtime_error("a worker's chunk failed");
      }));
    }
    INFO(threads << " threads");
    for (const auto& h : hits) REQUIRE(h == loops);
  }
}
