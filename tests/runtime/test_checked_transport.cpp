// A transport's failure reaches its caller as one towerjit::Error (runtime/dist/checked_transport.h):
// the call and the transport's reason, what to do, and the user's call in progress; a transport
// that fails the way MPI's plugin does (std::runtime_error) stands in for it here.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "runtime/dist/checked_transport.h"
#include "towerjit.h"

namespace tj = towerjit;
using Catch::Matchers::Contains;

namespace {

constexpr const char* kStall = "MPI_Allreduce of 8 bytes (call 3) has waited 1 s for the other ranks: one is stopped";

// Fails every call as the MPI plugin does, with its own message; wait() of ticket 7 throws a
// towerjit::Error instead, which must pass through untouched.
class FailingTransport final : public tj::dist::Transport {
 public:
  explicit FailingTransport(int size = 3) : size_(size) {}
  int rank() const override { return size_ > 1 ? 1 : 0; }
  int size() const override { return size_; }
  std::string name() const override { return "failing"; }
  Ticket start_all_reduce_sum(float*, size_t, std::shared_ptr<const void>) override { return 5; }
  Ticket start_all_reduce_sum(double*, size_t, std::shared_ptr<const void>) override { return 6; }
  Ticket start_all_reduce_sum(uint16_t*, size_t, tj::DType, std::shared_ptr<const void>) override { return 8; }
  void wait(Ticket ticket) override {
    if (ticket == 7) throw tj::Error("towerjit: already an Error");
    throw std::runtime_error(kStall);
  }
  std::vector<std::vector<char>> all_gather(const std::vector<char>&) override { throw std::runtime_error("gather broke"); }
  void all_gather(const void*, size_t, void*) override { throw std::runtime_error("gather broke"); }
  void broadcast(std::vector<char>&, int) override { throw std::runtime_error("broadcast broke"); }
  void barrier() override { throw std::runtime_error("barrier broke"); }
  void send(const std::vector<char>&, int, int) override { throw std::runtime_error("send broke"); }
  int receive(std::vector<char>&, int, int) override { throw std::runtime_error("receive broke"); }
  [[noreturn]] void abort(int) override { throw std::logic_error("not in a test"); }
  int64_t payload_bytes() const override { return 42; }

 private:
  int size_;
};

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const tj::Error& e) {
    return e.what();
  }
  return "(no towerjit::Error)";
}

}  // namespace

TEST_CASE("a transport's failure is a towerjit::Error naming the call, its reason and the fix", "[runtime][mpi][errors]") {
  auto world = tj::dist::checked_transport(std::make_unique<FailingTransport>());
  CHECK(world->rank() == 1);
  CHECK(world->size() == 3);
  CHECK(world->name() == "failing");
  CHECK(world->payload_bytes() == 42);
  float x = 1;
  const auto ticket = world->start_all_reduce_sum(&x, 1, nullptr);
  CHECK(ticket == 5);

  const std::string stalled = message_of([&] { world->wait(ticket); });
  CHECK_THAT(stalled, Contains(std::string("the transport's all-reduce failed: ") + kStall));
  CHECK_THAT(stalled, Contains("another rank stopped, stalled or failed first"));
  CHECK_THAT(stalled, !Contains("test_checked_transport.cpp"));  // no user's call in progress

  // Every call, the blocking all-reduce included (through wait).
  double y = 1;
  CHECK_THAT(message_of([&] { world->all_reduce_sum(&y, 1); }), Contains("the transport's all-reduce failed"));
  CHECK_THAT(message_of([&] { world->all_gather(std::vector<char>{}); }), Contains("the transport's all-gather failed: gather broke"));
  CHECK_THAT(message_of([&] { world->all_gather(&x, 4, &x); }), Contains("all-gather failed: gather broke"));
  std::vector<char> bytes;
  CHECK_THAT(message_of([&] { world->broadcast(bytes, 0); }), Contains("the transport's broadcast failed: broadcast broke"));
  CHECK_THAT(message_of([&] { world->barrier(); }), Contains("the transport's barrier failed: barrier broke"));
  CHECK_THAT(message_of([&] { world->send(bytes, 0, 1); }), Contains("the transport's send failed: send broke"));
  CHECK_THAT(message_of([&] { world->receive(bytes, 0, 1); }), Contains("the transport's receive failed: receive broke"));
  // An Error of the transport's own is not wrapped again.
  CHECK(message_of([&] { world->wait(7); }) == "towerjit: already an Error");

  // Alone in the world, no other rank can be the cause: the call itself was a mistake of ours.
  auto alone = tj::dist::checked_transport(std::make_unique<FailingTransport>(1));
  CHECK_THAT(message_of([&] { alone->send(bytes, 1, 1); }), Contains("send broke; a world of one process has no other rank"));
}

TEST_CASE("a transport's failure names the user's call in progress, the innermost one", "[runtime][mpi][errors]") {
  auto world = tj::dist::checked_transport(std::make_unique<FailingTransport>());
  const int outer_line = __LINE__ + 1;
  const tj::dist::UserCall outer(std::source_location::current());
  CHECK_THAT(message_of([&] { world->barrier(); }),
             Contains("test_checked_transport.cpp:" + std::to_string(outer_line) + ")"));
  {
    const int inner_line = __LINE__ + 1;
    const tj::dist::UserCall inner(std::source_location::current());
    CHECK_THAT(message_of([&] { world->barrier(); }),
               Contains("test_checked_transport.cpp:" + std::to_string(inner_line) + ")"));
  }
  // The inner call is over: the outer one again.
  CHECK_THAT(message_of([&] { world->barrier(); }),
             Contains("test_checked_transport.cpp:" + std::to_string(outer_line) + ")"));
}
