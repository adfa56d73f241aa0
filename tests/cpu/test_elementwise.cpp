// Every elementwise operation against a naive loop, on several shapes, on contiguous tensors and
// on strided views, for each element type; on every backend.
#include <cmath>
#include <tuple>
#include <vector>

#include "../backends.hpp"

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

// The operands on backend B (a, b) and their host copies (ha, hb) for the references.
template <class T, class B>
void check_arithmetic(const shape_t& s, std::uint32_t seed) {
  const auto ha = test::random_tensor<T>(s, seed);
  const auto hb = test::random_tensor<T>(s, seed + 1, 0.5, 3);  // nonzero divisors for floats
  const auto a = test::on<B>(ha), b = test::on<B>(hb);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  tensor<T, B> r;
  r = a + b;
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) + at(hb, i); }, tol);
  r = a - b;
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) - at(hb, i); }, tol);
  r = a * b;
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) * at(hb, i); }, tol);
  r = -a;
  check_elements(
      r, [&](const index_list& i) { return -at(ha, i); }, tol);
  r = meld::maximum(a, b);
  check_elements(
      r, [&](const index_list& i) { return std::max(at(ha, i), at(hb, i)); }, tol);
  r = meld::minimum(a, b);
  check_elements(
      r, [&](const index_list& i) { return std::min(at(ha, i), at(hb, i)); }, tol);
  r = meld::abs(a);
  check_elements(
      r, [&](const index_list& i) { return std::abs(at(ha, i)); }, tol);
  r = meld::relu(a);
  check_elements(
      r, [&](const index_list& i) { return std::max(at(ha, i), T(0)); }, tol);
  r = meld::where(a > b, a, b * T(2));
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) > at(hb, i) ? at(ha, i) : at(hb, i) * T(2); },
      tol);
  r = T(3) * a + b * T(2) - T(1);
  check_elements(
      r, [&](const index_list& i) { return T(3) * at(ha, i) + at(hb, i) * T(2) - T(1); }, tol);
  if constexpr (std::is_floating_point_v<T>) {
    r = a / b;
    check_elements(
        r, [&](const index_list& i) { return at(ha, i) / at(hb, i); }, tol);
  } else {
    r = a / b;  // integer division truncates
    check_elements(
        r, [&](const index_list& i) { return at(hb, i) == 0 ? 0 : at(ha, i) / at(hb, i); }, 0);
  }
}

template <class T, class B>
void check_math(const shape_t& s, std::uint32_t seed) {
  const auto ha = test::random_tensor<T>(s, seed, -3, 3);
  const auto hp = test::random_tensor<T>(s, seed + 7, 0.1, 4);  // positive
  const auto a = test::on<B>(ha), p = test::on<B>(hp);
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  tensor<T, B> r;
  r = meld::exp(a);
  check_elements(
      r, [&](const index_list& i) { return std::exp(double(at(ha, i))); }, tol);
  r = meld::log(p);
  check_elements(
      r, [&](const index_list& i) { return std::log(double(at(hp, i))); }, tol);
  r = meld::sqrt(p);
  check_elements(
      r, [&](const index_list& i) { return std::sqrt(double(at(hp, i))); }, tol);
  r = meld::tanh(a);
  check_elements(
      r, [&](const index_list& i) { return std::tanh(double(at(ha, i))); }, tol);
  r = meld::sigmoid(a);
  check_elements(
      r, [&](const index_list& i) { return sigmoid_ref(double(at(ha, i))); }, tol);
  r = meld::sin(a) + meld::cos(a);
  check_elements(
      r,
      [&](const index_list& i) {
        return std::sin(double(at(ha, i))) + std::cos(double(at(ha, i)));
      },
      tol * 4);
  r = meld::pow(p, a);
  check_elements(
      r, [&](const index_list& i) { return std::pow(double(at(hp, i)), double(at(ha, i))); },
      tol * 8);
  r = meld::square(a);
  check_elements(
      r, [&](const index_list& i) { return double(at(ha, i)) * at(ha, i); }, tol);
}

}  // namespace

