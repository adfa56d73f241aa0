// Reductions over all elements and along axes, against naive loops; accuracy of float sums; on
// every backend (the references are computed from host copies of the operands).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
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

template <class T, class X>
double naive_sum(const X& x) {
  double s = 0;
  test::for_each_index(x.shape(), [&](const index_list& i) { s += at(x, i); });
  return s;
}

// Naive reduction along an axis: f(accumulator, value) over the axis, per output element.
template <class X, class F>
tensor<double> naive_axis(const X& x, int axis, double init, F f) {
  shape_t out = x.shape();
  out.erase(axis);
  tensor<double> r(out);
  test::for_each_index(out, [&](const index_list& o) {
    index_list full = o;
    full.insert(full.begin() + axis, 0);
    double acc = init;
    for (index_t k = 0; k < x.shape()[axis]; ++k) {
      full[axis] = k;
      acc = f(acc, double(at(x, full)));
    }
    index_t off = 0;
    for (int d = 0; d < out.size(); ++d) off += o[d] * r.strides()[d];
    r.data()[off] = acc;
  });
  return r;
}

// The type of a reduction to a scalar of T on backend B: T, or a meld::future of it under async.
template <class B, class T>
using scalar_t = std::conditional_t<test::is_async<B>, meld::future<T>, T>;

}  // namespace

BACKEND_TEST_CASE("reductions over all elements", "[reduce]") {
  for (const shape_t& s :
       {shape_t{1}, shape_t{7}, shape_t{1000}, shape_t{3, 333}, shape_t{4, 5, 6}, shape_t{70001}}) {
    INFO("shape " << s);
    const auto hx = test::random_tensor<double>(s, 11, -1, 1);
    const auto hy = test::random_tensor<double>(s, 12, 0.5, 1.5);
    const auto x = test::on<B>(hx), y = test::on<B>(hy);
    const double n = double(hx.size());
    REQUIRE(test::value(meld::sum(x)) == Approx(naive_sum<double>(hx)).margin(1e-12));
    REQUIRE(test::value(meld::mean(x)) == Approx(naive_sum<double>(hx) / n).margin(1e-12));
    REQUIRE(test::value(meld::sum(x * y + 1.0)) ==
            Approx(naive_sum<double>(tensor<double>(hx * hy + 1.0))).margin(1e-9));
    REQUIRE(test::value(meld::dot(x, y)) ==
            Approx(naive_sum<double>(tensor<double>(hx * hy))).margin(1e-9));
    double mx = -1e300, mn = 1e300, pr = 1;
    index_t amax = 0, amin = 0, k = 0;
    test::for_each_index(s, [&](const index_list& i) {
      const double v = at(hx, i);
      if (v > mx) mx = v, amax = k;
      if (v < mn) mn = v, amin = k;
      pr *= at(hy, i);
      ++k;
    });
    REQUIRE(test::value(meld::max(x)) == mx);
    REQUIRE(test::value(meld::min(x)) == mn);
    REQUIRE(test::value(meld::argmax(x)) == amax);
    REQUIRE(test::value(meld::argmin(x)) == amin);
    if (s.product() <= 1000)
      REQUIRE(test::value(meld::prod(y)) == Approx(pr).epsilon(1e-10));  // no underflow
  }
}

BACKEND_TEST_CASE("reductions of strided views and integer types", "[reduce]") {
  const auto hbase = test::random_tensor<float>({50, 40}, 3);
  const auto base = test::on<B>(hbase);
  auto v = base.transpose().slice(range(1, 40, 3), range(49, 0, -2));
  const auto hv = hbase.transpose().slice(range(1, 40, 3), range(49, 0, -2));
  REQUIRE(test::value(meld::sum(v)) ==
          Approx(naive_sum<float>(hv)).margin(1e-4));  // ~325 terms of |x| < 2
  REQUIRE(test::value(meld::max(meld::abs(v))) ==
          test::value(meld::max(meld::abs(tensor<float, B>(v)))));
  auto i = meld::arange<std::int32_t, B>(1, 101);
  REQUIRE(test::value(meld::sum(i)) == 5050);
  REQUIRE(std::is_same_v<decltype(meld::sum(i)), scalar_t<B, std::int64_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(meld::mean(i)), scalar_t<B, double>>);
  REQUIRE(test::value(meld::mean(i)) == 50.5);
  REQUIRE(test::value(meld::sum(i > 50)) == 50);
  REQUIRE(test::value(meld::argmax(i)) == 99);
  REQUIRE(test::value(meld::prod(meld::arange<std::int64_t, B>(1, 11))) == 3628800);
}

