// Every elementwise operation against a naive loop, on several shapes, on contiguous tensors and
// on strided views, for each element type.
#include "../support.hpp"

using meld::index_t;
using meld::range;
using meld::shape_t;
using meld::tensor;
using test::at;
using test::check_elements;
using test::index_list;

namespace {

const shape_t shapes[] = {{},     {1},       {7},          {33}, {1000},
                          {3, 5}, {4, 1, 9}, {2, 3, 4, 5}, {0},  {2, 0, 3}};

double sigmoid_ref(double x) {
  return 1 / (1 + std::exp(-x));
}

template <class T>
void check_arithmetic(const shape_t& s, std::uint32_t seed) {
  auto a = test::random_tensor<T>(s, seed);
  auto b = test::random_tensor<T>(s, seed + 1, 0.5, 3);  // nonzero divisors for floats
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  tensor<T> r;
  r = a + b;
  check_elements(
      r, [&](const index_list& i) { return at(a, i) + at(b, i); }, tol);
  r = a - b;
  check_elements(
      r, [&](const index_list& i) { return at(a, i) - at(b, i); }, tol);
  r = a * b;
  check_elements(
      r, [&](const index_list& i) { return at(a, i) * at(b, i); }, tol);
  r = -a;
  check_elements(
      r, [&](const index_list& i) { return -at(a, i); }, tol);
  r = meld::maximum(a, b);
  check_elements(
      r, [&](const index_list& i) { return std::max(at(a, i), at(b, i)); }, tol);
  r = meld::minimum(a, b);
  check_elements(
      r, [&](const index_list& i) { return std::min(at(a, i), at(b, i)); }, tol);
  r = meld::abs(a);
  check_elements(
      r, [&](const index_list& i) { return std::abs(at(a, i)); }, tol);
  r = meld::relu(a);
  check_elements(
      r, [&](const index_list& i) { return std::max(at(a, i), T(0)); }, tol);
  r = meld::where(a > b, a, b * T(2));
  check_elements(
      r, [&](const index_list& i) { return at(a, i) > at(b, i) ? at(a, i) : at(b, i) * T(2); },
      tol);
  r = T(3) * a + b * T(2) - T(1);
  check_elements(
      r, [&](const index_list& i) { return T(3) * at(a, i) + at(b, i) * T(2) - T(1); }, tol);
  if constexpr (std::is_floating_point_v<T>) {
    r = a / b;
    check_elements(
        r, [&](const index_list& i) { return at(a, i) / at(b, i); }, tol);
  } else {
    r = a / b;  // integer division truncates
    check_elements(
        r, [&](const index_list& i) { return at(b, i) == 0 ? 0 : at(a, i) / at(b, i); }, 0);
  }
}

template <class T>
void check_math(const shape_t& s, std::uint32_t seed) {
  auto a = test::random_tensor<T>(s, seed, -3, 3);
  auto p = test::random_tensor<T>(s, seed + 7, 0.1, 4);  // positive
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  tensor<T> r;
  r = meld::exp(a);
  check_elements(
      r, [&](const index_list& i) { return std::exp(double(at(a, i))); }, tol);
  r = meld::log(p);
  check_elements(
      r, [&](const index_list& i) { return std::log(double(at(p, i))); }, tol);
  r = meld::sqrt(p);
  check_elements(
      r, [&](const index_list& i) { return std::sqrt(double(at(p, i))); }, tol);
  r = meld::tanh(a);
  check_elements(
      r, [&](const index_list& i) { return std::tanh(double(at(a, i))); }, tol);
  r = meld::sigmoid(a);
  check_elements(
      r, [&](const index_list& i) { return sigmoid_ref(double(at(a, i))); }, tol);
  r = meld::sin(a) + meld::cos(a);
  check_elements(
      r,
      [&](const index_list& i) { return std::sin(double(at(a, i))) + std::cos(double(at(a, i))); },
      tol * 4);
  r = meld::pow(p, a);
  check_elements(
      r, [&](const index_list& i) { return std::pow(double(at(p, i)), double(at(a, i))); },
      tol * 8);
  r = meld::square(a);
  check_elements(
      r, [&](const index_list& i) { return double(at(a, i)) * at(a, i); }, tol);
}

}  // namespace