SYNC_BACKEND_TEST_CASE("arithmetic, comparisons and selection on every element type",
                       "[elementwise]") {
  std::uint32_t seed = 1;
  for (const shape_t& s : shapes) {
    INFO("shape " << s);
    check_arithmetic<float, B>(s, seed++);
    check_arithmetic<double, B>(s, seed++);
    check_arithmetic<std::int32_t, B>(s, seed++);
    check_arithmetic<std::int64_t, B>(s, seed++);
  }
}

SYNC_BACKEND_TEST_CASE("math functions use accurate vectorized implementations", "[elementwise]") {
  std::uint32_t seed = 100;
  for (const shape_t& s : shapes) {
    INFO("shape " << s);
    check_math<float, B>(s, seed++);
    check_math<double, B>(s, seed++);
  }
}

SYNC_BACKEND_TEST_CASE("comparisons give 1 and 0; logic combines them", "[elementwise]") {
  const auto ha = test::random_tensor<float>({101}, 5);
  const auto hb = test::random_tensor<float>({101}, 6);
  const auto a = test::on<B>(ha), b = test::on<B>(hb);
  tensor<float, B> r;
  r = a < b;
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) < at(hb, i); }, 0);
  r = a <= b;
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) <= at(hb, i); }, 0);
  r = a >= 0.5f;
  check_elements(
      r, [&](const index_list& i) { return at(ha, i) >= 0.5f; }, 0);
  r = a == a;
  REQUIRE(test::value(meld::sum(r)) == 101.f);
  r = a != a;
  REQUIRE(test::value(meld::sum(r)) == 0.f);
  tensor<std::int32_t, B> m =
      meld::logical_and(a > 0.f, !(b > 0.f)) + meld::logical_or(a > 1.f, b > 1.f);
  check_elements(
      m,
      [&](const index_list& i) {
        return int(at(ha, i) > 0 && !(at(hb, i) > 0)) + int(at(ha, i) > 1 || at(hb, i) > 1);
      },
      0);
  REQUIRE(test::value(meld::sum(a > b)) == test::value(meld::sum(meld::cast<std::int64_t>(a > b))));
}

BACKEND_TEST_CASE("scalars mix with tensors as numpy's weak scalars", "[elementwise]") {
  const auto f = meld::arange<float, B>(4.f);
  const auto i = meld::arange<std::int32_t, B>(4);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(f * 2.0)>, float>);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(i * 2)>, std::int32_t>);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(i * 0.5)>, double>);
  STATIC_REQUIRE(std::is_same_v<meld::value_t<decltype(i + f)>, float>);
  const auto half = test::host(tensor<double, B>(i * 0.5));
  REQUIRE(half(3) == 1.5);
  const auto w = test::host(tensor<float, B>(meld::where(f > 1.5f, 1, -1)));
  REQUIRE(w(0) == -1.f);
  REQUIRE(w(3) == 1.f);
  const auto clipped = test::host(tensor<float, B>(meld::where(f > 2.f, 2.f, f)));
  REQUIRE(clipped(3) == 2.f);
  REQUIRE(clipped(1) == 1.f);
}

SYNC_BACKEND_TEST_CASE("integer operations never trap", "[elementwise]") {
  tensor<std::int32_t> ha({4});
  ha(0) = 7, ha(1) = -7, ha(2) = std::numeric_limits<std::int32_t>::min(), ha(3) = 5;
  tensor<std::int32_t> hb({4});
  hb(0) = 2, hb(1) = 0, hb(2) = -1, hb(3) = 0;
  const auto a = test::on<B>(ha), b = test::on<B>(hb);
  const auto q = test::host(tensor<std::int32_t, B>(a / b));
  REQUIRE(q(0) == 3);
  REQUIRE(q(1) == 0);
  REQUIRE(q(2) == std::numeric_limits<std::int32_t>::min());
  REQUIRE(q(3) == 0);
  const auto p = test::host(tensor<std::int32_t, B>(meld::pow(a, 2)));
  REQUIRE(p(0) == 49);
  const auto big = test::host(
      tensor<std::int64_t, B>(meld::pow(meld::full<std::int64_t, B>({1}, 3), std::int64_t(39))));
  REQUIRE(big(0) == 4052555153018976267LL);
  const auto neg = test::host(tensor<std::int32_t, B>(meld::pow(a, -1)));
  REQUIRE(neg(0) == 0);
}

