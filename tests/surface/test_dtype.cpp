// Element types: the promotion table of binary operations (PyTorch's, for meld's four types), the
// int64 x float32 decision, the assignments that widen implicitly, and meld::cast for the ones
// that narrow (tests/surface/narrowing.cpp checks that those do not compile without it).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../backends.hpp"

using meld::tensor;
using i32 = std::int32_t;
using i64 = std::int64_t;

namespace {

template <class A, class B>
using sum_t =
    meld::value_t<decltype(std::declval<const tensor<A>&>() + std::declval<const tensor<B>&>())>;

// Every cell of the README's table.
static_assert(std::is_same_v<sum_t<i32, i32>, i32> && std::is_same_v<sum_t<i32, i64>, i64> &&
              std::is_same_v<sum_t<i32, float>, float> &&
              std::is_same_v<sum_t<i32, double>, double>);
static_assert(std::is_same_v<sum_t<i64, i32>, i64> && std::is_same_v<sum_t<i64, i64>, i64> &&
              std::is_same_v<sum_t<i64, float>, float> &&
              std::is_same_v<sum_t<i64, double>, double>);
static_assert(std::is_same_v<sum_t<float, i32>, float> &&
              std::is_same_v<sum_t<float, i64>, float> &&
              std::is_same_v<sum_t<float, float>, float> &&
              std::is_same_v<sum_t<float, double>, double>);
static_assert(std::is_same_v<sum_t<double, i32>, double> &&
              std::is_same_v<sum_t<double, i64>, double> &&
              std::is_same_v<sum_t<double, float>, double> &&
              std::is_same_v<sum_t<double, double>, double>);

// The assignment rule.
static_assert(meld::converts_without_loss<i32, i64> && meld::converts_without_loss<float, double> &&
              meld::converts_without_loss<i64, float> && meld::converts_without_loss<bool, i32>);
static_assert(!meld::converts_without_loss<float, i32> &&
              !meld::converts_without_loss<double, float> &&
              !meld::converts_without_loss<i64, i32> && !meld::converts_without_loss<double, i64>);

}  // namespace

BACKEND_TEST_CASE("int64 with float32 computes in float32; widening assignments need no cast",
                  "[surface]") {
  tensor<i64> hl({2});
  hl(0) = (i64(1) << 40) + 1;
  hl(1) = -3;
  tensor<float> hf({2});
  hf(0) = 0.1f;
  hf(1) = 0.5f;
  const auto l = test::on<B>(hl);
  const auto f = test::on<B>(hf);
  // float32, as PyTorch: the int64 operand is converted to float first.
  const tensor<float> p = test::host(tensor<float, B>(l * f));
  REQUIRE(p(0) == static_cast<float>(static_cast<float>(hl(0)) * 0.1f));
  REQUIRE(p(0) == 109951164416.f);
  REQUIRE(p(1) == -1.5f);
  // Widening: int64 into float64 and float32 into float64 keep every value here exactly.
  const tensor<double> w = test::host(tensor<double, B>(l + f));
  REQUIRE(w(1) == -2.5);
  tensor<double, B> acc = meld::zeros<double, B>({2});
  acc += f;
  acc += l;
  REQUIRE(test::host(acc)(0) == static_cast<double>(0.1f) + static_cast<double>(hl(0)));
  // Narrowing takes a cast: truncation toward zero (saturating, NaN to 0).
  const tensor<i32> n = test::host(tensor<i32, B>(meld::cast<i32>(f * 10.f - 2.f)));
  REQUIRE(n(0) == -1);
  REQUIRE(n(1) == 3);
  const tensor<float> back = test::host(tensor<float, B>(meld::cast<float>(l * 2.0)));
  REQUIRE(back(1) == -6.f);
}
