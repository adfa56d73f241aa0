// Half-precision storage for CUDA tensors: meld::half (IEEE binary16), beside meld::bfloat16
// (core/bfloat16.hpp, every backend's). They store; kernels compute in float (each leaf converts on
// load, each store converts back), and matrix products use tensor cores with float accumulation.
#pragma once

#include <cuda_fp16.h>

#include "../../core/element_type.hpp"

namespace meld {

using half = __half;

template <>
struct is_element_type<half> : std::true_type {};

namespace detail {
template <>
struct compute_type<half> {
  using type = float;
};
}  // namespace detail

}  // namespace meld
