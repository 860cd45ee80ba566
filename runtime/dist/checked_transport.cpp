// Turns a transport's std::runtime_error into towerjit::Error once, for every call
// (checked_transport.h says why the transports cannot throw it themselves).
#include "runtime/dist/checked_transport.h"

#include <mutex>
#include <stdexcept>
#include <utility>

#include "dsl/error.h"
#include "runtime/dist/world.h"

namespace towerjit::dist {
namespace {

std::mutex user_call_mutex;
std::source_location user_call;  // valid while have_user_call
bool have_user_call = false;

// What to do, for every transport failure: the cause is another rank's or the network's, and
// the first error of the run, on whichever rank, says which.
constexpr const char* kFix =
    "; another rank stopped, stalled or failed first (its own message, above or in its log, says why), or the "
    "network between the ranks failed; docs/distributed.md has the fault model";

// A world of one has no other rank: a call that fails there is towerjit's mistake, not the world's.
constexpr const char* kFixAlone = "; a world of one process has no other rank to exchange with: a towerjit bug, please report it";

[[noreturn]] void raise(const std::runtime_error& e, const char* call, bool alone) {
  std::string where;
  {
    std::lock_guard lock(user_call_mutex);
    if (have_user_call) where = " (" + format_location(user_call) + ")";
  }
  throw Error("towerjit: " + rank_prefix() + "the transport's " + call + " failed: " + e.what() +
              (alone ? kFixAlone : kFix) + where);
}

class CheckedTransport final : public Transport {
 public:
  explicit CheckedTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  Ticket start_all_reduce_sum(float* data, size_t count, std::shared_ptr<const void> owner) override {
    return checked("all-reduce", [&] { return inner_->start_all_reduce_sum(data, count, std::move(owner)); });
  }
  Ticket start_all_reduce_sum(double* data, size_t count, std::shared_ptr<const void> owner) override {
    return checked("all-reduce", [&] { return inner_->start_all_reduce_sum(data, count, std::move(owner)); });
  }
  Ticket start_all_reduce_sum(uint16_t* data, size_t count, DType format, std::shared_ptr<const void> owner) override {
    return checked("all-reduce", [&] { return inner_->start_all_reduce_sum(data, count, format, std::move(owner)); });
  }
  void wait(Ticket ticket) override {
    checked("all-reduce", [&] { inner_->wait(ticket); });
  }
  std::vector<std::vector<char>> all_gather(const std::vector<char>& mine) override {
    return checked("all-gather", [&] { return inner_->all_gather(mine); });
  }
  void all_gather(const void* mine, size_t bytes, void* all) override {
    checked("all-gather", [&] { inner_->all_gather(mine, bytes, all); });
  }
  void broadcast(std::vector<char>& data, int root) override {
    checked("broadcast", [&] { inner_->broadcast(data, root); });
  }
  void barrier() override {
    checked("barrier", [&] { inner_->barrier(); });
  }
  void send(const std::vector<char>& bytes, int to, int tag) override {
    checked("send", [&] { inner_->send(bytes, to, tag); });
  }
  int receive(std::vector<char>& bytes, int from, int tag) override {
    return checked("receive", [&] { return inner_->receive(bytes, from, tag); });
  }
  [[noreturn]] void abort(int code) override { inner_->abort(code); }
  int64_t payload_bytes() const override { return inner_->payload_bytes(); }

 private:
  template <class Call>
  auto checked(const char* call, Call&& body) const -> decltype(body()) {
    try {
      return body();
    } catch (const Error&) {
      throw;  // already a towerjit::Error (a transport of this library's own)
    } catch (const std::runtime_error& e) {
      raise(e, call, inner_->size() == 1);
    }
  }

  std::unique_ptr<Transport> inner_;
};

}  // namespace

std::unique_ptr<Transport> checked_transport(std::unique_ptr<Transport> inner) {
  return std::make_unique<CheckedTransport>(std::move(inner));
}

UserCall::UserCall(std::source_location loc) {
  std::lock_guard lock(user_call_mutex);
  outer_ = user_call;
  had_outer_ = have_user_call;
  user_call = loc;
  have_user_call = true;
}

UserCall::~UserCall() {
  std::lock_guard lock(user_call_mutex);
  user_call = outer_;
  have_user_call = had_outer_;
}

}  // namespace towerjit::dist