SYNC_BACKEND_TEST_CASE("float to integer casts saturate; NaN gives 0", "[elementwise]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double in[] = {std::numeric_limits<double>::quiet_NaN(),
                       inf,
                       -inf,
                       1e20,
                       -1e20,
                       2.7,
                       -2.7,
                       2147483647.0,
                       2147483648.0,
                       -2147483648.0,
                       -2147483649.0,
                       255.9,
                       -0.9,
                       9.3e18,
                       -9.3e18};
  constexpr std::int64_t i32max = 2147483647, i32min = -2147483648LL;
  constexpr std::int64_t i64max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t i64min = std::numeric_limits<std::int64_t>::min();
  const std::int64_t want32[] = {0,      i32max, i32min, i32max, i32min, 2,      -2,    i32max,
                                 i32max, i32min, i32min, 255,    0,      i32max, i32min};
  const std::int64_t want64[] = {0,  i64max,     i64min,       i64max,        i64min,        2,
                                 -2, 2147483647, 2147483648LL, -2147483648LL, -2147483649LL, 255,
                                 0,  i64max,     i64min};
  constexpr index_t n = 15;
  tensor<double> hd({n});
  tensor<float> hf({n});
  for (index_t i = 0; i < n; ++i) hd(i) = in[i], hf(i) = static_cast<float>(in[i]);
  const auto d = test::on<B>(hd);
  const auto f = test::on<B>(hf);
  const auto c32 = test::host(tensor<std::int32_t, B>(meld::cast<std::int32_t>(d)));
  const auto c64 = test::host(tensor<std::int64_t, B>(meld::cast<std::int64_t>(d)));
  const auto f32 = test::host(tensor<std::int32_t, B>(meld::cast<std::int32_t>(f)));
  for (index_t i = 0; i < n; ++i) {
    INFO("input " << in[i]);
    REQUIRE(c32(i) == want32[i]);
    REQUIRE(c64(i) == want64[i]);
    // From float: the same, where the float holds the same value (2147483647 rounds to 2^31).
    if (static_cast<double>(hf(i)) == in[i] || std::isnan(in[i])) REQUIRE(f32(i) == want32[i]);
  }
}

SYNC_BACKEND_TEST_CASE("NaN propagates through maximum, minimum and relu", "[elementwise]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  tensor<float> ha({40}), hb({40});
  ha = 1.f;
  hb = 2.f;
  ha(3) = nan;
  hb(17) = nan;
  const auto a = test::on<B>(ha), b = test::on<B>(hb);
  const auto mx = test::host(tensor<float, B>(meld::maximum(a, b)));
  const auto mn = test::host(tensor<float, B>(meld::minimum(a, b)));
  const auto r = test::host(tensor<float, B>(meld::relu(a)));
  REQUIRE(std::isnan(mx(3)));
  REQUIRE(std::isnan(mx(17)));
  REQUIRE(std::isnan(mn(3)));
  REQUIRE(std::isnan(mn(17)));
  REQUIRE(std::isnan(r(3)));
  REQUIRE(mx(0) == 2.f);
  REQUIRE(mn(0) == 1.f);
}

SYNC_BACKEND_TEST_CASE("casts convert each element", "[elementwise]") {
  const auto hx = test::random_tensor<double>({3, 50}, 9, -100, 100);
  const auto x = test::on<B>(hx);
  tensor<std::int32_t, B> i = meld::cast<std::int32_t>(x);
  check_elements(
      i, [&](const index_list& k) { return static_cast<std::int32_t>(at(hx, k)); }, 0);
  tensor<float, B> f = meld::cast<float>(i) * 0.5f;
  check_elements(
      f,
      [&](const index_list& k) {
        return static_cast<float>(static_cast<std::int32_t>(at(hx, k))) * 0.5f;
      },
      0);
}

