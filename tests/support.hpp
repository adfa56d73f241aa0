// Helpers for tests: random data from the standard library (independent of meld's generator),
// and naive element access by index arithmetic (independent of meld's evaluator).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <meld/meld.hpp>

#include "catch.hpp"

namespace test {

using meld::index_t;
using index_list = std::vector<index_t>;

// Calls f(idx) for every index of `shape` in row-major order.
template <class F>
void for_each_index(const meld::shape_t& shape, F&& f) {
  const int r = shape.size();
  if (shape.product() == 0) return;
  index_list idx(static_cast<std::size_t>(r), 0);
  for (;;) {
    f(idx);
    int d = r - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// The element of t (any tensor or view) read at index `out` of a shape it broadcasts to.
template <class X>
auto at(const X& t, const index_list& out) {
  const int r = t.rank(), lead = static_cast<int>(out.size()) - r;
  index_t offset = 0;
  for (int d = 0; d < r; ++d) {
    const index_t i = t.shape()[d] == 1 ? 0 : out[lead + d];
    offset += i * t.strides()[d];
  }
  return t.data()[offset];
}

// Random elements from the standard library's generator, on the host (B = cpu<>) or copied to B.
template <class T, class B = meld::cpu<>>
meld::tensor<T, B> random_tensor(const meld::shape_t& shape, std::uint32_t seed, double lo = -2,
                                 double hi = 2) {
  if constexpr (!std::is_same_v<B, meld::cpu<>>) {
    return meld::to<B>(random_tensor<T>(shape, seed, lo, hi));
  } else {
    std::mt19937 gen(seed);
    meld::tensor<T> t(shape, meld::uninitialized);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (T& v : t) {
      if constexpr (std::is_integral_v<T>)
        v = static_cast<T>(std::floor(dist(gen)));
      else
        v = static_cast<T>(dist(gen));
    }
    return t;
  }
}

// A random shape of rank in [min_rank, max_rank] with extents in [1, max_extent].
inline meld::shape_t random_shape(std::mt19937& gen, int min_rank, int max_rank,
                                  index_t max_extent) {
  const int r = std::uniform_int_distribution<int>(min_rank, max_rank)(gen);
  meld::shape_t s;
  for (int i = 0; i < r; ++i)
    s.push_back(std::uniform_int_distribution<index_t>(1, max_extent)(gen));
  return s;
}

// A shape that broadcasts to `out`: leading axes dropped and some extents set to 1.
inline meld::shape_t broadcastable_from(std::mt19937& gen, const meld::shape_t& out) {
  const int drop = std::uniform_int_distribution<int>(0, out.size())(gen);
  meld::shape_t s;
  for (int i = drop; i < out.size(); ++i)
    s.push_back(std::uniform_int_distribution<int>(0, 2)(gen) == 0 ? 1 : out[i]);
  return s;
}

inline std::string at_string(const index_list& idx) {
  std::string s = "(";
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + ")";
}

// Compares every element of `result` (a tensor or view of any backend: device results are copied
// to the host first) with expected(idx).
template <class X, class F>
void check_elements(const X& result, F&& expected, double tol = 1e-5) {
  if constexpr (!meld::backend_t<X>::host_accessible) {
    const auto copy = meld::to<meld::cpu<>>(result);
    check_elements(copy, expected, tol);
  } else {
    for_each_index(result.shape(), [&](const index_list& idx) {
      const double want = static_cast<double>(expected(idx));
      const double got = static_cast<double>(at(result, idx));
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
      } else {
        INFO("shape " << result.shape() << " element " << at_string(idx));
        REQUIRE(got == Approx(want).epsilon(tol).margin(tol));
      }
    });
  }
}

// Restores the global pool's thread count at the end of a test that changes it.
struct thread_count_guard {
  int saved = meld::num_threads();
  ~thread_count_guard() { meld::set_num_threads(saved); }
};

// The exception message of f(), or "" if it does not throw E.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace test
