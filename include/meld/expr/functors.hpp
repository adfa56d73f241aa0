// The elementwise operations. Each functor is one generic template that works on scalars and, by
// argument-dependent lookup, on SIMD batches (the CPU backend passes xsimd batches; unqualified
// calls such as exp(a) then find xsimd::exp). Nothing here includes a SIMD library.
//
// Every functor declares:
//   cost      a rough per-element cost in "additions", used to decide when to use many threads;
//   simd<S, Ts...>   whether it may run on batches of S when its operands have value types Ts.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/element_type.hpp"

// The functors are __host__ __device__; instantiated for xsimd batches (host code only) they call
// host functions, which nvcc would report (warning 20011) although that code never runs on a GPU.
#if defined(__CUDACC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 20011
#endif

namespace meld {
namespace detail {

template <class C, class T>
MELD_HD constexpr T select(C cond, const T& a, const T& b) {
  return cond ? a : b;
}

// Every operand is of the batch element type S, and S is a number (not bool).
template <class S, class... Ts>
inline constexpr bool same_numeric = (std::is_same_v<Ts, S> && ...) && !std::is_same_v<S, bool>;

template <class S, class... Ts>
inline constexpr bool same_floating = same_numeric<S, Ts...>&& std::is_floating_point_v<S>;

// Each lane of a SIMD batch of floats rounded to To (bfloat16 or half) and widened back, as
// To(x) then float does one value at a time. Defined by the CPU backend, which evaluates batches
// (backend/cpu/cursor.hpp).
template <class To, class Batch>
MELD_INLINE Batch round_lanes(const Batch& v);

// A floating-point value converted to the integer type I, defined for every input (a plain
// static_cast is undefined behaviour for NaN, infinities and values out of I's range): NaN gives
// 0, values beyond I's range the nearest limit, the rest truncate toward zero. (Rust's `as` and
// Java's casts do the same; numpy gives INT_MIN with a warning.)
template <class I, class F>
MELD_HD MELD_INLINE I saturating_cast(F x) {
  constexpr int digits = std::numeric_limits<I>::digits;           // 31 for int32, 32 for uint32
  constexpr F upper = F(std::uint64_t(1) << (digits - 1)) * F(2);  // 2^digits: exact in F
  constexpr F lower = std::is_signed_v<I> ? -upper : F(-1);        // exclusive below
  if (!(x == x)) return I(0);
  if (x >= upper) return std::numeric_limits<I>::max();
  if (x <= lower) return std::numeric_limits<I>::min();
  return static_cast<I>(x);
}

}  // namespace detail

namespace ops {

// ---- arithmetic ---------------------------------------------------------------------------------

struct plus {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    return a + b;
  }
  static constexpr const char* name = "operator+";
};

struct minus {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    return a - b;
  }
  static constexpr const char* name = "operator-";
};

struct multiplies {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    return a * b;
  }
  static constexpr const char* name = "operator*";
};

// Integer division follows C++ (truncation), except that it never traps: x / 0 is 0 (as numpy
// returns) and INT_MIN / -1 wraps to INT_MIN. Floating division is IEEE.
struct divides {
  static constexpr int cost = 4;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_floating<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
      using R = decltype(a / b);
      if (b == 0) return R(0);
      using U = std::make_unsigned_t<R>;
      if (b == B(-1)) return static_cast<R>(U(0) - static_cast<U>(a));  // wraps, no overflow
      return static_cast<R>(a / b);
    } else {
      return a / b;
    }
  }
  static constexpr const char* name = "operator/";
};

struct negate {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A>
  MELD_HD MELD_INLINE auto operator()(const A& a) const {
    return -a;
  }
};

// ---- comparisons and logic (value type bool)
// -------------------------------------------------------

#define MELD_COMPARISON(NAME, OP)                                       \
  struct NAME {                                                         \
    static constexpr int cost = 1;                                      \
    template <class S, class... Ts>                                     \
    static constexpr bool simd = detail::same_numeric<S, Ts...>;        \
    template <class A, class B>                                         \
    MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const { \
      return a OP b;                                                    \
    }                                                                   \
    static constexpr const char* name = "operator" #OP;                 \
  };
MELD_COMPARISON(less, <)
MELD_COMPARISON(less_equal, <=)
MELD_COMPARISON(greater, >)
MELD_COMPARISON(greater_equal, >=)
MELD_COMPARISON(equal_to, ==)
#undef MELD_COMPARISON

// !(a == b) rather than a != b: IEEE says NaN != NaN, and some SIMD code paths (xsimd 8's AVX
// ones among them) compare "ordered not-equal", which is false for NaN.
struct not_equal_to {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    return !(a == b);
  }
  static constexpr const char* name = "operator!=";
};