BACKEND_TEST_CASE("operands may be strided, reversed and broadcast views", "[elementwise]") {
  const auto hbase = test::random_tensor<float>({9, 17}, 21);
  const auto hother = test::random_tensor<float>({17, 9}, 22);
  auto base = test::on<B>(hbase);
  const auto other = test::on<B>(hother);
  auto v1 = base.slice(range(1, 9, 2), range(16, 0, -3));  // {4, 6}, negative inner stride
  auto v2 = other.transpose().slice(range(0, 8, 2), range(0, 6));
  const auto hv1 = hbase.slice(range(1, 9, 2), range(16, 0, -3));
  const auto hv2 = hother.transpose().slice(range(0, 8, 2), range(0, 6));
  tensor<float, B> r = v1 * 2.f + meld::exp(v2);
  REQUIRE(r.shape() == shape_t{4, 6});
  check_elements(r, [&](const index_list& i) { return at(hv1, i) * 2.f + std::exp(at(hv2, i)); });

  // Writing into a strided view leaves the other elements alone.
  base.slice(range(0, 9, 3), range(1, 17, 4)) = 0.f;
  const auto after = test::host(base);
  test::for_each_index(after.shape(), [&](const index_list& i) {
    const bool hit = i[0] % 3 == 0 && i[1] % 4 == 1;
    REQUIRE(at(after, i) == (hit ? 0.f : at(hbase, i)));
  });

  // A column vector broadcast along rows: stride 0 in the inner loop.
  const auto hcol = test::random_tensor<float>({9, 1}, 23);
  tensor<float, B> c = base + test::on<B>(hcol);
  check_elements(c, [&](const index_list& i) { return at(after, i) + at(hcol, i); });
}

namespace {
// An expression over a local tensor, returned past the local's lifetime.
template <class B>
auto scaled_plus_one(const tensor<float, B>& a) {
  tensor<float, B> local = a * 2.f;
  return local + 1.f;
}
}  // namespace

BACKEND_TEST_CASE("expressions are lazy and never dangle", "[elementwise]") {
  auto x = meld::arange<float, B>(5.f);
  auto e = x * 2.f + meld::arange<float, B>(5.f);  // owns the temporary it was given
  x.slice(range(0, 1)) = 100.f;                    // read at evaluation time
  const auto y = test::host(tensor<float, B>(e));
  REQUIRE(y(0) == 200.f);
  REQUIRE(y(4) == 12.f);
  STATIC_REQUIRE(std::is_same_v<meld::backend_t<decltype(e)>, B>);

  // An expression keeps the elements of the tensors it names alive (under ASan, a read of the
  // destroyed local would fail here).
  const auto r = test::host(tensor<float, B>(scaled_plus_one(meld::arange<float, B>(5.f))));
  for (int i = 0; i < 5; ++i) REQUIRE(r(i) == 2.f * float(i) + 1.f);
  // A tensor moved away or reassigned to another shape: the expression reads the elements it
  // was built over.
  auto z = meld::arange<float, B>(3.f);
  auto ez = z + 1.f;
  tensor<float, B> moved = std::move(z);
  z = meld::arange<float, B>(7.f);
  moved.slice(range(2, 3)) = 10.f;
  const auto w = test::host(tensor<float, B>(ez));
  REQUIRE(w.shape() == shape_t{3});
  REQUIRE(w(0) == 1.f);
  REQUIRE(w(2) == 11.f);
}

BACKEND_TEST_CASE("shape errors name the operation and both shapes", "[elementwise]") {
  tensor<float, B> a({3, 4}), b({5}), c({2, 3});
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
  REQUIRE(test::value(meld::sum(a)) == 12.f);
}

