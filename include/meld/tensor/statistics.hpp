// Statistics built from fused reductions: var, std, logsumexp, norm, over every element (a
// scalar, waited for under async) or along an axis (a tensor). Every backend: each is a few fused
// expressions, which each backend evaluates.
//
// var and std read the data once: a reduction (reducers::squared_deviations) whose accumulator is
// the count, mean and M2 = sum((x - mean)^2), in double, updated per element with Welford's
// recurrence and merged with Chan, Golub and LeVeque's pairwise formula (expr/reduce.hpp), then
// divided by n - ddof. Welford's update alone has a relative error of M2 up to n eps kappa,
// kappa = |mean| / std; the merges keep the runs short: (32 + log2 n) eps kappa on the CPU,
// sqrt(n) eps kappa along a non-contiguous axis (backend/cpu/moments.hpp), n / threads + log2
// threads on CUDA. sum(x^2) - n mean^2 would lose eps kappa^2: every digit once the mean is large
// against the spread. This replaced two passes (the mean, then the sum of squared deviations from
// it, in float), which read the data twice and were off by up to 1.8 % along rows of 1001 floats
// around 10^6 with a spread of 1 (their float mean's rounding, squared). The one pass is
// compute-bound, about 6 G elements/s a core with AVX-512 (four double operations an element, and
// the widening), where a float sum runs at the memory's speed: on 2^24 floats it takes 0.92x the
// two passes' time, at half of STREAM triad's bandwidth; in cache, 2x their time
// (benchmarks/reductions.cpp, var rows; EPYC AVX-512 VM).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "../expr/operators.hpp"
#include "../expr/reduce.hpp"
#include "tensor.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {
// The value of a reduction to a scalar, waiting for it under async (a meld::future).
template <class R>
auto scalar_value(const R& r) {
  if constexpr (requires { r.get(); })
    return r.get();
  else
    return r;
}

template <class E>
using statistic_t = std::conditional_t<std::is_floating_point_v<value_t<E>>, value_t<E>, double>;

// exp(d) of a shifted operand (d <= 0, or +inf, or NaN), with d clipped to [-1000, 1000] first:
// exp of -1000 is already 0 and of 1000 already inf in float and double, and xsimd's exp turns
// an infinite or NaN argument into an integer on the way (undefined behaviour, which UBSan
// reports). NaN is passed through.
template <class D>
auto shifted_exp(D&& d) {
  using T = value_t<D>;
  auto c = make_closure(std::forward<D>(d));
  return where(isnan(c), c, exp(where(isnan(c), T(0), clip(c, T(-1000), T(1000)))));
}

template <class E>
void check_ddof(index_t n, int ddof, const char* what) {
  if (ddof < 0 || ddof >= n + (n == 0))
    raise<shape_error>(what, ": ddof ", ddof, " is out of range for ", n, " elements");
}
}  // namespace detail

/// Variance of every element: sum((x - mean)^2) / (n - ddof) (numpy.var; ddof = 1 is torch.var's
/// unbiased default). Integers give double; NaN or an infinity among the elements gives NaN, and
/// so does n = 0. One pass over the elements (see above).
template <expression E>
auto var(const E& x, int ddof = 0) {
  using R = detail::statistic_t<E>;
  const index_t n = x.shape().product();
  detail::check_ddof<E>(n, ddof, "var");
  const R m2 =
      static_cast<R>(detail::scalar_value(detail::reduce_all<reducers::squared_deviations>(x)));
  return m2 / static_cast<R>(n - ddof);
}

/// Variance along an axis (negative counts from the end), as a tensor; keepdims keeps the axis
/// with extent 1.
template <expression E>
auto var(const E& x, long axis, bool keepdims, int ddof = 0) {
  using R = detail::statistic_t<E>;
  const int a = normalize_axis(axis, x.shape().size(), "var");
  const index_t n = x.shape()[a];
  detail::check_ddof<E>(n, ddof, "var");
  tensor<R, backend_t<E>> out = detail::make_reduce<reducers::squared_deviations>(x, a, keepdims);
  out /= static_cast<R>(n - ddof);
  return out;
}

