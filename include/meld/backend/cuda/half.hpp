// Half-precision storage for CUDA tensors: meld::half (IEEE binary16) and meld::bfloat16. They
// store; kernels compute in float (each leaf converts on load, each store converts back), and
// matrix products use tensor cores with float accumulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../../core/element_type.hpp"

namespace meld {

using half = __half;
using bfloat16 = __nv_bfloat16;

template <>
struct is_element_type<half> : std::true_type {};
template <>
struct is_element_type<bfloat16> : std::true_type {};

namespace detail {
// The type kernels compute in for a stored element type.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<half> {
  using type = float;
};
template <>
struct compute_type<bfloat16> {
  using type = float;
};
}  // namespace detail

}  // namespace meld
