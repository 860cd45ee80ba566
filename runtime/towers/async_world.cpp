#include "runtime/towers/async_world.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "dsl/error.h"

namespace towerjit {
namespace {

constexpr int kPushTag = 71;   // worker -> server: a tower's gradients
constexpr int kReplyTag = 72;  // server -> worker: the variables after its apply
constexpr uint64_t kMaxTowers = 1024;  // random numbers: apply * kMaxTowers + tower, as the trainer

struct Header {
  int64_t step, tower, read_at;
  double loss;
};

void put(std::vector<char>& out, const void* data, size_t bytes) {
  const size_t at = out.size();
  out.resize(at + bytes);
  if (bytes) std::memcpy(out.data() + at, data, bytes);
}

// The variables the towers' step reads: the model's (weights, batch-norm statistics), not the
// optimiser's slots or the EMA's, which only the server's apply reads. All a worker needs
// back, a third of the variables' bytes under Adam. Sorted, as on every rank.
std::vector<std::string> tower_reads(const DeviceProgram& tower_step) {
  std::set<std::string> read;
  for (const kir::Buffer& b : tower_step.program().buffers)
    if (b.kind == kir::Buffer::Kind::variable) read.insert(b.name);
  return {read.begin(), read.end()};
}

int64_t bytes_of(const HostVariables& values, const std::vector<std::string>& names) {
  int64_t bytes = 0;
  for (const std::string& name : names) bytes += values.at(name).size() * 4;
  return bytes;
}

// The named variables' elements (f32 or i32, both 4 bytes), in order.
void put_variables(std::vector<char>& out, const HostVariables& values, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const HostTensor& t = values.at(name);
    put(out, t.dtype == DType::f32 ? static_cast<const void*>(t.f32.data()) : t.i32.data(), t.size() * 4);
  }
}

void take_variables(const char* from, HostVariables& values, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    HostTensor& t = values.at(name);
    std::memcpy(t.dtype == DType::f32 ? static_cast<void*>(t.f32.data()) : t.i32.data(), from, t.size() * 4);
    from += t.size() * 4;
  }
}

// A push's bytes: the header, the tower's scaled gradients, then its model updates' values.
int64_t push_bytes(const std::vector<Shape>& gradient_shapes, const std::vector<TowerProgram::ModelUpdate>& updates,
                   const HostVariables& values) {
  int64_t bytes = sizeof(Header);
  for (const Shape& shape : gradient_shapes) bytes += shape.static_elements() * 4;
  for (const auto& u : updates) bytes += values.at(u.variable).size() * 4;
  return bytes;
}

std::string rank_failure(const std::exception& e) { return dist::rank_prefix() + e.what(); }

}  // namespace

AsyncServer::AsyncServer(TowerTrainer& trainer)
    : trainer_(trainer),
      bound_(std::get<AsyncApply>(trainer.towers().reduction()).max_staleness),
      applied_of_tower_(trainer.layout_.towers(), 0),
      sent_(tower_reads(*trainer.tower_programs_.at(0))),
      push_bytes_(push_bytes(trainer.gradient_shapes_, trainer.model_updates_, trainer.replicas_[0])) {}

bool AsyncServer::may_apply(const Push& push) const {
  if (!bound_) return true;
  const int64_t slowest = *std::min_element(applied_of_tower_.begin(), applied_of_tower_.end());
  return applied_of_tower_.at(push.tower) - slowest <= *bound_;
}

AsyncServer::Push AsyncServer::receive() {
  Push p;
  try {
    p.from = trainer_.world_->receive(p.bytes, dist::Transport::kAnySource, kPushTag);
  } catch (const std::runtime_error& e) {
    user_check(false, Loc::current()) << "the parameter server's receive failed: " << rank_failure(e);
  }
  Header h;
  // Every rank built the same model (checked at start-up), so the size is known.
  internal_check(static_cast<int64_t>(p.bytes.size()) == push_bytes_)
      << "a push of " << p.bytes.size() << " bytes from rank " << p.from << ", not " << push_bytes_;
  std::memcpy(&h, p.bytes.data(), sizeof h);
  p.step = h.step;
  p.tower = static_cast<int>(h.tower);
  p.read_at = h.read_at;
  p.loss = h.loss;
  return p;
}