struct logical_and {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = (std::is_same_v<Ts, bool> && ...);
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    return a & b;
  }
  static constexpr const char* name = "logical_and";
};

struct logical_or {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = (std::is_same_v<Ts, bool> && ...);
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    return a | b;
  }
  static constexpr const char* name = "logical_or";
};

struct logical_not {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = (std::is_same_v<Ts, bool> && ...);
  template <class A>
  MELD_HD MELD_INLINE auto operator()(const A& a) const {
    return !a;
  }
};

// where(c, a, b): c is a comparison (bool) or a number (nonzero selects a).
struct select {
  static constexpr int cost = 1;
  template <class S, class C, class A, class B>
  static constexpr bool simd = (std::is_same_v<C, bool> ||
                                std::is_same_v<C, S>)&&detail::same_numeric<S, A, B>;
  template <class C, class A, class B>
  MELD_HD MELD_INLINE auto operator()(const C& c, const A& a, const B& b) const {
    using detail::select;
    if constexpr (std::is_arithmetic_v<A> && std::is_arithmetic_v<B>) {
      using R = std::common_type_t<A, B>;
      return c ? static_cast<R>(a) : static_cast<R>(b);
    } else if constexpr (std::is_same_v<decltype(c == c), decltype(a == a)> &&
                         !std::is_same_v<decltype(c == c), C>) {
      return select(!(c == C(0)), a, b);  // a numeric batch as condition
    } else {
      return select(c, a, b);
    }
  }
  static constexpr const char* name = "where";
};

// ---- math
// -----------------------------------------------------------------------------------------

// Transcendental functions of integers are computed in double, as in numpy.
#define MELD_MATH_FUNCTION(NAME, COST, EXPR)                      \
  struct NAME##_op {                                              \
    static constexpr int cost = COST;                             \
    template <class S, class... Ts>                               \
    static constexpr bool simd = detail::same_floating<S, Ts...>; \
    template <class A>                                            \
    MELD_HD MELD_INLINE static auto compute(const A& a) {         \
      using std::exp;                                             \
      using std::log;                                             \
      using std::sqrt;                                            \
      using std::tanh;                                            \
      using std::sin;                                             \
      using std::cos;                                             \
      return EXPR;                                                \
    }                                                             \
    template <class A>                                            \
    MELD_HD MELD_INLINE auto operator()(const A& a) const {       \
      if constexpr (std::is_integral_v<A>)                        \
        return compute(static_cast<double>(a));                   \
      else                                                        \
        return compute(a);                                        \
    }                                                             \
  };
MELD_MATH_FUNCTION(exp, 12, exp(a))
MELD_MATH_FUNCTION(log, 12, log(a))
MELD_MATH_FUNCTION(sqrt, 4, sqrt(a))
MELD_MATH_FUNCTION(tanh, 16, tanh(a))
MELD_MATH_FUNCTION(sin, 12, sin(a))
MELD_MATH_FUNCTION(cos, 12, cos(a))
// 1 / (1 + e^-a): saturates cleanly (e^-a overflows to inf for very negative a, giving 0).
MELD_MATH_FUNCTION(sigmoid, 14, A(1) / (A(1) + exp(-a)))
#undef MELD_MATH_FUNCTION

struct abs_op {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A>
  MELD_HD MELD_INLINE auto operator()(const A& a) const {
    using std::abs;
    return abs(a);
  }
};

struct square_op {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A>
  MELD_HD MELD_INLINE auto operator()(const A& a) const {
    return a * a;
  }
};

// max(a, 0); NaN stays NaN.
struct relu_op {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A>
  MELD_HD MELD_INLINE A operator()(const A& a) const {
    using detail::select;
    return select(a < A(0), A(0), a);
  }
};

// Elementwise maximum / minimum that propagate NaN (as numpy.maximum does).
struct maximum {
  static constexpr int cost = 2;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a_, const B& b_) const {
    using R = decltype(a_ + b_);
    using detail::select;
    const R a = static_cast<R>(a_), b = static_cast<R>(b_);
    return select((a > b) | !(a == a), a, b);
  }
  static constexpr const char* name = "maximum";
};

struct minimum {
  static constexpr int cost = 2;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a_, const B& b_) const {
    using R = decltype(a_ + b_);
    using detail::select;
    const R a = static_cast<R>(a_), b = static_cast<R>(b_);
    return select((a < b) | !(a == a), a, b);
  }
  static constexpr const char* name = "minimum";
};