// Views that start between vector boundaries, operands of two element types, broadcasting: the
// paths a backend picks between (vector loads, one element at a time, strided addressing).
BACKEND_TEST_CASE("reductions of unaligned, mixed and broadcast operands", "[reduce]") {
  for (const index_t n : {index_t(1), index_t(2), index_t(5), index_t(4099), index_t(100003)}) {
    INFO("n " << n);
    const auto hx = test::random_tensor<float>({n + 1}, 21, -1, 1);
    const auto hy = test::random_tensor<double>({n + 1}, 22, -1, 1);
    const auto x = test::on<B>(hx);
    const auto y = test::on<B>(hy);
    const auto hxs = hx.slice(range(1, n + 1));
    const auto xs = x.slice(range(1, n + 1));
    const auto hys = hy.slice(range(0, n));
    const auto ys = y.slice(range(0, n));
    REQUIRE(test::value(meld::sum(xs)) == Approx(naive_sum<double>(hxs)).margin(1e-3));
    REQUIRE(test::value(meld::sum(xs * ys)) ==
            Approx(naive_sum<double>(tensor<double>(hxs * hys))).margin(1e-9));
    double mx = -2;
    test::for_each_index(hxs.shape(),
                         [&](const index_list& i) { mx = std::max(mx, double(at(hxs, i))); });
    REQUIRE(test::value(meld::max(xs)) == float(mx));
    REQUIRE(test::value(meld::sum(xs > 0.f)) == naive_sum<double>(tensor<std::int64_t>(hxs > 0.f)));
  }
  const auto hm = test::random_tensor<double>({3, 1, 7}, 23, -1, 1);
  const auto hv = test::random_tensor<double>({5, 1}, 24, -1, 1);
  const auto m = test::on<B>(hm);
  const auto v = test::on<B>(hv);
  REQUIRE(test::value(meld::sum(m * v - 2.0)) ==
          Approx(naive_sum<double>(tensor<double>(hm * hv - 2.0))).margin(1e-9));
  REQUIRE(test::value(meld::min(m * v)) == test::value(meld::min(tensor<double, B>(m * v))));
}

