// Reductions: over all elements (returning a scalar) or along one axis (returning an expression
// that is evaluated when it is assigned or used). A reduction of an expression is fused: sum(x * z)
// never materializes x * z.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "../core/config.hpp"
#include "expression.hpp"
#include "functors.hpp"
#include "operators.hpp"

// The functors are __host__ __device__; instantiated for xsimd batches (host code only) they call
// host functions, which nvcc would report (warning 20011) although that code never runs on a GPU.
#if defined(__CUDACC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 20011
#endif

namespace meld {

/// \addtogroup expressions
/// @{

namespace detail {

// What sums and products of T accumulate in and return: integers narrower than 64 bits (int32,
// and the bools of comparisons) widen to int64, as numpy's sum, prod and dot do on 64-bit
// platforms (1000 x 2^30 does not fit an int32); other types keep theirs.
template <class T>
using widened_t = std::conditional_t<std::is_integral_v<T> && (sizeof(T) < sizeof(std::int64_t)),
                                     std::int64_t, T>;

// a + b and a * b, wrapping modulo 2^64 for signed integers (numpy's int64 overflow) through
// unsigned arithmetic, since signed overflow is undefined; SIMD batches and floats as they are.
template <class V>
MELD_HD MELD_INLINE V wrapping_add(const V& a, const V& b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
    using U = std::make_unsigned_t<V>;
    return static_cast<V>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class V>
MELD_HD MELD_INLINE V wrapping_mul(const V& a, const V& b) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
    using U = std::make_unsigned_t<V>;
    return static_cast<V>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// The count, mean and M2 = sum((x - mean)^2) of some values: the state of a one-pass variance.
// X is a number, or a SIMD batch whose lanes are independent states of one count (the CPU's
// lanes). One value x starts with M2 = x - x: 0, or NaN for an infinite x (numpy's var of
// anything holding an infinity is NaN, through inf - inf).
template <class X>
struct moments {
  double count;
  X mean, m2;

  moments() = default;
  MELD_HD constexpr explicit moments(X x) : count(1), mean(x), m2(x - x) {}
  MELD_HD constexpr moments(double n, X mean_, X m2_) : count(n), mean(mean_), m2(m2_) {}
};

// The moments of two sets of values together: Chan, Golub and LeVeque's pairwise update
// (mean = mean_a + d n_b / n, M2 = M2_a + M2_b + d^2 n_a n_b / n, d = mean_b - mean_a). Merged in a
// balanced tree, the relative error of M2 is O(log2(n) eps kappa), kappa = |mean| / std, where
// sum(x^2) - n mean^2 loses eps kappa^2: all digits once kappa^2 exceeds 1 / eps.
template <class X>
MELD_HD MELD_INLINE moments<X> merge_moments(const moments<X>& a, const moments<X>& b) {
  if (b.count == 0) return a;
  if (a.count == 0) return b;
  const double n = a.count + b.count, fb = b.count / n;
  const X d = b.mean - a.mean;
  return moments<X>(n, a.mean + d * X(fb), a.m2 + b.m2 + d * d * X(a.count * fb));
}

// The value a fold's accumulator stands for: itself, or M2 of moments.
template <class A>
MELD_HD MELD_INLINE A fold_result(const A& a) {
  return a;
}
template <class X>
MELD_HD MELD_INLINE X fold_result(const moments<X>& a) {
  return a.m2;
}

}  // namespace detail

namespace reducers {

// A reducer folds values with a commutative, associative combine (up to rounding) from an
// identity. `result<T>` is the type it produces for elements of type T.
struct sum {
  template <class T>
  using result = detail::widened_t<T>;
  template <class T>
  static MELD_HD constexpr T identity() {
    return T(0);
  }
  template <class V>
  MELD_HD MELD_INLINE V operator()(const V& a, const V& b) const {
    return detail::wrapping_add(a, b);
  }
  static constexpr bool needs_elements = false;
  static constexpr const char* name = "sum";
};

struct prod {
  template <class T>
  using result = detail::widened_t<T>;
  template <class T>
  static MELD_HD constexpr T identity() {
    return T(1);
  }
  template <class V>
  MELD_HD MELD_INLINE V operator()(const V& a, const V& b) const {
    return detail::wrapping_mul(a, b);
  }
  static constexpr bool needs_elements = false;
  static constexpr const char* name = "prod";
};

// max and min propagate NaN, as numpy's do; they have no value for an empty input.
struct max {
  template <class T>
  using result = T;
  template <class T>
  static MELD_HD constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  template <class V>
  MELD_HD MELD_INLINE V operator()(const V& a, const V& b) const {
    return ops::maximum{}(a, b);
  }
  static constexpr bool needs_elements = true;
  static constexpr const char* name = "max";
};

struct min {
  template <class T>
  using result = T;
  template <class T>
  static MELD_HD constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
  template <class V>
  MELD_HD MELD_INLINE V operator()(const V& a, const V& b) const {
    return ops::minimum{}(a, b);
  }
  static constexpr bool needs_elements = true;
  static constexpr const char* name = "min";
};

// mean along an axis: a sum divided by the count (integers give double, as in numpy).
struct mean {
  template <class T>
  using result = std::conditional_t<std::is_floating_point_v<T>, T, double>;
  static constexpr bool needs_elements = false;
  static constexpr const char* name = "mean";
};

// The sum of squared deviations from the mean, M2 = sum((x - mean)^2), which var and std divide
// by n - ddof: one pass over the elements, folded as detail::moments in double (integers give
// double, as numpy's var; float's M2 is computed in double and returned as float). Backends
// update each accumulator with Welford's recurrence and merge accumulators with `merge_moments`.
struct squared_deviations {
  template <class T>
  using result = std::conditional_t<std::is_floating_point_v<T>, T, double>;
  template <class A>
  static MELD_HD constexpr A identity() {
    return A(0, 0, 0);
  }
  template <class X>
  MELD_HD MELD_INLINE detail::moments<X> operator()(const detail::moments<X>& a,
                                                    const detail::moments<X>& b) const {
    return detail::merge_moments(a, b);
  }
  static constexpr bool needs_elements = false;
  static constexpr const char* name = "var";
};

// Index of the first maximum / minimum along an axis (NaN counts as the extreme, as in numpy).
struct argmax {
  template <class T>
  using result = std::int64_t;
  static constexpr bool needs_elements = true;
  static constexpr const char* name = "argmax";
  template <class T>
  static MELD_HD bool better(T candidate, T best) {
    return candidate > best || (candidate != candidate && best == best);
  }
};

struct argmin {
  template <class T>
  using result = std::int64_t;
  static constexpr bool needs_elements = true;
  static constexpr const char* name = "argmin";
  template <class T>
  static MELD_HD bool better(T candidate, T best) {
    return candidate < best || (candidate != candidate && best == best);
  }
};

}  // namespace reducers

// A reduction along one axis of an operand. As a node in a larger expression it is evaluated once
// into a temporary before the enclosing expression (never once per element that reads it).
template <class R, class A>
class reduce_expr : public expression_tag {
 public:
  using value_type = typename R::template result<detail::compute_t<value_t<A>>>;
  using backend_type = backend_t<A>;
  using reducer_type = R;
  using operand_type = A;
  static constexpr bool composite = true;  // see expr/walk.hpp

