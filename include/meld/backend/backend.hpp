// What a backend provides. A backend is a tag type (cpu<Policy>, cuda<Policy>) for which these
// templates are specialized:
//   memory<Backend>    allocate / deallocate raw storage
//   executor<Backend>  assign an expression to a view, reduce to a scalar, reduce along an axis
//                      (declared in expr/expression.hpp, the seam between expressions and backends)
#pragma once

#include <cstddef>

#include "../expr/expression.hpp"
#include "policy.hpp"

namespace meld {

template <class Backend>
struct memory;

}  // namespace meld
