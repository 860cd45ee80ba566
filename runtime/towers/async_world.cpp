#include "runtime/towers/async_world.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "dsl/error.h"

namespace towerjit::detail {
namespace {

constexpr int kPushTag = 71;   // worker -> server: a tower's gradients
constexpr int kReplyTag = 72;  // server -> worker: the variables after its apply

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

// Per variable of `names`: the index of its sparse gradient when the apply changes only the
// gradient's rows (CompiledTowers::Sparse::rows_only), so a reply carries its changed rows;
// else -1. The same on every rank: every rank built the same model.
std::vector<int> rows_only_tables(const CompiledTowers& c, const std::vector<std::string>& names) {
  std::vector<int> of(names.size(), -1);
  for (size_t k = 0; k < c.sparse.size(); ++k) {
    if (!c.sparse[k].rows_only) continue;
    const std::string name = c.gradient_inputs[c.sparse[k].variable].substr(TowerProgram::gradient_prefix.size());
    const auto at = std::find(names.begin(), names.end(), name);
    if (at != names.end()) of[at - names.begin()] = static_cast<int>(k);
  }
  return of;
}

// A table's rows: [V, ...] as V rows of bytes.
struct Rows {
  char* base;
  int64_t count, bytes;
};
Rows rows_of(HostTensor& t) {
  const int64_t count = t.shape.rank() ? t.shape[0] : 1;
  return {static_cast<char*>(t.data()), count, count ? t.size() / count * static_cast<int64_t>(dtype_bytes(t.dtype)) : 0};
}

// Reads a message's parts in order, each checked to lie inside it.
class Reader {
 public:
  Reader(const std::vector<char>& bytes, const char* what)
      : at_(bytes.data()), end_(bytes.data() + bytes.size()), what_(what) {}
  void take(void* to, size_t bytes) {
    internal_check(static_cast<size_t>(end_ - at_) >= bytes) << what_ << " ends " << bytes - (end_ - at_)
                                                             << " bytes before its parts do";
    if (bytes) std::memcpy(to, at_, bytes);  // an empty tensor's data() may be null
    at_ += bytes;
  }
  size_t left() const { return static_cast<size_t>(end_ - at_); }