// assign_each against the same assignments one after another, computed on the host element by
// element: sizes below a block, across blocks (2048 elements) and threads, with an expression that
// reads a destination written before it and one that reads a destination written after it.
BACKEND_TEST_CASE("assign_each gives what one assignment after another gives", "[elementwise]") {
  for (index_t n : {index_t(1), index_t(37), index_t(2049), index_t(300001)}) {
    INFO("n " << n);
    const auto hx = test::random_tensor<float>({n}, 1), hy = test::random_tensor<float>({n}, 2),
               hc = test::random_tensor<float>({n}, 3);
    const auto x = test::on<B>(hx), y = test::on<B>(hy);
    tensor<float, B> a = test::on<B>(hc), b({n}), c({n});
    // a reads itself; b reads a as just written and c before it is written (its zeros); c reads
    // b as written.
    meld::assign_each(std::tie(a, b, c), a * x + y, a * 2.f + c, exp(y) - b);
    const auto ha = test::host(a), hb = test::host(b), hcc = test::host(c);
    for (index_t i = 0; i < n; ++i) {
      const float wa = hc(i) * hx(i) + hy(i);
      const float wb = wa * 2.f + 0.f;
      const float wc = std::exp(hy(i)) - wb;
      // Absolute margins too: a * x + y cancels near 0, where a backend's fused multiply-add and
      // the host's separate rounding differ in relative terms.
      REQUIRE(ha(i) == Approx(wa).epsilon(1e-6).margin(1e-6));
      REQUIRE(hb(i) == Approx(wb).epsilon(1e-6).margin(2e-6));
      REQUIRE(hcc(i) == Approx(wc).epsilon(1e-5).margin(1e-5));
    }
    // One destination written twice: the second expression reads what the first wrote.
    tensor<float, B> d = test::on<B>(hc);
    meld::assign_each(std::tie(d, d), d + x, d * 2.f);
    const auto hd = test::host(d);
    for (index_t i = 0; i < n; ++i) REQUIRE(hd(i) == (hc(i) + hx(i)) * 2.f);
  }
}

BACKEND_TEST_CASE("assign_each: strided, broadcast and overlapping destinations", "[elementwise]") {
  const auto hm = test::random_tensor<float>({40, 30}, 4), hv = test::random_tensor<float>({30}, 5);
  const auto m = test::on<B>(hm), v = test::on<B>(hv);
  tensor<float, B> t({40, 30}), u({30, 40}), s({40});
  // A transposed operand, a broadcast one, a scalar: not one contiguous shape, so one assignment
  // after another.
  meld::assign_each(std::tie(t, u, s), m + v, m.transpose() * 2.f, 3.f);
  const auto ht = test::host(t), hu = test::host(u), hs = test::host(s);
  for (index_t i = 0; i < 40; ++i) {
    REQUIRE(hs(i) == 3.f);
    for (index_t j = 0; j < 30; ++j) {
      REQUIRE(ht(i, j) == hm(i, j) + hv(j));
      REQUIRE(hu(j, i) == hm(i, j) * 2.f);
    }
  }
  // Destinations that overlap other than element for element: shifted views of one tensor, the
  // second reading what the first wrote one element over.
  tensor<float, B> w = meld::arange<float, B>(10.f);
  auto lo = w.slice(range(0, 9)), hi = w.slice(range(1, 10));
  meld::assign_each(std::tie(lo, hi), hi + 100.f, lo * 1.f);
  const auto hw = test::host(w);
  // The two assignments one after another, on the host.
  std::vector<float> ref(10);
  for (int i = 0; i < 10; ++i) ref[std::size_t(i)] = float(i);
  std::vector<float> first(9);
  for (int i = 0; i < 9; ++i) first[std::size_t(i)] = ref[std::size_t(i + 1)] + 100.f;
  for (int i = 0; i < 9; ++i) ref[std::size_t(i)] = first[std::size_t(i)];
  std::vector<float> second(9);
  for (int i = 0; i < 9; ++i) second[std::size_t(i)] = ref[std::size_t(i)];
  for (int i = 0; i < 9; ++i) ref[std::size_t(i + 1)] = second[std::size_t(i)];
  for (int i = 0; i < 10; ++i) REQUIRE(hw(i) == ref[std::size_t(i)]);
  // Shapes are checked before anything is written.
  tensor<float, B> p({4}), q({5});
  p = 1.f;
  REQUIRE_THROWS_WITH(meld::assign_each(std::tie(p, q), p + 1.f, p),
                      "assign_each: an expression of shape {4} cannot be assigned to a tensor of "
                      "shape {5}");
  REQUIRE(test::value(meld::sum(p)) == 4.f);
}