BACKEND_TEST_CASE("int32 sums, products and dots accumulate in int64, as numpy's", "[reduce]") {
  using i32 = std::int32_t;
  using i64 = std::int64_t;
  // 1000 x 2^30 wraps to 0 in int32.
  const auto big = meld::full<i32, B>({1000}, 1 << 30);
  REQUIRE(std::is_same_v<decltype(meld::sum(big)), scalar_t<B, i64>>);
  REQUIRE(std::is_same_v<decltype(meld::prod(big)), scalar_t<B, i64>>);
  REQUIRE(std::is_same_v<decltype(meld::dot(big, big)), scalar_t<B, i64>>);
  REQUIRE(std::is_same_v<meld::value_t<decltype(meld::sum(big, 0))>, i64>);
  REQUIRE(std::is_same_v<meld::value_t<decltype(meld::prod(big, 0))>, i64>);
  REQUIRE(test::value(meld::sum(big)) == 1000 * (i64(1) << 30));
  REQUIRE(test::value(meld::mean(big)) == double(1 << 30));

  // Large values of both signs, against sums in int64 on the host; along the contiguous axis
  // and along the strided one (one output at a time, and output-major).
  const auto hr = test::random_tensor<i32>({37, 129}, 21, -2.1e9, 2.1e9);
  const auto r = test::on<B>(hr);
  i64 total = 0;
  std::vector<i64> rows(37, 0), cols(129, 0);
  for (index_t a = 0; a < 37; ++a)
    for (index_t b = 0; b < 129; ++b) {
      total += hr(a, b);
      rows[a] += hr(a, b);
      cols[b] += hr(a, b);
    }
  REQUIRE(test::value(meld::sum(r)) == total);
  REQUIRE(test::value(meld::sum(r.transpose())) == total);
  const auto row_sums = test::host(tensor<i64, B>(meld::sum(r, 1)));
  for (index_t a = 0; a < 37; ++a) REQUIRE(row_sums(a) == rows[a]);
  const auto col_sums = test::host(tensor<i64, B>(meld::sum(r, 0)));
  for (index_t b = 0; b < 129; ++b) REQUIRE(col_sums(b) == cols[b]);
  const auto col_sums_t = test::host(tensor<i64, B>(meld::sum(r.transpose(), 1, true)));
  REQUIRE(col_sums_t.shape() == shape_t{129, 1});
  for (index_t b = 0; b < 129; ++b) REQUIRE(col_sums_t(b, 0) == cols[b]);

  // Products: (2^20)^3 = 2^60; dots: 1000 products of 2^40, each already past int32.
  REQUIRE(test::value(meld::prod(meld::full<i32, B>({3}, 1 << 20))) == i64(1) << 60);
  const auto prods =
      test::host(tensor<i64, B>(meld::prod(meld::full<i32, B>({4, 3}, -(1 << 20)), 1)));
  for (index_t a = 0; a < 4; ++a) REQUIRE(prods(a) == -(i64(1) << 60));
  const auto d = meld::full<i32, B>({1000}, 1 << 20);
  REQUIRE(test::value(meld::dot(d, d)) == 1000 * (i64(1) << 40));
  const auto hs = test::random_tensor<i32>({2, 129}, 22, -3e6, 3e6);  // products past int32
  i64 inner = 0;
  for (index_t b = 0; b < 129; ++b) inner += i64(hs(0, b)) * hs(1, b);
  const auto sd = test::on<B>(hs);
  REQUIRE(test::value(meld::dot(sd.slice(0), sd.slice(1))) == inner);

  // int64 sums wrap modulo 2^64 as numpy's do, without undefined behaviour: 4 x 2^62 is 0.
  REQUIRE(test::value(meld::sum(meld::full<i64, B>({4}, i64(1) << 62))) == 0);
  REQUIRE(test::value(meld::sum(meld::full<i64, B>({3}, i64(1) << 62))) ==
          std::numeric_limits<i64>::min() + (i64(1) << 62));
  REQUIRE(test::value(meld::prod(meld::full<i64, B>({2}, i64(1) << 32))) == 0);
}

BACKEND_TEST_CASE("empty and NaN reductions", "[reduce]") {
  tensor<float, B> e({0, 3});
  REQUIRE(test::value(meld::sum(e)) == 0.f);
  REQUIRE(test::value(meld::prod(e)) == 1.f);
  REQUIRE(std::isnan(test::value(meld::mean(e))));
  REQUIRE_THROWS_WITH(
      test::value(meld::max(e)),
      "max: the expression of shape {0, 3} is empty, and an empty max has no value");
  REQUIRE_THROWS_AS(test::value(meld::argmin(e)), meld::shape_error);
  tensor<float> hx = meld::arange<float>(10.f);
  hx(4) = std::numeric_limits<float>::quiet_NaN();
  const auto x = test::on<B>(hx);
  REQUIRE(std::isnan(test::value(meld::max(x))));
  REQUIRE(std::isnan(test::value(meld::min(x))));
  REQUIRE(test::value(meld::argmax(x)) == 4);
  REQUIRE(std::isnan(test::value(meld::sum(x))));
}