 private:
  const char* at_;
  const char* end_;
  const char* what_;
};

}  // namespace

AsyncServer::AsyncServer(TowerState& state, HostVariables& values, CpuProgram& apply)
    : state_(state),
      values_(values),
      apply_(apply),
      bound_(std::get<AsyncApply>(state.towers.reduction()).max_staleness),
      applied_of_tower_(state.layout.towers(), 0),
      sent_(tower_reads(*state.compiled.tower_step.at(0))),
      rows_of_sent_(rows_only_tables(state.compiled, sent_)),
      changed_(state.world->size(), std::vector<ChangedRows>(sent_.size())) {}

// Each worker's copy of a rows-only table now differs from ours at the rows just applied.
void AsyncServer::mark_changed(const HostFeeds& gradients) {
  for (size_t i = 0; i < sent_.size(); ++i) {
    if (rows_of_sent_[i] < 0) continue;
    const HostTensor& rows = gradients.at(state_.compiled.sparse[rows_of_sent_[i]].rows_input);
    const int64_t count = rows_of(values_.at(sent_[i])).count;
    for (std::vector<ChangedRows>& worker : changed_) {
      ChangedRows& ch = worker[i];
      if (ch.all) continue;
      for (int32_t r : rows.i32) {
        internal_check(r >= 0 && r < count) << "row " << r << " of \"" << sent_[i] << "\" pushed, of " << count;
        if (!ch.marked[r]) ch.marked[r] = 1, ch.rows.push_back(r);
      }
    }
  }
}

// The apply count, then each variable the towers read: whole, or for a rows-only table the
// count of rows that follow (-1: the whole table), those rows (i32) and their values.
void AsyncServer::put_reply(std::vector<char>& reply, int worker) {
  const int64_t applies = state_.applies;
  put(reply, &applies, sizeof applies);
  for (size_t i = 0; i < sent_.size(); ++i) {
    HostTensor& t = values_.at(sent_[i]);
    if (rows_of_sent_[i] < 0) {
      put(reply, t.data(), t.size() * dtype_bytes(t.dtype));
      continue;
    }
    ChangedRows& ch = changed_.at(worker)[i];
    const Rows table = rows_of(t);
    const int64_t count = ch.all ? -1 : static_cast<int64_t>(ch.rows.size());
    put(reply, &count, sizeof count);
    if (ch.all) {
      put(reply, table.base, table.count * table.bytes);
      ch.all = false;
      ch.marked.assign(table.count, 0);
      continue;
    }
    put(reply, ch.rows.data(), ch.rows.size() * sizeof(int32_t));
    for (int32_t r : ch.rows) put(reply, table.base + r * table.bytes, table.bytes), ch.marked[r] = 0;
    ch.rows.clear();
  }
}

bool AsyncServer::may_apply(const Push& push) const {
  if (!bound_) return true;
  const int64_t slowest = *std::min_element(applied_of_tower_.begin(), applied_of_tower_.end());
  return applied_of_tower_.at(push.tower) - slowest <= *bound_;
}

AsyncServer::Push AsyncServer::receive(Loc loc) {
  Push p;
  p.from = state_.world->receive(p.bytes, dist::Transport::kAnySource, kPushTag);
  Header h;
  Reader(p.bytes, "a push").take(&h, sizeof h);
  p.step = h.step;
  p.tower = static_cast<int>(h.tower);
  p.read_at = h.read_at;
  p.loss = h.loss;
  return p;
}

// A push is its header, then each gradient: a dense one's elements; a sparse one's rows' shape
// (the rank, then each axis, int64), its values (that shape and the table's row) and its rows
// (i32), so its size varies with the rows the tower read; then the tower's model updates.
AsyncServer::Applied AsyncServer::apply(Push push, Loc loc) {
  const CompiledTowers& c = state_.compiled;
  Reader in(push.bytes, "a push");
  Header h;
  in.take(&h, sizeof h);
  HostFeeds gradients;
  for (size_t v = 0; v < c.gradient_inputs.size(); ++v) {
    const int k = c.sparse_of(v);
    if (k < 0) {
      HostTensor g(c.gradient_shapes[v]);
      in.take(g.data(), g.size() * sizeof(float));
      gradients[c.gradient_inputs[v]] = std::move(g);
      continue;
    }
    // The rows keep the shape of the indices the tower read; the values add the table's row.
    int64_t rank = 0;
    in.take(&rank, sizeof rank);
    internal_check(rank >= 0 && rank <= 8) << "a push's rows of rank " << rank;
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    in.take(dims.data(), dims.size() * sizeof(int64_t));
    HostTensor rows(Shape(dims), DType::i32);
    for (int a = 1; a < c.gradient_shapes[v].rank(); ++a) dims.push_back(c.gradient_shapes[v][a]);
    HostTensor values{Shape(dims)};
    in.take(values.data(), values.size() * sizeof(float));
    in.take(rows.data(), rows.size() * sizeof(int32_t));
    gradients[c.gradient_inputs[v]] = std::move(values);
    gradients[c.sparse[k].rows_input] = std::move(rows);
  }
  gradients[TowerProgram::gradient_scale] = scalar(1.0);  // the worker scaled them
  Applied a{.step = push.step, .tower = push.tower, .loss = push.loss};
  std::vector<char> reply;
  {
    std::lock_guard lock(state_.apply_mutex);
    a.staleness = state_.applies - push.read_at;
    state_.count_async_apply(a.staleness);
    // The lead as the bound counts it: the tower's applies before this one over the slowest's.
    const int64_t slowest = *std::min_element(applied_of_tower_.begin(), applied_of_tower_.end());
    const int64_t lead = applied_of_tower_.at(push.tower) - slowest;
    ++applied_of_tower_[push.tower];
    a.learning_rate = state_.applied(apply_.run(gradients, values_, static_cast<uint64_t>(state_.applies)));
    ++state_.applies;
    mark_changed(gradients);
    for (const auto& u : c.model_updates) {  // each tower writes its own new values
      HostTensor& value = values_.at(u.variable);
      in.take(value.f32.data(), value.size() * sizeof(float));
    }
    // Every rank built the same model (checked at start-up): a push of another size is a bug.
    internal_check(in.left() == 0) << "a push from rank " << push.from << " has " << in.left() << " bytes past its parts";
    put_reply(reply, push.from);
    lead_ = std::max(lead_, lead);
  }
  state_.count_lead(lead_);
  state_.world->send(reply, push.from, kReplyTag);
  return a;
}

AsyncWorker::AsyncWorker(TowerState& state, HostVariables& values)
    : state_(state),
      values_(values),
      received_(tower_reads(*state.compiled.tower_step.at(0))),
      rows_of_received_(rows_only_tables(state.compiled, received_)) {}

// Reads a reply (AsyncServer::put_reply) into this process's copy.
void AsyncWorker::take_reply(const std::vector<char>& reply) {
  Reader in(reply, "a reply from the parameter server");
  int64_t applies = 0;
  in.take(&applies, sizeof applies);
  for (size_t i = 0; i < received_.size(); ++i) {
    HostTensor& t = values_.at(received_[i]);
    int64_t count = -1;
    if (rows_of_received_[i] >= 0) in.take(&count, sizeof count);
    if (count < 0) {
      in.take(t.data(), t.size() * dtype_bytes(t.dtype));
      continue;
    }
    const Rows table = rows_of(t);
    std::vector<int32_t> rows(static_cast<size_t>(count));
    in.take(rows.data(), rows.size() * sizeof(int32_t));
    for (int32_t r : rows) {
      internal_check(r >= 0 && r < table.count) << "a reply's row " << r << " of \"" << received_[i] << "\", of " << table.count;
      in.take(table.base + r * table.bytes, table.bytes);
    }
  }
  internal_check(in.left() == 0) << "a reply from the parameter server has " << in.left() << " bytes past its parts";
  state_.applies = applies;
}

double AsyncWorker::work(int64_t step, const HostFeeds& feeds, int64_t examples, Loc loc) {
  const std::vector<int64_t> all = split_batch(examples, state_.layout.towers(), state_.towers.split_policy(), loc);
  const std::vector<double> scales = reduction_weights(all, state_.towers.reduction(), loc);
  const std::vector<double> shares = slice_shares(all, examples);
  const int n = state_.towers.size(), first = state_.layout.first_tower;
  const std::vector<int64_t> own(all.begin() + first, all.begin() + first + n);
  const std::vector<HostFeeds> slices = cut_batch(feeds, own, loc);
  const int64_t read_at = state_.applies;
  std::vector<TowerOutputs> outputs(n);
  state_.on_tower_threads(n, [&](int k) {
    outputs[k] = state_.run_tower(k, slices[k], values_, random_key(read_at, first + k));
  });
  double loss = 0;
  for (int k = 0; k < n; ++k) {
    const Header h{step, first + k, read_at, outputs[k].loss()};
    loss += shares[first + k] * h.loss;
    std::vector<char> push;
    put(push, &h, sizeof h);
    const float scale = static_cast<float>(scales[first + k]);
    for (size_t v = 0; v < outputs[k].gradients(); ++v) {
      HostTensor& g = outputs[k].gradient(v);
      for (float& x : g.f32) x *= scale;
      const int sparse = state_.compiled.sparse_of(v);
      const HostTensor* rows = sparse >= 0 ? &outputs[k].rows(sparse) : nullptr;
      if (rows) {
        std::vector<int64_t> shape{rows->shape.rank()};
        for (int a = 0; a < rows->shape.rank(); ++a) shape.push_back(rows->shape[a]);
        put(push, shape.data(), shape.size() * sizeof(int64_t));
      }
      put(push, g.f32.data(), g.size() * sizeof(float));
      if (rows) put(push, rows->data(), rows->size() * sizeof(int32_t));
    }
    for (size_t u = 0; u < outputs[k].updates(); ++u) {
      const HostTensor& value = outputs[k].update(u);
      put(push, value.f32.data(), value.size() * sizeof(float));
    }
    std::vector<char> reply;
    state_.world->send(push, 0, kPushTag);
    state_.world->receive(reply, 0, kReplyTag);
    take_reply(reply);
  }
  return loss;
}

}  // namespace towerjit::detail
