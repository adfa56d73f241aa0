// Reductions over all elements and along axes, against naive loops; accuracy of float sums.
#include <cstring>

#include "../support.hpp"

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

}  // namespace

TEST_CASE("reductions over all elements", "[cpu]") {
  for (const shape_t& s :
       {shape_t{1}, shape_t{7}, shape_t{1000}, shape_t{3, 333}, shape_t{4, 5, 6}, shape_t{70001}}) {
    INFO("shape " << s);
    auto x = test::random_tensor<double>(s, 11, -1, 1);
    auto y = test::random_tensor<double>(s, 12, 0.5, 1.5);
    const double n = double(x.size());
    REQUIRE(meld::sum(x) == Approx(naive_sum<double>(x)).margin(1e-12));
    REQUIRE(meld::mean(x) == Approx(naive_sum<double>(x) / n).margin(1e-12));
    REQUIRE(meld::sum(x * y + 1.0) ==
            Approx(naive_sum<double>(tensor<double>(x * y + 1.0))).margin(1e-9));
    REQUIRE(meld::dot(x, y) == Approx(naive_sum<double>(tensor<double>(x * y))).margin(1e-9));
    double mx = -1e300, mn = 1e300, pr = 1;
    index_t amax = 0, amin = 0, k = 0;
    test::for_each_index(s, [&](const index_list& i) {
      const double v = at(x, i);
      if (v > mx) mx = v, amax = k;
      if (v < mn) mn = v, amin = k;
      pr *= at(y, i);
      ++k;
    });
    REQUIRE(meld::max(x) == mx);
    REQUIRE(meld::min(x) == mn);
    REQUIRE(meld::argmax(x) == amax);
    REQUIRE(meld::argmin(x) == amin);
    if (s.product() <= 1000) REQUIRE(meld::prod(y) == Approx(pr).epsilon(1e-10));  // no underflow
  }
}

TEST_CASE("reductions of strided views and integer types", "[cpu]") {
  auto base = test::random_tensor<float>({50, 40}, 3);
  auto v = base.transpose().slice(range(1, 40, 3), range(49, 0, -2));
  REQUIRE(meld::sum(v) == Approx(naive_sum<float>(v)).margin(1e-4));  // ~325 terms of |x| < 2
  REQUIRE(meld::max(meld::abs(v)) == meld::max(meld::abs(tensor<float>(v))));
  auto i = meld::arange<std::int32_t>(1, 101);
  REQUIRE(meld::sum(i) == 5050);
  STATIC_REQUIRE(std::is_same_v<decltype(meld::sum(i)), std::int32_t>);
  STATIC_REQUIRE(std::is_same_v<decltype(meld::mean(i)), double>);
  REQUIRE(meld::mean(i) == 50.5);
  REQUIRE(meld::sum(i > 50) == 50);
  REQUIRE(meld::argmax(i) == 99);
  REQUIRE(meld::prod(meld::arange<std::int64_t>(1, 11)) == 3628800);
}

TEST_CASE("empty and NaN reductions", "[cpu]") {
  tensor<float> e({0, 3});
  REQUIRE(meld::sum(e) == 0.f);
  REQUIRE(meld::prod(e) == 1.f);
  REQUIRE(std::isnan(meld::mean(e)));
  REQUIRE_THROWS_WITH(
      meld::max(e), "max: the expression of shape {0, 3} is empty, and an empty max has no value");
  REQUIRE_THROWS_AS(meld::argmin(e), meld::shape_error);
  tensor<float> x = meld::arange<float>(10.f);
  x(4) = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(std::isnan(meld::max(x)));
  REQUIRE(std::isnan(meld::min(x)));
  REQUIRE(meld::argmax(x) == 4);
  REQUIRE(std::isnan(meld::sum(x)));
}

TEST_CASE("reductions along an axis", "[cpu]") {
  std::mt19937 gen(99);
  for (int trial = 0; trial < 40; ++trial) {
    const shape_t s = test::random_shape(gen, 1, 4, 7);
    auto x = test::random_tensor<double>(s, trial + 500);
    for (int axis = 0; axis < s.size(); ++axis) {
      INFO("shape " << s << " axis " << axis);
      const double n = double(s[axis]);
      auto ref_sum = naive_axis(x, axis, 0.0, [](double a, double v) { return a + v; });
      auto ref_max = naive_axis(x, axis, -1e300, [](double a, double v) { return std::max(a, v); });
      auto ref_min = naive_axis(x, axis, 1e300, [](double a, double v) { return std::min(a, v); });
      auto ref_prod = naive_axis(x, axis, 1.0, [](double a, double v) { return a * v; });
      tensor<double> r = meld::sum(x, axis);
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
      tensor<std::int64_t> am = meld::argmax(x, axis);
      check_elements(
          am,
          [&](const index_list& o) {
            index_list full = o;
            full.insert(full.begin() + axis, 0);
            index_t best = 0;
            for (index_t k = 1; k < s[axis]; ++k) {
              full[axis] = k;
              const double v = at(x, full);
              full[axis] = best;
              if (v > at(x, full)) best = k;
            }
            return best;
          },
          0);
      tensor<double> kept = meld::sum(x, axis, /*keepdims=*/true);
      REQUIRE(kept.rank() == s.size());
      REQUIRE(kept.shape()[axis] == 1);
    }
  }
}

