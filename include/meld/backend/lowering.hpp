// What the backends' lowerings share (expr/walk.hpp does the walking): the layouts of the
// strided leaves an evaluation reads (for planning and alias checks), kept together with the
// temporaries that inputs evaluated on their own (reductions along an axis, products) live in.
#pragma once

#include <memory>
#include <type_traits>

#include "../expr/matmul.hpp"
#include "../expr/reduce.hpp"
#include "../expr/walk.hpp"
#include "aliasing.hpp"

namespace meld::detail {

// A leaf that is strided memory: a tensor, a view, an lvalue tensor's reference.
template <class E>
concept strided_leaf = requires(const E& e) {
  e.raw_data();
  e.shape();
  e.strides();
};

template <class E>
inline constexpr bool is_reduce_expr = false;
template <class R, class A>
inline constexpr bool is_reduce_expr<reduce_expr<R, A>> = true;
template <class E>
inline constexpr bool is_matmul_expr = false;
template <class A, class B>
inline constexpr bool is_matmul_expr<matmul_expr<A, B>> = true;

// The number of strided leaves of E, through every node.
template <class E>
struct leaf_count : std::integral_constant<int, strided_leaf<E> ? 1 : 0> {};
template <class Op, class... A>
struct leaf_count<map_expr<Op, A...>>
    : std::integral_constant<int, (leaf_count<A>::value + ... + 0)> {};
template <class R, class A>
struct leaf_count<reduce_expr<R, A>> : leaf_count<A> {};
template <class A, class B>
struct leaf_count<matmul_expr<A, B>>
    : std::integral_constant<int, leaf_count<A>::value + leaf_count<B>::value> {};
template <class E>
inline constexpr int leaf_count_v = leaf_count<std::remove_cvref_t<E>>::value;

// Room for the layouts of N leaves (and what keeps their memory alive, for temporaries).
template <int N>
struct leaf_table {
  leaf_info leaves[N > 0 ? N : 1];
  std::shared_ptr<const void> keep[N > 0 ? N : 1];
  int count = 0;

  template <class T>
  void add(const T* data, const shape_t& shape, const strides_t& strides,
           std::shared_ptr<const void> owner = nullptr) {
    leaves[count] = {reinterpret_cast<const char*>(data), shape, strides, sizeof(T)};
    keep[count++] = std::move(owner);
  }
  template <strided_leaf L>
  void add(const L& leaf) {
    add(leaf.raw_data(), leaf.shape(), leaf.strides());
  }
};

// The layouts of every strided leaf of e, through every node (what an operation that reads all of
// e reads).
template <class E>
leaf_table<leaf_count_v<E>> leaf_layouts(const E& e) {
  leaf_table<leaf_count_v<E>> table;
  for_each_leaf(e, [&](const auto& leaf) {
    if constexpr (strided_leaf<std::remove_cvref_t<decltype(leaf)>>) table.add(leaf);
  });
  return table;
}

// Whether writing dst while computing e (in any order) could clobber something e reads.
template <class Dst, class E>
bool reads_destination(const Dst& dst, const E& e) {
  const auto table = leaf_layouts(e);
  const leaf_info out{reinterpret_cast<const char*>(dst.raw_data()), dst.shape(), dst.strides(),
                      sizeof(typename Dst::value_type)};
  return overlaps_any(out, table.leaves, table.count);
}

// Throws shape_error naming `what` and both devices unless every tensor leaf of the operands (of
// a backend with device memory) lives on one device. Host backends have one device.
template <class... X>
void check_devices(const char* what, const X&... operands) {
  int first = -1;
  auto check = [&](const auto& leaf) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (strided_leaf<L> && !std::is_same_v<backend_t<L>, no_backend>) {
      if constexpr (!backend_t<L>::host_accessible) {
        if (!leaf.storage_ptr()) return;
        const int device = leaf.storage_ptr()->device();
        if (first < 0) first = device;
        if (device != first)
          raise<shape_error>(what, ": operands live on ", backend_t<L>::name, " devices ", first,
                             " and ", device, "; copy one of them explicitly first (meld::to)");
      }
    }
  };
  (for_each_leaf(operands, check), ...);
}

// The device of an expression's first operand that lives on a device (-1 when none does).
template <class X>
int operand_device(const X& e) {
  int device = -1;
  for_each_leaf(e, [&](const auto& leaf) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (strided_leaf<L> && !std::is_same_v<backend_t<L>, no_backend>) {
      if constexpr (!backend_t<L>::host_accessible)
        if (device < 0 && leaf.storage_ptr()) device = leaf.storage_ptr()->device();
    }
  });
  return device;
}

}  // namespace meld::detail
