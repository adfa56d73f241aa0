// Matrix products against a naive triple loop: shapes, transposed and strided views, batches,
// gemm's alpha / beta, and errors.
#include "../support.hpp"

using meld::index_t;
using meld::range;
using meld::shape_t;
using meld::tensor;

namespace {
template <class A, class B>
tensor<double> naive(const A& a, const B& b) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  tensor<double> c({m, n});
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double s = 0;
      for (index_t p = 0; p < k; ++p) s += double(a(i, p)) * double(b(p, j));
      c(i, j) = s;
    }
  return c;
}
template <class X>
void check_close(const X& got, const tensor<double>& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  test::for_each_index(want.shape(), [&](const test::index_list& i) {
    REQUIRE(double(test::at(got, i)) == Approx(test::at(want, i)).margin(tol));
  });
}
}  // namespace

TEST_CASE("matmul of many shapes matches a naive loop", "[cpu]") {
  for (auto [m, k, n] : {std::tuple<index_t, index_t, index_t>{1, 1, 1},
                         {3, 5, 7},
                         {17, 33, 9},
                         {64, 64, 64},
                         {130, 70, 257},
                         {1, 300, 1},
                         {0, 4, 5},
                         {4, 0, 5}}) {
    INFO(m << "x" << k << " by " << k << "x" << n);
    auto a = test::random_tensor<float>({m, k}, 1);
    auto b = test::random_tensor<float>({k, n}, 2);
    tensor<float> c = meld::matmul(a, b);
    check_close(c, naive(a, b), 1e-3);
    auto ad = test::random_tensor<double>({m, k}, 3);
    auto bd = test::random_tensor<double>({k, n}, 4);
    tensor<double> cd = meld::matmul(ad, bd);
    check_close(cd, naive(ad, bd), 1e-10);
  }
}

TEST_CASE("transposed and strided operands are used without copies", "[cpu]") {
  auto at = test::random_tensor<float>({40, 30}, 5);  // a = at^T: {30, 40}
  auto b = test::random_tensor<float>({40, 20}, 6);
  tensor<float> c = meld::matmul(at.transpose(), b);
  check_close(c, naive(at.transpose(), b), 1e-3);
  auto big = test::random_tensor<float>({50, 60}, 7);
  auto sa = big.slice(range(0, 50, 2), range(0, 40));    // {25, 40}
  auto sb = big.slice(range(10, 50), range(59, 0, -3));  // {40, 20}
  tensor<float> d = meld::matmul(sa, sb);
  check_close(d, naive(sa, sb), 1e-3);
  // A product inside a larger expression, and of expressions.
  tensor<float> e = meld::matmul(sa, sb) * 2.f + 1.f;
  tensor<float> f = meld::matmul(sa * 2.f, sb) + 1.f;
  check_close(e, naive(sa, sb) * 2.0 + 1.0, 2e-3);
  check_close(f, naive(sa, sb) * 2.0 + 1.0, 2e-3);
}

TEST_CASE("batched matmul and gemm accumulation", "[cpu]") {
  auto a = test::random_tensor<double>({3, 4, 5}, 8);
  auto b = test::random_tensor<double>({3, 5, 6}, 9);
  auto w = test::random_tensor<double>({5, 6}, 10);
  tensor<double> c = meld::matmul(a, b);
  tensor<double> cw = meld::matmul(a, w);  // w shared by every batch
  REQUIRE(c.shape() == shape_t{3, 4, 6});
  for (index_t s = 0; s < 3; ++s) {
    check_close(c.slice(s), naive(a.slice(s), b.slice(s)), 1e-12);
    check_close(cw.slice(s), naive(a.slice(s), w), 1e-12);
  }
  auto x = test::random_tensor<double>({8, 5}, 11);
  auto g = test::random_tensor<double>({8, 6}, 12);
  tensor<double> dw = meld::full<double>({5, 6}, 1.0);
  meld::gemm(2.0, x.transpose(), g, 1.0, dw);  // dw = 2 x^T g + dw
  check_close(dw, naive(x.transpose(), g) * 2.0 + 1.0, 1e-12);
  meld::gemm(1.0, x.transpose(), g, 0.0, dw.view());
  check_close(dw, naive(x.transpose(), g), 1e-12);
}

TEST_CASE("matmul shape errors", "[cpu]") {
  tensor<float> a({3, 4}), b({5, 6}), v({4});
  REQUIRE_THROWS_WITH(
      meld::matmul(a, b),
      "matmul: shapes {3, 4} and {5, 6} do not match: a has 4 columns, b has 5 rows");
  REQUIRE_THROWS_WITH(meld::matmul(a, v),
                      "matmul: operands must have rank 2 or 3 (a {3, 4}, b {4})");
  tensor<float> c({3, 3});
  REQUIRE_THROWS_AS(meld::gemm(1.f, a, tensor<float>({4, 6}), 0.f, c), meld::shape_error);
  REQUIRE_THROWS_AS(meld::matmul(tensor<float>({2, 3, 4}), tensor<float>({3, 4, 5})),
                    meld::shape_error);
}