TEST_CASE("axis reductions compose with elementwise expressions", "[cpu]") {
  auto x = test::random_tensor<float>({6, 10}, 8, -5, 5);
  // A numerically stable softmax along the last axis.
  tensor<float> shifted = x - meld::max(x, -1, true);
  tensor<float> p = meld::exp(shifted) / meld::sum(meld::exp(shifted), -1, true);
  for (index_t r = 0; r < 6; ++r) {
    double mx = -1e30, z = 0;
    for (index_t c = 0; c < 10; ++c) mx = std::max(mx, double(x(r, c)));
    for (index_t c = 0; c < 10; ++c) z += std::exp(double(x(r, c)) - mx);
    for (index_t c = 0; c < 10; ++c)
      REQUIRE(p(r, c) == Approx(std::exp(double(x(r, c)) - mx) / z).epsilon(1e-5));
  }
  tensor<float> colsum = meld::sum(x * 2.f, 0) + 1.f;  // a sum of an expression, then more work
  REQUIRE(colsum.shape() == shape_t{10});
  REQUIRE(colsum(3) == Approx(2 * naive_sum<float>(x.slice(meld::all, 3)) + 1).epsilon(1e-5));
  tensor<float> total = meld::sum(meld::sum(x, 0), 0);
  REQUIRE(total.rank() == 0);
  REQUIRE(total() == Approx(naive_sum<float>(x)).epsilon(1e-5));
  // A reduction whose operand is its own destination.
  tensor<float> sq(x);
  sq = meld::sum(sq, 1);
  REQUIRE(sq.shape() == shape_t{6});
  REQUIRE(sq(2) == Approx(naive_sum<float>(x.slice(2))).epsilon(1e-5));
}

TEST_CASE("axis reduction errors", "[cpu]") {
  tensor<float> x({2, 0});
  REQUIRE_THROWS_WITH(meld::sum(x, 2), "sum: axis 2 is out of range for a tensor of rank 2");
  REQUIRE_THROWS_WITH(meld::max(x, 1),
                      "max: axis 1 of shape {2, 0} is empty, and an empty max has no value");
  tensor<float> s = meld::sum(x, 1);
  REQUIRE(s.shape() == shape_t{2});
  REQUIRE(s(1) == 0.f);
  tensor<float> m = meld::mean(x, 1);
  REQUIRE(std::isnan(m(0)));
}

TEST_CASE("float sums are pairwise-accurate on 10^7 elements", "[cpu]") {
  // Error bound (README): |sum - exact| <= (B / (4 * lanes) + log2(lanes) + 3 + log2(n / B)) *
  // eps * sum(|x|) with B = max(256, 64 * lanes): about 37 * eps * sum(|x|) for 4 to 16 lanes.
  const index_t n = 10'000'000;
  auto x = meld::uniform<float>({n}, 0.f, 1.f, 77);
  double exact = 0, naive = 0;
  float naive_f = 0;
  for (float v : x) exact += v, naive_f += v;
  naive = naive_f;
  const double got = meld::sum(x);
  const double bound = 70 * std::numeric_limits<float>::epsilon() * exact;
  INFO("pairwise error " << std::abs(got - exact) << ", naive float loop error "
                         << std::abs(naive - exact) << ", bound " << bound);
  REQUIRE(std::abs(got - exact) <= bound);
  REQUIRE(std::abs(got - exact) * 100 < std::abs(naive - exact));
  // A mean of the same data, and a fused expression.
  REQUIRE(std::abs(double(meld::mean(x)) - exact / double(n)) <= bound / double(n));
  double exact2 = 0;
  for (float v : x) exact2 += double(v * 2.f - 1.f);
  REQUIRE(std::abs(double(meld::sum(x * 2.f - 1.f)) - exact2) <= 70 * 1.2e-7 * double(n));
}

// The horizontal step of a reduction (in registers where the target allows) combines the lanes in
// the documented tree order: bit for bit the scalar tree, NaNs included.
TEMPLATE_TEST_CASE("a batch's lanes combine in the fixed tree order", "[cpu]", float, double) {
  using T = TestType;
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
