// A call the MPI transport gave up on keeps its buffer: run under mpirun with 2 ranks and
// TOWERJIT_MPI_STALL_TIMEOUT=1 (tests/mpi/mpi_cli.sh, case a_call_given_up_on_keeps_its_buffer):
//   towerjit_mpi_given_up_call DIR
//
// Rank 1 comes to an all-reduce late: once rank 0 has created DIR/gave-up. Rank 0's wait gives
// up after 1 s and throws, and its caller drops the buffer, as a trainer unwinding from the
// error does; then it creates the file. Rank 0's communication
// thread is still inside MPI_Allreduce, and when rank 1's bytes arrive MPI writes them into that
// buffer: it must still be alive then (the call's owner reference), receive the sum, and be
// freed once the call is done. A call started after the failure must fail at once and never
// reach MPI. Exit 0 on success; otherwise the rank prints the failures and exits 1.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/world.h"

namespace tj = towerjit;
using Clock = std::chrono::steady_clock;

namespace {

// Past Open MPI's eager limit over TCP (64 KiB), so the late rank's bytes land straight in the
// buffer (its rendezvous protocol) rather than in a staging copy.
constexpr size_t kCount = 1 << 16;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void rank_that_gives_up(tj::dist::Transport& world, const std::string& gave_up_file) {
  // What the buffer held when it was freed: the sum of both ranks' ones, written after the wait gave up.
  auto freed_with = std::make_shared<std::vector<float>>();
  std::shared_ptr<std::vector<float>> buffer(new std::vector<float>(kCount, 1.0f),
                                             [freed_with](std::vector<float>* b) {
                                               *freed_with = *b;
                                               delete b;
                                             });
  const std::weak_ptr<std::vector<float>> watch = buffer;
  const tj::dist::Transport::Ticket ticket = world.start_all_reduce_sum(buffer->data(), kCount, buffer);
  std::string error;
  try {
    world.wait(ticket);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  expect(error.find("TOWERJIT_MPI_STALL_TIMEOUT") != std::string::npos, "the wait did not give up: \"" + error + "\"");
  buffer.reset();  // the caller is gone
  expect(!watch.expired(), "the call given up on no longer holds its buffer");
  std::ofstream{gave_up_file};  // rank 1 may come now

  // The ranks are out of step now: a later call fails at once, with the same cause.
  const auto later = Clock::now();
  double x = 1;
  std::string later_error;
  try {
    world.all_reduce_sum(&x, 1);
  } catch (const std::runtime_error& e) {
    later_error = e.what();
  }
  expect(later_error == error, "a call after the failure did not fail with its cause: \"" + later_error + "\"");
  expect(seconds_since(later) < 0.5, "a call after the failure waited " + std::to_string(seconds_since(later)) + " s");

  // Rank 1 arrives; the call finishes into the kept buffer and lets go of it.
  const auto start = Clock::now();
  while (!watch.expired() && seconds_since(start) < 30) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect(watch.expired(), "the call given up on never finished");
  size_t wrong = 0;
  for (float v : *freed_with) wrong += v != 2.0f;
  expect(freed_with->size() == kCount && wrong == 0,
         "the late call did not leave the sum in its buffer (" + std::to_string(wrong) + " wrong)");
}

void late_rank(tj::dist::Transport& world, const std::string& gave_up_file) {
  const auto start = Clock::now();
  while (!std::filesystem::exists(gave_up_file) && seconds_since(start) < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect(std::filesystem::exists(gave_up_file), "rank 0 never gave up");
  std::vector<float> mine(kCount, 1.0f);
  world.all_reduce_sum(mine.data(), kCount);
  size_t wrong = 0;
  for (float v : mine) wrong += v != 2.0f;
  expect(wrong == 0, "the late rank's sum is wrong in " + std::to_string(wrong) + " places");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::printf("usage: towerjit_mpi_given_up_call DIR (under mpirun -np 2)\n");
    return 2;
  }
  const std::string gave_up_file = std::string(argv[1]) + "/gave-up";
  tj::dist::Transport& world = tj::dist::world();
  if (world.size() != 2) {
    std::printf("FAIL: run with mpirun -np 2 (this world has %d ranks)\n", world.size());
    return 1;
  }
  if (world.rank() == 0) rank_that_gives_up(world, gave_up_file);
  else late_rank(world, gave_up_file);
  if (failures == 0) std::printf("rank %d: ok\n", world.rank());
  return failures == 0 ? 0 : 1;
}
