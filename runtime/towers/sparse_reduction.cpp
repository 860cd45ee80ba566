#include "runtime/towers/sparse_reduction.h"

#include <cstring>

#include "dsl/error.h"

namespace towerjit::detail {
namespace {

// `parts` end to end along axis 0 (every part's other axes are the same).
HostTensor concat_rows(const std::vector<const HostTensor*>& parts, const std::vector<double>* weights) {
  Shape shape = parts[0]->shape;
  int64_t rows = 0;
  for (const HostTensor* p : parts) rows += p->shape[0];
  shape[0] = rows;
  HostTensor out(shape, parts[0]->dtype);
  int64_t at = 0;
  for (size_t t = 0; t < parts.size(); ++t) {
    const HostTensor& p = *parts[t];
    const int64_t n = p.size();
    if (n == 0) continue;  // a tower that read no rows (its data() may be null)
    if (weights == nullptr) {
      std::memcpy(static_cast<char*>(out.data()) + at * 4, p.data(), n * 4);
    } else {
      // In double, rounded once: the dense reduction's weighting of one term.
      const double w = (*weights)[t];
      const float* from = p.f32.data();
      float* to = out.f32.data() + at;
      for (int64_t e = 0; e < n; ++e) to[e] = static_cast<float>(w * from[e]);
    }
    at += n;
  }
  return out;
}

// This rank's concatenated tensors, packed: for each, its leading count (int64), then its
// elements (4 bytes each). The other axes are the same on every rank.
std::vector<char> pack(const std::vector<HostTensor>& mine) {
  std::vector<char> out;
  for (const HostTensor& t : mine) {
    const int64_t rows = t.shape[0];
    const char* count = reinterpret_cast<const char*>(&rows);
    out.insert(out.end(), count, count + sizeof rows);
    const char* data = static_cast<const char*>(t.data());
    out.insert(out.end(), data, data + t.size() * 4);
  }
  return out;
}

// Every rank's packed tensors, concatenated in rank order, tensor by tensor.
std::vector<HostTensor> unpack(const std::vector<std::vector<char>>& ranks, const std::vector<HostTensor>& like) {
  std::vector<std::vector<HostTensor>> parts(like.size());
  for (const std::vector<char>& rank : ranks) {
    const char* from = rank.data();
    for (size_t k = 0; k < like.size(); ++k) {
      int64_t rows = 0;
      std::memcpy(&rows, from, sizeof rows);
      from += sizeof rows;
      Shape shape = like[k].shape;
      shape[0] = rows;
      HostTensor& t = parts[k].emplace_back(shape, like[k].dtype);
      if (t.size() > 0) std::memcpy(t.data(), from, t.size() * 4);  // an empty tensor's data() may be null
      from += t.size() * 4;
    }
    internal_check(from == rank.data() + rank.size()) << "a rank's sparse gradients unpack to another size";
  }
  std::vector<HostTensor> out;
  for (const std::vector<HostTensor>& k : parts) {
    std::vector<const HostTensor*> p;
    for (const HostTensor& t : k) p.push_back(&t);
    out.push_back(concat_rows(p, nullptr));
  }
  return out;
}

// Per sparse gradient k, `values[k][t]` and `rows[k][t]` of this process's tower t concatenated,
// then gathered over the world: per k, the values, then the rows.
std::vector<HostTensor> concatenate_parts(const std::vector<std::vector<const HostTensor*>>& values,
                                          const std::vector<std::vector<const HostTensor*>>& rows,
                                          const std::vector<double>& weights, dist::Transport* world) {
  // This process's part: per sparse gradient, its values then its rows.
  std::vector<HostTensor> mine;
  for (size_t k = 0; k < values.size(); ++k) {
    mine.push_back(concat_rows(values[k], &weights));
    mine.push_back(concat_rows(rows[k], nullptr));
  }
  if (world && world->size() > 1) mine = unpack(world->all_gather(pack(mine)), mine);
  return mine;
}

}  // namespace

std::vector<HostTensor> concatenate_sparse(const std::vector<std::vector<DeviceTensor>>& outputs,
                                           const std::vector<std::pair<size_t, size_t>>& fetches,
                                           const std::vector<const cuda::Stream*>& streams,
                                           const std::vector<double>& weights, dist::Transport* world) {
  std::vector<HostTensor> down;  // per sparse gradient, per tower: values, then rows
  down.reserve(2 * fetches.size() * outputs.size());
  std::vector<std::vector<const HostTensor*>> values(fetches.size()), rows(fetches.size());
  for (size_t k = 0; k < fetches.size(); ++k)
    for (size_t t = 0; t < outputs.size(); ++t) {
      values[k].push_back(&down.emplace_back(to_host(outputs[t][fetches[k].first], *streams[t])));
      rows[k].push_back(&down.emplace_back(to_host(outputs[t][fetches[k].second], *streams[t])));
    }
  return concatenate_parts(values, rows, weights, world);
}

void concatenate_sparse(std::vector<TowerOutputs>& outputs, const std::vector<double>& weights,
                        const CompiledTowers& compiled, dist::Transport& world, HostFeeds& into) {
  if (compiled.sparse.empty()) return;
  std::vector<std::vector<const HostTensor*>> values(compiled.sparse.size()), rows(compiled.sparse.size());
  for (size_t k = 0; k < compiled.sparse.size(); ++k)
    for (const TowerOutputs& t : outputs) {
      values[k].push_back(&t.gradient(compiled.sparse[k].variable));
      rows[k].push_back(&t.rows(k));
    }
  std::vector<HostTensor> all = concatenate_parts(values, rows, weights, &world);
  for (size_t k = 0; k < compiled.sparse.size(); ++k) {
    into[compiled.gradient_inputs[compiled.sparse[k].variable]] = std::move(all[2 * k]);
    into[compiled.sparse[k].rows_input] = std::move(all[2 * k + 1]);
  }
  for (TowerOutputs& t : outputs)
    for (size_t k = 0; k < compiled.sparse.size(); ++k) {
      t.gradient(compiled.sparse[k].variable) = HostTensor(Shape{0});
      t.rows(k) = HostTensor(Shape{0});
    }
}

}  // namespace towerjit::detail