// a^b. Integers raised to integer powers stay integers (exact, by squaring; a negative exponent
// gives 0 unless |a| == 1, as the exact result truncates); anything else uses pow in floating
// point.
struct power {
  static constexpr int cost = 24;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_floating<S, Ts...>;
  template <class A, class B>
  MELD_HD MELD_INLINE auto operator()(const A& a, const B& b) const {
    if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
      using R = decltype(a * b);
      if (b < 0) return R(a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0);
      using U = std::make_unsigned_t<R>;  // wraps on overflow instead of undefined behaviour
      U result = 1, base = static_cast<U>(a);
      for (auto e = static_cast<std::make_unsigned_t<B>>(b); e; e >>= 1) {
        if (e & 1) result *= base;
        base *= base;
      }
      return static_cast<R>(result);
    } else if constexpr (std::is_arithmetic_v<A> && std::is_arithmetic_v<B>) {
      using R = std::conditional_t<std::is_integral_v<decltype(a * b)>, double, decltype(a * b)>;
      using std::pow;
      return pow(static_cast<R>(a), static_cast<R>(b));
    } else {
      using std::pow;
      return pow(a, b);
    }
  }
  static constexpr const char* name = "pow";
};

// Rounding to an integral value: floor, ceil, and round half to even (numpy.round and
// torch.round: 2.5 -> 2, 3.5 -> 4, through nearbyint in the default rounding mode). Integers are
// already integral and keep their type and value.
#define MELD_ROUNDING_FUNCTION(NAME, FN)                          \
  struct NAME##_op {                                              \
    static constexpr int cost = 2;                                \
    template <class S, class... Ts>                               \
    static constexpr bool simd = detail::same_floating<S, Ts...>; \
    template <class A>                                            \
    MELD_HD MELD_INLINE A operator()(const A& a) const {          \
      if constexpr (std::is_integral_v<A>) {                      \
        return a;                                                 \
      } else {                                                    \
        using std::FN;                                            \
        return FN(a);                                             \
      }                                                           \
    }                                                             \
  };
MELD_ROUNDING_FUNCTION(floor, floor)
MELD_ROUNDING_FUNCTION(ceil, ceil)
MELD_ROUNDING_FUNCTION(round, nearbyint)
#undef MELD_ROUNDING_FUNCTION

// Classification of floating values (value type bool); integers are always finite. Scalar code
// (no SIMD batches): a - a is NaN exactly for NaN and infinities, which isfinite and isinf use.
struct isnan_op {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd = false;
  template <class A>
  MELD_HD MELD_INLINE bool operator()(const A& a) const {
    if constexpr (std::is_integral_v<A>)
      return false;
    else
      return a != a;
  }
};
struct isinf_op {
  static constexpr int cost = 2;
  template <class S, class... Ts>
  static constexpr bool simd = false;
  template <class A>
  MELD_HD MELD_INLINE bool operator()(const A& a) const {
    if constexpr (std::is_integral_v<A>)
      return false;
    else
      return a == a && (a - a) != (a - a);
  }
};
struct isfinite_op {
  static constexpr int cost = 2;
  template <class S, class... Ts>
  static constexpr bool simd = false;
  template <class A>
  MELD_HD MELD_INLINE bool operator()(const A& a) const {
    if constexpr (std::is_integral_v<A>)
      return true;
    else
      return (a - a) == (a - a);
  }
};

// min(max(a, lo), hi) with NaN kept (numpy.clip); lo and hi are scalars of a's type.
template <class T>
struct clip_op {
  T lo, hi;
  static constexpr int cost = 2;
  template <class S, class... Ts>
  static constexpr bool simd = detail::same_numeric<S, Ts...>;
  template <class A>
  MELD_HD MELD_INLINE A operator()(const A& a) const {
    using detail::select;
    const A l(lo), h(hi);
    const A low = select(a < l, l, a);  // NaN compares false: stays NaN
    return select(low > h, h, low);
  }
};

// cast<To>(a). On batches: a cast between equal types, or to bfloat16 or half from float, whose
// batches stay float (the lanes rounded to To; the expression above computes in float).
template <class To>
struct cast_op {
  static constexpr int cost = 1;
  template <class S, class... Ts>
  static constexpr bool simd =
      std::is_same_v<detail::compute_t<To>, S>&& detail::same_numeric<S, Ts...>;
  template <class A>
  MELD_HD MELD_INLINE auto operator()(const A& a) const {
    if constexpr (std::is_floating_point_v<A> && std::is_integral_v<To> &&
                  !std::is_same_v<To, bool>)
      return detail::saturating_cast<To>(a);
    else if constexpr (std::is_constructible_v<To, const A&>)  // numbers, half, bfloat16
      return static_cast<To>(a);
    else if constexpr (!std::is_same_v<detail::compute_t<To>, To>)
      return detail::round_lanes<To>(a);  // a SIMD batch of floats
    else
      return a;  // a SIMD batch, which is one of To already (simd<S, ...> needs S == To)
  }
};

}  // namespace ops
}  // namespace meld

#if defined(__CUDACC__)
#pragma nv_diagnostic pop
#endif