AsyncServer::Applied AsyncServer::apply(Push push) {
  TowerTrainer& t = trainer_;
  HostFeeds gradients;
  const char* from = push.bytes.data() + sizeof(Header);
  for (size_t v = 0; v < t.gradient_inputs_.size(); ++v) {
    HostTensor g(t.gradient_shapes_[v]);
    std::memcpy(g.f32.data(), from, g.size() * sizeof(float));
    from += g.size() * sizeof(float);
    gradients[t.gradient_inputs_[v]] = std::move(g);
  }
  gradients[TowerProgram::gradient_scale] = HostTensor(Shape{});
  gradients[TowerProgram::gradient_scale].f32[0] = 1;  // the worker scaled them
  Applied a{.step = push.step, .tower = push.tower, .loss = push.loss};
  std::vector<char> reply;
  {
    std::lock_guard lock(t.apply_mutex_);
    a.staleness = t.applies_ - push.read_at;
    ++t.async_so_far_.applies;
    t.async_so_far_.max_staleness = std::max(t.async_so_far_.max_staleness, a.staleness);
    t.staleness_sum_ += a.staleness;
    // The lead as the bound counts it: the tower's applies before this one over the slowest's.
    const int64_t slowest = *std::min_element(applied_of_tower_.begin(), applied_of_tower_.end());
    t.async_so_far_.max_lead = std::max(t.async_so_far_.max_lead, applied_of_tower_.at(push.tower) - slowest);
    ++applied_of_tower_[push.tower];
    a.learning_rate = t.apply(gradients, 0);
    ++t.applies_;
    for (const auto& u : t.model_updates_) {  // each tower writes its own new values
      HostTensor& value = t.replicas_[0].at(u.variable);
      std::memcpy(value.f32.data(), from, value.size() * sizeof(float));
      from += value.size() * sizeof(float);
    }
    const int64_t applies = t.applies_;
    put(reply, &applies, sizeof applies);
    put_variables(reply, t.replicas_[0], sent_);
  }
  try {
    t.world_->send(reply, push.from, kReplyTag);
  } catch (const std::runtime_error& e) {
    user_check(false, Loc::current()) << "the parameter server's reply to rank " << push.from
                                      << " failed: " << rank_failure(e);
  }
  return a;
}

AsyncWorker::AsyncWorker(TowerTrainer& trainer)
    : trainer_(trainer),
      received_(tower_reads(*trainer.tower_programs_.at(0))),
      reply_bytes_(static_cast<int64_t>(sizeof(int64_t)) + bytes_of(trainer.replicas_[0], received_)) {}

double AsyncWorker::work(int64_t step, const HostFeeds& feeds, int64_t examples, Loc loc) {
  TowerTrainer& t = trainer_;
  const std::vector<int64_t> all = split_batch(examples, t.layout_.towers(), t.towers_.split_policy(), loc);
  const std::vector<double> scales = reduction_weights(all, t.towers_.reduction(), loc);
  const int n = t.towers_.size(), first = t.layout_.first_tower;
  const std::vector<int64_t> own(all.begin() + first, all.begin() + first + n);
  const std::vector<HostFeeds> slices = t.slice_batch(feeds, own, loc);
  const int64_t read_at = t.applies_;
  std::vector<std::vector<HostTensor>> outputs(n);
  t.on_tower_threads(n, [&](int k) {
    outputs[k] = t.tower_programs_[k]->run(slices[k], t.replicas_[0],
                                           static_cast<uint64_t>(read_at) * kMaxTowers + first + k);
  });
  double loss = 0;
  for (int k = 0; k < n; ++k) {
    const Header h{step, first + k, read_at, outputs[k][0].f32[0]};
    loss += static_cast<double>(own[k]) / examples * h.loss;
    std::vector<char> push;
    put(push, &h, sizeof h);
    const float scale = static_cast<float>(scales[first + k]);
    for (size_t v = 0; v < t.gradient_inputs_.size(); ++v) {
      std::vector<float>& g = outputs[k][v + 1].f32;
      for (float& x : g) x *= scale;
      put(push, g.data(), g.size() * sizeof(float));
    }
    for (size_t u = 0; u < t.model_updates_.size(); ++u) {
      const HostTensor& value = outputs[k][1 + t.gradient_inputs_.size() + u];
      put(push, value.f32.data(), value.size() * sizeof(float));
    }
    std::vector<char> reply;
    try {
      t.world_->send(push, 0, kPushTag);
      t.world_->receive(reply, 0, kReplyTag);
    } catch (const std::runtime_error& e) {
      user_check(false, loc) << "pushing to the parameter server failed: " << rank_failure(e);
    }
    internal_check(static_cast<int64_t>(reply.size()) == reply_bytes_)
        << "a reply of " << reply.size() << " bytes from the parameter server, not " << reply_bytes_;
    int64_t applies = 0;
    std::memcpy(&applies, reply.data(), sizeof applies);
    take_variables(reply.data() + sizeof applies, t.replicas_[0], received_);
    t.applies_ = applies;
  }
  return loss;
}

}  // namespace towerjit