  reduce_expr(A a, long axis, bool keepdims) : a_(std::move(a)), keepdims_(keepdims) {
    const shape_t& in = a_.shape();
    axis_ = normalize_axis(axis, in.size(), R::name);
    if (R::needs_elements && in[axis_] == 0)
      detail::raise<shape_error>(R::name, ": axis ", axis, " of shape ", in,
                                 " is empty, and an empty ", R::name, " has no value");
    shape_ = in;
    if (keepdims_)
      shape_[axis_] = 1;
    else
      shape_.erase(axis_);
  }

  const shape_t& shape() const { return shape_; }
  const shape_t* uniform_shape() const { return &shape_; }
  const A& operand() const { return a_; }
  int axis() const { return axis_; }
  bool keepdims() const { return keepdims_; }

  // The same reduction of f(operand).
  template <class F>
  auto transform(F&& f) const {
    auto a = f(a_);
    return reduce_expr<R, decltype(a)>(std::move(a), axis_, keepdims_);
  }
  template <class F>
  void for_each_operand(F&& f) const {
    f(a_);
  }

 private:
  A a_;
  int axis_ = 0;
  bool keepdims_ = false;
  shape_t shape_;
};

namespace detail {
template <class R, class E>
auto make_reduce(E&& e, long axis, bool keepdims) {
  auto c = make_closure(std::forward<E>(e));
  return reduce_expr<R, decltype(c)>(std::move(c), axis, keepdims);
}

template <class R, class E>
auto reduce_all(E&& e) {
  auto c = make_closure(std::forward<E>(e));
  return executor<backend_t<decltype(c)>>::template reduce<R>(c);
}
}  // namespace detail

// ---- over all elements: return a scalar -------------------------------------------------------
// (for the asynchronous policies, a meld::future of it that converts to the scalar on use)
// sum, prod and dot return the element type, except that int32 (and comparisons) give int64
// (detail::widened_t); int64 results wrap modulo 2^64, as numpy's.

/// Sum of every element; float sums are pairwise (see README: relative error about
/// (log2(n / 1024) + 40) * eps * sum(|x|), independent of the thread count).
template <expression E>
auto sum(E&& e) {
  return detail::reduce_all<reducers::sum>(std::forward<E>(e));
}
/// Product of every element.
template <expression E>
auto prod(E&& e) {
  return detail::reduce_all<reducers::prod>(std::forward<E>(e));
}
/// max / min of an empty expression throw shape_error.
template <expression E>
auto max(E&& e) {
  return detail::reduce_all<reducers::max>(std::forward<E>(e));
}
/// Minimum of every element (see max).
template <expression E>
auto min(E&& e) {
  return detail::reduce_all<reducers::min>(std::forward<E>(e));
}
/// Arithmetic mean; an integer expression gives double. NaN for an empty expression.
template <expression E>
auto mean(E&& e) {
  return detail::reduce_all<reducers::mean>(std::forward<E>(e));
}
/// Flat (row-major) index of the first maximum / minimum.
template <expression E>
auto argmax(E&& e) {
  return detail::reduce_all<reducers::argmax>(std::forward<E>(e));
}
/// Flat (row-major) index of the first minimum.
template <expression E>
auto argmin(E&& e) {
  return detail::reduce_all<reducers::argmin>(std::forward<E>(e));
}

/// sum(a * b): the inner product of two expressions of one shape (broadcasting allowed). Narrow
/// integers are multiplied in int64 too: 2^20 x 2^20 already overflows an int32.
template <class A, class B>
requires expression<A> && expression<B>
auto dot(A&& a, B&& b) {
  using V = std::common_type_t<value_t<A>, value_t<B>>;
  if constexpr (!std::is_same_v<detail::widened_t<V>, V>)
    return sum(cast<detail::widened_t<V>>(std::forward<A>(a)) *
               cast<detail::widened_t<V>>(std::forward<B>(b)));
  else
    return sum(std::forward<A>(a) * std::forward<B>(b));
}

// ---- along an axis: return an expression
// --------------------------------------------------------- axis may be negative (-1 is the last);
// keepdims keeps the reduced axis with extent 1, so that the result broadcasts against the operand
// (x - max(x, -1, true)).

#define MELD_AXIS_REDUCTION(NAME)                                                   \
  template <expression E>                                                           \
  auto NAME(E&& e, long axis, bool keepdims = false) {                              \
    return detail::make_reduce<reducers::NAME>(std::forward<E>(e), axis, keepdims); \
  }
/// The sum along `axis` (negative counts from the end), an expression; `keepdims` keeps the axis
/// with extent 1. Integer sums widen to int64.
MELD_AXIS_REDUCTION(sum)
/// The product along `axis`, an expression (`keepdims` keeps the axis with extent 1). Integer
/// products widen to int64.
MELD_AXIS_REDUCTION(prod)
/// The maximum along `axis`, an expression (`keepdims` keeps the axis with extent 1, so that
/// x - max(x, -1, true) broadcasts).
MELD_AXIS_REDUCTION(max)
/// The minimum along `axis`, an expression (`keepdims` keeps the axis with extent 1).
MELD_AXIS_REDUCTION(min)
/// The mean along `axis`, an expression (`keepdims` keeps the axis with extent 1); double for
/// integer operands.
MELD_AXIS_REDUCTION(mean)
/// The index of the maximum along `axis` (the first one on ties), an int64 expression.
MELD_AXIS_REDUCTION(argmax)
/// The index of the minimum along `axis` (the first one on ties), an int64 expression.
MELD_AXIS_REDUCTION(argmin)
#undef MELD_AXIS_REDUCTION

/// @}

}  // namespace meld

#if defined(__CUDACC__)
#pragma nv_diagnostic pop
#endif