TEST_CASE("arithmetic, comparisons and selection on every element type", "[cpu]") {
  std::uint32_t seed = 1;
  for (const shape_t& s : shapes) {
    INFO("shape " << s);
    check_arithmetic<float>(s, seed++);
    check_arithmetic<double>(s, seed++);
    check_arithmetic<std::int32_t>(s, seed++);
    check_arithmetic<std::int64_t>(s, seed++);
  }
}

TEST_CASE("math functions use accurate vectorized implementations", "[cpu]") {
  std::uint32_t seed = 100;
  for (const shape_t& s : shapes) {
    INFO("shape " << s);
    check_math<float>(s, seed++);
    check_math<double>(s, seed++);
  }
}

TEST_CASE("comparisons give 1 and 0; logic combines them", "[cpu]") {
  auto a = test::random_tensor<float>({101}, 5);
  auto b = test::random_tensor<float>({101}, 6);
  tensor<float> r;
  r = a < b;
  check_elements(
      r, [&](const index_list& i) { return at(a, i) < at(b, i); }, 0);
  r = a <= b;
  check_elements(
      r, [&](const index_list& i) { return at(a, i) <= at(b, i); }, 0);
  r = a >= 0.5f;
  check_elements(
      r, [&](const index_list& i) { return at(a, i) >= 0.5f; }, 0);
  r = a == a;
  REQUIRE(meld::sum(r) == 101.f);
  r = a != a;
  REQUIRE(meld::sum(r) == 0.f);
  tensor<std::int32_t> m =
      meld::logical_and(a > 0.f, !(b > 0.f)) + meld::logical_or(a > 1.f, b > 1.f);
  check_elements(
      m,
      [&](const index_list& i) {
        return int(at(a, i) > 0 && !(at(b, i) > 0)) + int(at(a, i) > 1 || at(b, i) > 1);
      },
      0);
  REQUIRE(meld::sum(a > b) == meld::sum(meld::cast<std::int64_t>(a > b)));
}

TEST_CASE("scalars mix with tensors as numpy's weak scalars", "[cpu]") {
  auto f = meld::arange<float>(4.f);
  auto i = meld::arange<std::int32_t>(4);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(f * 2.0)>, float>);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(i * 2)>, std::int32_t>);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(i * 0.5)>, double>);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(i + f)>, float>);
  tensor<double> half = i * 0.5;
  REQUIRE(half(3) == 1.5);
  tensor<float> w = meld::where(f > 1.5f, 1, -1);
  REQUIRE(w(0) == -1.f);
  REQUIRE(w(3) == 1.f);
  tensor<float> clipped = meld::where(f > 2.f, 2.f, f);
  REQUIRE(clipped(3) == 2.f);
  REQUIRE(clipped(1) == 1.f);
}

TEST_CASE("integer operations never trap", "[cpu]") {
  tensor<std::int32_t> a({4});
  a(0) = 7, a(1) = -7, a(2) = std::numeric_limits<std::int32_t>::min(), a(3) = 5;
  tensor<std::int32_t> b({4});
  b(0) = 2, b(1) = 0, b(2) = -1, b(3) = 0;
  tensor<std::int32_t> q = a / b;
  REQUIRE(q(0) == 3);
  REQUIRE(q(1) == 0);
  REQUIRE(q(2) == std::numeric_limits<std::int32_t>::min());
  REQUIRE(q(3) == 0);
  tensor<std::int32_t> p = meld::pow(a, 2);
  REQUIRE(p(0) == 49);
  tensor<std::int64_t> big = meld::pow(meld::full<std::int64_t>({1}, 3), std::int64_t(39));
  REQUIRE(big(0) == 4052555153018976267LL);
  tensor<std::int32_t> neg = meld::pow(a, -1);
  REQUIRE(neg(0) == 0);
}

