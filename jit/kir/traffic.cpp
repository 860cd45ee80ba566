#include "jit/kir/traffic.h"

#include <map>
#include <set>

namespace towerjit::kir {
namespace {

// b where it is no larger than a at every batch size B >= 1, else a (a buffer's size: never an
// undercount).
Affine at_most(Affine a, Affine b) { return b.b <= a.b && b.at(1) <= a.at(1) ? b : a; }

}  // namespace

Affine buffer_bytes(const Program& p, int id) {
  const Buffer& b = p.buffers[id];
  return points_of(b.shape) * dtype_bytes(b.dtype);
}

Affine bytes_read(const Program& p, const Kernel& kernel) {
  std::map<int, Affine> touched;  // buffer -> sectors its loads may touch, in bytes
  for (const Kernel* body : kernel.bodies()) {
    const Affine per_load = points_of(body->space) * kSectorBytes;
    for (const Expr& e : body->exprs)
      if (e.kind == Expr::Kind::load) {
        Affine& t = touched[body->accesses[e.access].buffer];
        t = t + per_load;
      }
  }
  Affine total;
  for (const auto& [id, t] : touched) total = total + at_most(buffer_bytes(p, id), t);
  return total;
}

Affine bytes_written(const Program& p, const Kernel& kernel) {
  std::set<int> written;
  for (const Kernel* body : kernel.bodies())
    for (const auto& o : body->outputs) written.insert(body->accesses[o.access].buffer);
  Affine total;
  for (int id : written) total = total + buffer_bytes(p, id);
  return total;
}

std::set<int> loaded_buffers(const Kernel& kernel) {
  std::set<int> b;
  for (const Kernel* body : kernel.bodies())
    for (const Expr& e : body->exprs)
      if (e.kind == Expr::Kind::load) b.insert(body->accesses[e.access].buffer);
  return b;
}

Affine bytes_moved(const Program& p, const Kernel& kernel) {
  return bytes_read(p, kernel) + bytes_written(p, kernel);
}

}  // namespace towerjit::kir
