// How the CUDA executor lowers an expression (the walk is expr/walk.hpp's lower()): each input of
// the fused kernel becomes a device leaf or scalar (kernels.hpp), recorded with its layout and
// ordering state; reductions along an axis and products inside an expression are evaluated first,
// into temporaries on the device. Then one plan (backend/plan.hpp) coalesces the iteration, and
// its strides go into the leaves.
#pragma once

#include "platform.hpp"

#include <memory>
#include <type_traits>
#include <utility>

#include "../../expr/walk.hpp"
#include "../../tensor/tensor.hpp"
#include "../lowering.hpp"
#include "../plan.hpp"
#include "kernels.hpp"
#include "memory.hpp"

namespace meld::detail::cuda_eval {

// A leaf's layout and ordering state, in tree order.
struct leaf_entry {
  leaf_info layout;
  cuda_access* access = nullptr;
};

template <int N>
struct input_table {
  leaf_entry leaves[N > 0 ? N : 1];
  std::shared_ptr<const void> keep[N > 0 ? N : 1];  // temporaries of materialized inputs
  int count = 0;

  // Before work on stream s reads the inputs: s waits for other streams' writes.
  void before(cudaStream_t s) const {
    for (int i = 0; i < count; ++i)
      if (leaves[i].access) leaves[i].access->before(s, false);
  }
  void after(cudaStream_t s) const {
    for (int i = 0; i < count; ++i)
      if (leaves[i].access) leaves[i].access->after(s, false);
  }
};

// Evaluated on its own into a device temporary (defined with the executor).
template <class E>
tensor<value_t<E>, typename E::backend_type> materialize(const E& e);

template <class L>
cuda_access* access_of(const L& leaf) {
  return leaf.storage_ptr() ? &leaf.storage_ptr()->access() : nullptr;
}

// Makes the device input of each input, recording it in `table`.
template <class Table>
struct make_input {
  Table& table;
  template <class E>
  auto operator()(const E& e) const {
    using V = std::remove_const_t<typename std::remove_cvref_t<E>::value_type>;
    if constexpr (is_scalar_expr<E>) {
      return dscalar<V>{e.value()};
    } else if constexpr (strided_leaf<E>) {
      record(e.raw_data(), e.shape(), e.strides(), access_of(e), nullptr);
      return dleaf<V>{e.raw_data(), {}};
    } else {
      auto t = materialize(e);
      const V* data = t.raw_data();
      // The layout is read before the tensor gives up its storage (the order in which function
      // arguments are evaluated is unspecified: g++ released first, recording zero strides).
      const shape_t shape = t.shape();
      const strides_t strides = t.strides();
      cuda_access* access = &t.storage_ptr()->access();
      record(data, shape, strides, access, std::move(t).release().storage_ptr());
      return dleaf<V>{data, {}};
    }
  }
  template <class T>
  void record(const T* data, const shape_t& shape, const strides_t& strides, cuda_access* access,
              std::shared_ptr<const void> keep) const {
    table.leaves[table.count] = {{reinterpret_cast<const char*>(data), shape, strides, sizeof(T)},
                                 access};
    table.keep[table.count++] = std::move(keep);
  }
};

template <class D>
struct is_device_leaf : std::false_type {};
template <class S>
struct is_device_leaf<dleaf<S>> : std::true_type {};

// The device tree of e and the table of its inputs.
template <class E>
using device_tree_t =
    decltype(lower(std::declval<const E&>(), std::declval<const make_input<input_table<1>>&>()));

template <class E>
inline constexpr int input_count = count_inputs<is_device_leaf, device_tree_t<E>>::value;

// The coalesced iteration over `shape` for the operand `out` (when given) and the inputs; strides
// in elements, per operand.
template <int N>
struct device_plan {
  launch_shape shape;
  index_t st[N > 0 ? N : 1][max_rank] = {};
  bool contiguous = true;
  index_t size = 0;
};

template <int N, int L>
device_plan<N> plan_for(const shape_t& shape, const leaf_info* out, const input_table<L>& table) {
  constexpr int P = N > 0 ? N : 1;
  char* base[P] = {};
  std::size_t elem[P];
  strides_t in[P];
  int k = 0;
  if (out) {
    base[k] = const_cast<char*>(out->data);
    elem[k] = out->elem;
    in[k++] = out->strides;
  }
  for (int i = 0; i < table.count; ++i, ++k) {
    const leaf_info& l = table.leaves[i].layout;
    base[k] = const_cast<char*>(l.data);
    elem[k] = l.elem;
    in[k] = broadcast_strides(l.shape, l.strides, shape);
  }
  if (k == 0) {
    elem[0] = 1;
    in[0] = dims::filled(shape.size(), 0);
  }
  const auto p = make_plan<P>(shape, base, elem, in);
  device_plan<N> d;
  d.shape.rank = p.rank;
  d.size = p.size;
  for (int a = 0; a < p.rank; ++a) d.shape.shape[a] = p.shape[a];
  for (int o = 0; o < P; ++o)
    for (int a = 0; a < p.rank; ++a) d.st[o][a] = p.strides[o][a] / static_cast<index_t>(elem[o]);
  d.contiguous = p.rank == 1 && p.contiguous();
  return d;
}

// Gives each device leaf its strides from the plan (rows first .. first + inputs of plan.st).
template <class Tree>
void set_strides(Tree& tree, const index_t (*st)[max_rank]) {
  int k = 0;
  for_each_input(tree, [&](auto& input) {
    if constexpr (requires { input.st; }) {
      for (int a = 0; a < max_rank; ++a) input.st[a] = st[k][a];
      ++k;
    }
  });
}

}  // namespace meld::detail::cuda_eval