/// Standard deviation of every element: sqrt(var(x, ddof)).
template <expression E>
auto std(const E& x, int ddof = 0) {
  using std::sqrt;
  return sqrt(var(x, ddof));
}

/// Standard deviation along an axis, as a tensor.
template <expression E>
auto std(const E& x, long axis, bool keepdims, int ddof = 0) {
  auto v = var(x, axis, keepdims, ddof);
  v = sqrt(v);
  return v;
}

/// log(sum(exp(x))) without overflow: shifted by the maximum (scipy.special.logsumexp). All -inf
/// gives -inf, any +inf gives +inf, NaN gives NaN. Floating elements only.
template <expression E>
auto logsumexp(const E& x) {
  using T = value_t<E>;
  static_assert(std::is_floating_point_v<T>,
                "meld::logsumexp: needs floating elements; convert with meld::cast<double>(x)");
  if (x.shape().product() == 0) return -std::numeric_limits<T>::infinity();
  const T m = static_cast<T>(detail::scalar_value(max(x)));
  const T shift = std::isfinite(m) ? m : T(0);
  using std::log;
  return shift + log(static_cast<T>(detail::scalar_value(sum(detail::shifted_exp(x - shift)))));
}

/// logsumexp along an axis, as a tensor.
template <expression E>
auto logsumexp(const E& x, long axis, bool keepdims = false) {
  using T = value_t<E>;
  using B = backend_t<E>;
  static_assert(std::is_floating_point_v<T>,
                "meld::logsumexp: needs floating elements; convert with meld::cast<double>(x)");
  const int a = normalize_axis(axis, x.shape().size(), "logsumexp");
  const tensor<T, B> m = max(x, a, true);
  const tensor<T, B> shift = where(isfinite(m), m, T(0));
  tensor<T, B> out = log(sum(detail::shifted_exp(x - shift), a, true)) + shift;
  if (keepdims) return out;
  return tensor<T, B>(out.squeeze(a));
}

/// The vector norm of every element: ord 2 (the default; Euclidean), 1 (sum of magnitudes) or
/// infinity (largest magnitude), as numpy.linalg.norm of the flattened array. Integers give
/// double. Throws std::invalid_argument for another ord.
template <expression E>
auto norm(const E& x, double ord = 2) {
  using R = detail::statistic_t<E>;
  if (ord == 2) {
    using std::sqrt;
    return sqrt(static_cast<R>(detail::scalar_value(sum(square(cast<R>(x))))));
  }
  if (ord == 1) return static_cast<R>(detail::scalar_value(sum(abs(cast<R>(x)))));
  if (ord == std::numeric_limits<double>::infinity())
    return x.shape().product() ? static_cast<R>(detail::scalar_value(max(abs(cast<R>(x))))) : R(0);
  detail::raise<std::invalid_argument>("norm: ord ", ord, " is not 1, 2 or infinity");
}

/// The vector norm along an axis, as a tensor (see norm).
template <expression E>
auto norm(const E& x, double ord, long axis, bool keepdims = false) {
  using R = detail::statistic_t<E>;
  using B = backend_t<E>;
  const int a = normalize_axis(axis, x.shape().size(), "norm");
  if (ord == 2) {
    tensor<R, B> out = sum(square(cast<R>(x)), a, keepdims);
    out = sqrt(out);
    return out;
  }
  if (ord == 1) return tensor<R, B>(sum(abs(cast<R>(x)), a, keepdims));
  if (ord == std::numeric_limits<double>::infinity())
    return tensor<R, B>(max(abs(cast<R>(x)), a, keepdims));
  detail::raise<std::invalid_argument>("norm: ord ", ord, " is not 1, 2 or infinity");
}

/// @}

}  // namespace meld