BACKEND_TEST_CASE("reductions along an axis", "[reduce]") {
  std::mt19937 gen(99);
  for (int trial = 0; trial < 40; ++trial) {
    const shape_t s = test::random_shape(gen, 1, 4, 7);
    const auto hx = test::random_tensor<double>(s, trial + 500);
    const auto x = test::on<B>(hx);
    for (int axis = 0; axis < s.size(); ++axis) {
      INFO("shape " << s << " axis " << axis);
      const double n = double(s[axis]);
      auto ref_sum = naive_axis(hx, axis, 0.0, [](double a, double v) { return a + v; });
      auto ref_max =
          naive_axis(hx, axis, -1e300, [](double a, double v) { return std::max(a, v); });
      auto ref_min = naive_axis(hx, axis, 1e300, [](double a, double v) { return std::min(a, v); });
      auto ref_prod = naive_axis(hx, axis, 1.0, [](double a, double v) { return a * v; });
      tensor<double, B> r = meld::sum(x, axis);
      check_elements(
          r, [&](const index_list& i) { return at(ref_sum, i); }, 1e-12);
      r = meld::mean(x, axis);
      check_elements(
          r, [&](const index_list& i) { return at(ref_sum, i) / n; }, 1e-12);
      r = meld::max(x, axis);
      check_elements(
          r, [&](const index_list& i) { return at(ref_max, i); }, 0);
      r = meld::min(x, axis - s.size());  // negative axis
      check_elements(
          r, [&](const index_list& i) { return at(ref_min, i); }, 0);
      r = meld::prod(x, axis);
      check_elements(
          r, [&](const index_list& i) { return at(ref_prod, i); }, 1e-12);
      tensor<std::int64_t, B> am = meld::argmax(x, axis);
      check_elements(
          am,
          [&](const index_list& o) {
            index_list full = o;
            full.insert(full.begin() + axis, 0);
            index_t best = 0;
            for (index_t k = 1; k < s[axis]; ++k) {
              full[axis] = k;
              const double v = at(hx, full);
              full[axis] = best;
              if (v > at(hx, full)) best = k;
            }
            return best;
          },
          0);
      tensor<double, B> kept = meld::sum(x, axis, /*keepdims=*/true);
      REQUIRE(kept.rank() == s.size());
      REQUIRE(kept.shape()[axis] == 1);
    }
  }
}

BACKEND_TEST_CASE("axis reductions compose with elementwise expressions", "[reduce]") {
  const auto hx = test::random_tensor<float>({6, 10}, 8, -5, 5);
  const auto x = test::on<B>(hx);
  // A numerically stable softmax along the last axis.
  tensor<float, B> shifted = x - meld::max(x, -1, true);
  tensor<float, B> p = meld::exp(shifted) / meld::sum(meld::exp(shifted), -1, true);
  const auto hp = test::host(p);
  for (index_t r = 0; r < 6; ++r) {
    double mx = -1e30, z = 0;
    for (index_t c = 0; c < 10; ++c) mx = std::max(mx, double(hx(r, c)));
    for (index_t c = 0; c < 10; ++c) z += std::exp(double(hx(r, c)) - mx);
    for (index_t c = 0; c < 10; ++c)
      REQUIRE(hp(r, c) == Approx(std::exp(double(hx(r, c)) - mx) / z).epsilon(1e-5));
  }
  tensor<float, B> colsum = meld::sum(x * 2.f, 0) + 1.f;  // a sum of an expression, then more work
  REQUIRE(colsum.shape() == shape_t{10});
  REQUIRE(test::host(colsum)(3) ==
          Approx(2 * naive_sum<float>(hx.slice(meld::all, 3)) + 1).epsilon(1e-5));
  tensor<float, B> total = meld::sum(meld::sum(x, 0), 0);
  REQUIRE(total.rank() == 0);
  REQUIRE(test::host(total)() == Approx(naive_sum<float>(hx)).epsilon(1e-5));
  // A reduction whose operand is its own destination.
  tensor<float, B> sq(x);
  sq = meld::sum(sq, 1);
  REQUIRE(sq.shape() == shape_t{6});
  REQUIRE(test::host(sq)(2) == Approx(naive_sum<float>(hx.slice(2))).epsilon(1e-5));
}

