// Nested initializer lists as tensor literals: the shape they describe (checked to be
// rectangular) and their elements in row-major order. tensor<T>{{1, 2}, {3, 4}} builds on it.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "../core/error.hpp"
#include "../core/shape.hpp"

namespace meld::detail {

template <class T, int Rank>
struct nested_list_of {
  using type = std::initializer_list<typename nested_list_of<T, Rank - 1>::type>;
};
template <class T>
struct nested_list_of<T, 0> {
  using type = T;
};
/// std::initializer_list nested Rank deep around T: nested_list<float, 2> is a list of rows.
template <class T, int Rank>
using nested_list = typename nested_list_of<T, Rank>::type;

// The shape of a nested list, read along its first elements (an empty list ends it).
template <class T, int Rank>
void nested_list_shape(const nested_list<T, Rank>& list, shape_t& shape) {
  shape.push_back(static_cast<index_t>(list.size()));
  if constexpr (Rank > 1) {
    if (list.size() == 0) {
      for (int i = 1; i < Rank; ++i) shape.push_back(0);
    } else {
      nested_list_shape<T, Rank - 1>(*list.begin(), shape);
    }
  }
}

// Appends the elements of a nested list to out, checking each list's length against shape; a
// ragged list throws shape_error naming the axis and the position of the list that differs.
template <class T, int Rank, int Total>
void flatten_nested_list(const nested_list<T, Rank>& list, const shape_t& shape,
                         index_t (&at)[Total], std::vector<T>& out) {
  constexpr int axis = Total - Rank;
  if (static_cast<index_t>(list.size()) != shape[axis]) {
    std::string where;
    for (int a = 0; a < axis; ++a) where += (a ? ", " : "") + std::to_string(at[a]);
    raise<shape_error>("tensor: ragged initializer list: along axis ", axis, " the list at [",
                       where, "] has ", list.size(), " elements where the first has ", shape[axis],
                       " (a tensor literal must be rectangular, shape ", shape, ")");
  }
  index_t i = 0;
  for (const auto& item : list) {
    at[axis] = i++;
    if constexpr (Rank == 1)
      out.push_back(item);
    else
      flatten_nested_list<T, Rank - 1, Total>(item, shape, at, out);
  }
}

// The shape and the row-major elements of a nested list.
template <class T, int Rank>
shape_t nested_list_elements(const nested_list<T, Rank>& list, std::vector<T>& out) {
  shape_t shape;
  nested_list_shape<T, Rank>(list, shape);
  index_t at[Rank] = {};
  out.reserve(static_cast<std::size_t>(checked_size(shape, "tensor")));
  flatten_nested_list<T, Rank, Rank>(list, shape, at, out);
  return shape;
}

}  // namespace meld::detail
