// Several assignments in one pass: meld::assign_each(std::tie(ga, gb), g * b, g * a) gives what
// `ga = g * b; gb = g * a;` gives, and where every destination and operand is contiguous with one
// shape the backend evaluates them block by block (the CPU; sim through it), so that an operand
// that several expressions read comes from memory once. The fused backward of an elementwise
// expression writes every input's gradient so (autograd/fused.hpp).
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "../backend/backend.hpp"
#include "tensor_view.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// Assigns each expression to its destination (a tensor or view; scalars are expressions too), as
/// one assignment after another would: an expression may read a destination, seeing what the
/// assignments before it wrote. Shapes follow `=`: each expression broadcasts to its destination.
/// One pass over the elements where the backend can (every destination and operand contiguous
/// with one shape), else one assignment after another.
template <class... Dst, class... E>
void assign_each(const std::tuple<Dst&...>& dsts, const E&... es) {
  static_assert(sizeof...(Dst) == sizeof...(E) && sizeof...(E) > 0,
                "meld::assign_each: one expression per destination");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    auto expression = [](const auto& dst, const auto& e) {
      using V = typename std::remove_cvref_t<decltype(dst)>::value_type;
      if constexpr (scalar_type<std::remove_cvref_t<decltype(e)>>)
        return scalar_expr<V>(static_cast<V>(e));
      else
        return make_closure(e);  // a tensor as a view of its storage, as operators hold it
    };
    const auto exprs = std::make_tuple(expression(std::get<I>(dsts), es)...);
    auto check = [](const auto& dst, const auto& e) {
      detail::check_lossless<std::remove_cvref_t<decltype(dst)>,
                             std::remove_cvref_t<decltype(e)>>();
      detail::check_broadcasts_to(dst, e, "assign_each");
    };
    (check(std::get<I>(dsts), std::get<I>(exprs)), ...);
    using B = common_backend_t<typename std::remove_cvref_t<Dst>::backend_type...,
                               backend_t<std::remove_cvref_t<decltype(std::get<I>(exprs))>>...>;
    // The destinations as they are (references): an assignment the backend makes of one is then
    // the one `=` makes, compiled once.
    executor<B>::assign_each(std::forward_as_tuple(std::get<I>(dsts)...), exprs);
  }
  (std::index_sequence_for<E...>{});
}

/// @}

}  // namespace meld