TEST_CASE("NaN propagates through maximum, minimum and relu", "[cpu]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  tensor<float> a({40}), b({40});
  a = 1.f;
  b = 2.f;
  a(3) = nan;
  b(17) = nan;
  tensor<float> mx = meld::maximum(a, b), mn = meld::minimum(a, b), r = meld::relu(a);
  REQUIRE(std::isnan(mx(3)));
  REQUIRE(std::isnan(mx(17)));
  REQUIRE(std::isnan(mn(3)));
  REQUIRE(std::isnan(mn(17)));
  REQUIRE(std::isnan(r(3)));
  REQUIRE(mx(0) == 2.f);
  REQUIRE(mn(0) == 1.f);
}

TEST_CASE("casts convert each element", "[cpu]") {
  auto x = test::random_tensor<double>({3, 50}, 9, -100, 100);
  tensor<std::int32_t> i = meld::cast<std::int32_t>(x);
  check_elements(
      i, [&](const index_list& k) { return static_cast<std::int32_t>(at(x, k)); }, 0);
  tensor<float> f = meld::cast<float>(i) * 0.5f;
  check_elements(
      f,
      [&](const index_list& k) {
        return static_cast<float>(static_cast<std::int32_t>(at(x, k))) * 0.5f;
      },
      0);
}

TEST_CASE("operands may be strided, reversed and broadcast views", "[cpu]") {
  auto base = test::random_tensor<float>({9, 17}, 21);
  auto other = test::random_tensor<float>({17, 9}, 22);
  auto v1 = base.slice(range(1, 9, 2), range(16, 0, -3));  // {4, 6}, negative inner stride
  auto v2 = other.transpose().slice(range(0, 8, 2), range(0, 6));
  tensor<float> r = v1 * 2.f + meld::exp(v2);
  REQUIRE(r.shape() == shape_t{4, 6});
  check_elements(r, [&](const index_list& i) { return at(v1, i) * 2.f + std::exp(at(v2, i)); });

  // Writing into a strided view leaves the other elements alone.
  tensor<float> before(base);
  base.slice(range(0, 9, 3), range(1, 17, 4)) = 0.f;
  test::for_each_index(base.shape(), [&](const index_list& i) {
    const bool hit = i[0] % 3 == 0 && i[1] % 4 == 1;
    REQUIRE(at(base, i) == (hit ? 0.f : at(before, i)));
  });

  // A column vector broadcast along rows: stride 0 in the inner loop.
  auto col = test::random_tensor<float>({9, 1}, 23);
  tensor<float> c = base + col;
  check_elements(c, [&](const index_list& i) { return at(base, i) + at(col, i); });
}

TEST_CASE("expressions are lazy and never dangle", "[cpu]") {
  auto x = meld::arange<float>(5.f);
  auto e = x * 2.f + meld::arange<float>(5.f);  // owns the temporary it was given
  x(0) = 100.f;                                 // read at evaluation time
  tensor<float> y = e;
  REQUIRE(y(0) == 200.f);
  REQUIRE(y(4) == 12.f);
  STATIC_REQUIRE(std::is_same_v<meld::backend_t<decltype(e)>, meld::cpu<>>);
}

TEST_CASE("shape errors name the operation and both shapes", "[cpu]") {
  tensor<float> a({3, 4}), b({5}), c({2, 3});
  REQUIRE_THROWS_WITH(a + b,
                      "operator+: shapes {3, 4} and {5} cannot be broadcast (axis -1: 4 vs 5)");
  REQUIRE_THROWS_WITH(meld::where(a > 0.f, a, c),
                      "where: shapes {3, 4} and {2, 3} cannot be broadcast (axis -2: 3 vs 2)");
  REQUIRE_THROWS_WITH(
      a.slice(0) = c,
      "assignment: an expression of shape {2, 3} cannot be assigned to a tensor of shape {4}");
  // A failed assignment leaves the destination as it was.
  a = 1.f;
  REQUIRE_THROWS_AS(a.view() = a + b, meld::shape_error);
  REQUIRE(meld::sum(a) == 12.f);
}