BACKEND_TEST_CASE("axis reduction errors", "[reduce]") {
  tensor<float, B> x({2, 0});
  REQUIRE_THROWS_WITH(meld::sum(x, 2), "sum: axis 2 is out of range for a tensor of rank 2");
  REQUIRE_THROWS_WITH(meld::max(x, 1),
                      "max: axis 1 of shape {2, 0} is empty, and an empty max has no value");
  tensor<float, B> s = meld::sum(x, 1);
  REQUIRE(s.shape() == shape_t{2});
  REQUIRE(test::host(s)(1) == 0.f);
  tensor<float, B> m = meld::mean(x, 1);
  REQUIRE(std::isnan(test::host(m)(0)));
}

BACKEND_TEST_CASE("float sums are pairwise-accurate on 10^7 elements", "[reduce]") {
  // Error bound (README): |sum - exact| <= (B / (4 * lanes) + log2(lanes) + 3 + log2(n / B)) *
  // eps * sum(|x|) with B = max(256, 64 * lanes): about 37 * eps * sum(|x|) for 4 to 16 lanes.
  const index_t n = 10'000'000;
  const auto hx = meld::uniform<float>({n}, 0.f, 1.f, 77);
  const auto x = test::on<B>(hx);
  double exact = 0, naive = 0;
  float naive_f = 0;
  for (float v : hx) exact += v, naive_f += v;
  naive = naive_f;
  const double got = test::value(meld::sum(x));
  const double bound = 70 * std::numeric_limits<float>::epsilon() * exact;
  INFO("pairwise error " << std::abs(got - exact) << ", naive float loop error "
                         << std::abs(naive - exact) << ", bound " << bound);
  REQUIRE(std::abs(got - exact) <= bound);
  REQUIRE(std::abs(got - exact) * 100 < std::abs(naive - exact));
  // A mean of the same data, and a fused expression.
  REQUIRE(std::abs(double(test::value(meld::mean(x))) - exact / double(n)) <= bound / double(n));
  double exact2 = 0;
  for (float v : hx) exact2 += double(v * 2.f - 1.f);
  REQUIRE(std::abs(double(test::value(meld::sum(x * 2.f - 1.f))) - exact2) <=
          70 * 1.2e-7 * double(n));
}

// ---- host only ----------------------------------------------------------------------------------

// The horizontal step of a reduction (in registers where the target allows) combines the lanes in
// the documented tree order: bit for bit the scalar tree, NaNs included.
namespace {
template <class T>
void check_lane_tree() {
  using batch = xsimd::batch<T>;
  constexpr int lanes = static_cast<int>(batch::size);
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> dist(-1e3, 1e3);
  auto tree = [&](auto op, const T* in) {
    T l[lanes];
    for (int i = 0; i < lanes; ++i) l[i] = in[i];
    for (int w = lanes / 2; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) l[i] = op(l[i], l[i + w]);
    return l[0];
  };
  auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0 || (a != a && b != b); };
  for (int t = 0; t < 2000; ++t) {
    alignas(64) T in[lanes];
    for (T& v : in) v = static_cast<T>(dist(gen) * (t % 3 == 0 ? 1e-9 : 1.0));
    if (t % 5 == 0) in[t % lanes] = std::numeric_limits<T>::quiet_NaN();
    const batch b = batch::load_aligned(in);
    using namespace meld::detail::cpu_eval;
    REQUIRE(same(horizontal<meld::reducers::sum, T>(b), tree(meld::reducers::sum{}, in)));
    REQUIRE(same(horizontal<meld::reducers::max, T>(b), tree(meld::reducers::max{}, in)));
    REQUIRE(same(horizontal<meld::reducers::min, T>(b), tree(meld::reducers::min{}, in)));
    REQUIRE(same(horizontal<meld::reducers::prod, T>(b), tree(meld::reducers::prod{}, in)));
  }
}
}  // namespace

HOST_TEST_CASE("a batch's lanes combine in the fixed tree order", "[reduce]") {
  SECTION("float") {
    check_lane_tree<float>();
  }
  SECTION("double") {
    check_lane_tree<double>();
  }
}
