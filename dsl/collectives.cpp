#include "dsl/collectives.h"

#include "dsl/graph.h"
#include "dsl/ops_internal.h"

namespace towerjit {

Tensor all_reduce(Tensor x, const std::string& key, Loc loc) {
  Graph& g = x.graph();
  user_check(!key.empty(), loc) << "all_reduce: the key is empty; name the collective (the apply "
                                << "side reads its result as the input of that name)";
  user_check(x.dtype() == DType::f32, loc)
      << "all_reduce of \"" << key << "\": the value is " << dtype_name(x.dtype())
      << "; towers combine f32 values (gradients)";
  for (const Node& n : g.nodes())
    user_check(!(n.op == Op::AllReduce && n.attrs.name == key), loc)
        << "all_reduce: the key \"" << key << "\" is already used in this graph (at "
        << format_location(n) << "); give each collective its own key";
  Attrs attrs;
  attrs.name = key;
  return detail::make(g, Op::AllReduce, {x.id()}, x.shape(), x.dtype(), attrs, loc);
}

}  // namespace towerjit
