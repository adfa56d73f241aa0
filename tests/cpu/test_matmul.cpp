// Matrix products against a naive triple loop: shapes, transposed and strided views, batches,
// gemm's alpha / beta, and errors; on every backend (the references are computed from host
// copies of the operands). The blocked CPU kernel is also driven directly with tiny block sizes,
// so that every block boundary and edge tile is crossed with small matrices, and its results are
// checked to be the same for any thread count (host tests). Compiled twice: as part of test_cpu,
// and as test_matmul_blas with MELD_ENABLE_BLAS (products go to the system BLAS where the strides
// allow it; that program runs the host backends and the host tests only).
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../backends.hpp"

using meld::index_t;
using meld::range;
using meld::shape_t;
using meld::tensor;

namespace {
// The product of two host matrices (tensors or views).
template <class X, class Y>
tensor<double> naive(const X& a, const Y& b) {
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
// got: a tensor or view of any backend (a device result is copied to the host first).
template <class X>
void check_close(const X& got, const tensor<double>& want, double tol) {
  if constexpr (!meld::backend_t<X>::host_accessible) {
    check_close(test::host(got), want, tol);
  } else {
    REQUIRE(got.shape() == want.shape());
    test::for_each_index(want.shape(), [&](const test::index_list& i) {
      REQUIRE(double(test::at(got, i)) == Approx(test::at(want, i)).margin(tol));
    });
  }
}
}  // namespace

BACKEND_TEST_CASE("matmul of many shapes matches a naive loop", "[matmul]") {
  for (auto [m, k, n] : {std::tuple<index_t, index_t, index_t>{1, 1, 1},
                         {3, 5, 7},
                         {17, 33, 9},
                         {64, 64, 64},
                         {130, 70, 257},
                         {1, 300, 1},
                         {0, 4, 5},
                         {4, 0, 5}}) {
    INFO(m << "x" << k << " by " << k << "x" << n);
    const auto ha = test::random_tensor<float>({m, k}, 1);
    const auto hb = test::random_tensor<float>({k, n}, 2);
    const auto a = test::on<B>(ha), b = test::on<B>(hb);
    tensor<float, B> c = meld::matmul(a, b);
    check_close(c, naive(ha, hb), 1e-3);
    const auto had = test::random_tensor<double>({m, k}, 3);
    const auto hbd = test::random_tensor<double>({k, n}, 4);
    const auto ad = test::on<B>(had), bd = test::on<B>(hbd);
    tensor<double, B> cd = meld::matmul(ad, bd);
    check_close(cd, naive(had, hbd), 1e-10);
  }
}

BACKEND_TEST_CASE("transposed and strided operands are used without copies", "[matmul]") {
  const auto hat = test::random_tensor<float>({40, 30}, 5);  // a = at^T: {30, 40}
  const auto hb = test::random_tensor<float>({40, 20}, 6);
  const auto at = test::on<B>(hat), b = test::on<B>(hb);
  tensor<float, B> c = meld::matmul(at.transpose(), b);
  check_close(c, naive(hat.transpose(), hb), 1e-3);
  const auto hbig = test::random_tensor<float>({50, 60}, 7);
  const auto big = test::on<B>(hbig);
  auto sa = big.slice(range(0, 50, 2), range(0, 40));    // {25, 40}
  auto sb = big.slice(range(10, 50), range(59, 0, -3));  // {40, 20}
  const auto hsa = hbig.slice(range(0, 50, 2), range(0, 40));
  const auto hsb = hbig.slice(range(10, 50), range(59, 0, -3));
  tensor<float, B> d = meld::matmul(sa, sb);
  check_close(d, naive(hsa, hsb), 1e-3);
  // A product inside a larger expression, and of expressions.
  tensor<float, B> e = meld::matmul(sa, sb) * 2.f + 1.f;
  tensor<float, B> f = meld::matmul(sa * 2.f, sb) + 1.f;
  check_close(e, naive(hsa, hsb) * 2.0 + 1.0, 2e-3);
  check_close(f, naive(hsa, hsb) * 2.0 + 1.0, 2e-3);
}

BACKEND_TEST_CASE("batched matmul and gemm accumulation", "[matmul]") {
  const auto ha = test::random_tensor<double>({3, 4, 5}, 8);
  const auto hb = test::random_tensor<double>({3, 5, 6}, 9);
  const auto hw = test::random_tensor<double>({5, 6}, 10);
  const auto a = test::on<B>(ha), b = test::on<B>(hb), w = test::on<B>(hw);
  tensor<double, B> c = meld::matmul(a, b);
  tensor<double, B> cw = meld::matmul(a, w);  // w shared by every batch
  REQUIRE(c.shape() == shape_t{3, 4, 6});
  for (index_t s = 0; s < 3; ++s) {
    check_close(c.slice(s), naive(ha.slice(s), hb.slice(s)), 1e-12);
    check_close(cw.slice(s), naive(ha.slice(s), hw), 1e-12);
  }
  const auto hx = test::random_tensor<double>({8, 5}, 11);
  const auto hg = test::random_tensor<double>({8, 6}, 12);
  const auto x = test::on<B>(hx), g = test::on<B>(hg);
  tensor<double, B> dw = meld::full<double, B>({5, 6}, 1.0);
  meld::gemm(2.0, x.transpose(), g, 1.0, dw);  // dw = 2 x^T g + dw
  check_close(dw, naive(hx.transpose(), hg) * 2.0 + 1.0, 1e-12);
  meld::gemm(1.0, x.transpose(), g, 0.0, dw.view());
  check_close(dw, naive(hx.transpose(), hg), 1e-12);
}

BACKEND_TEST_CASE("gemm whose output overlaps an operand goes through a temporary", "[matmul]") {
  // Larger than one block of the CPU kernel, so that an in-place product would write C before
  // it has packed every panel of A and B.
  const auto hx = test::random_tensor<double>({300, 300}, 31);
  auto x = test::on<B>(hx);
  meld::gemm(1.0, x, x, 0.0, x);  // x = x x
  check_close(x, naive(hx, hx), 1e-10);
  const auto hx1 = test::host(x);
  meld::gemm(0.5, x, x.transpose(), 2.0, x);  // x = 0.5 x x^T + 2 x
  check_close(x, naive(hx1, hx1.transpose()) * 0.5 + hx1 * 2.0, 1e-9);

  // A view that overlaps part of an operand: rows [0, 200) written from rows [100, 300).
  const auto hbig = test::random_tensor<float>({300, 200}, 32);
  const auto hw = test::random_tensor<float>({200, 200}, 33);
  auto big = test::on<B>(hbig);
  const auto w = test::on<B>(hw);
  meld::gemm(1.f, big.slice(range(100, 300)), w, 1.f, big.slice(range(0, 200)));
  const tensor<double> hc =
      naive(hbig.slice(range(100, 300)), hw) + meld::cast<double>(hbig.slice(range(0, 200)));
  check_close(big.slice(range(0, 200)), hc, 1e-3);
  check_close(big.slice(range(200, 300)), meld::cast<double>(hbig.slice(range(200, 300))), 0);

  // The output is the last columns of the left operand: with k above the kernel's block of k,
  // the first block's results would be read back as operand values of the next ones.
  const auto hwide = test::random_tensor<double>({64, 1100}, 36);
  const auto hv = test::random_tensor<double>({1100, 64}, 37);
  auto wide = test::on<B>(hwide);
  meld::gemm(1.0, wide, test::on<B>(hv), 0.0, wide.slice(meld::all, range(1036, 1100)));
  check_close(wide.slice(meld::all, range(1036, 1100)), naive(hwide, hv), 1e-10);
  check_close(wide.slice(meld::all, range(0, 1036)),
              tensor<double>(hwide.slice(meld::all, range(0, 1036))), 0);

  // Integers (a plain loop that writes each row of c before it has read all of that row of a).
  const auto hi = test::random_tensor<std::int32_t>({20, 20}, 38, -50, 50);
  auto xi = test::on<B>(hi);
  meld::gemm(1, xi, xi, 0, xi);
  check_close(tensor<double, B>(meld::cast<double>(xi)), naive(hi, hi), 0);

  // Batched, the output being the right operand.
  const auto ha = test::random_tensor<double>({3, 70, 70}, 34);
  const auto hb = test::random_tensor<double>({3, 70, 70}, 35);
  const auto a = test::on<B>(ha);
  auto b = test::on<B>(hb);
  meld::gemm(1.0, a, b, 0.0, b);
  for (index_t s = 0; s < 3; ++s) check_close(b.slice(s), naive(ha.slice(s), hb.slice(s)), 1e-10);
}

BACKEND_TEST_CASE("matmul shape errors", "[matmul]") {
  tensor<float, B> a({3, 4}), b({5, 6}), v({4});
  REQUIRE_THROWS_WITH(
      meld::matmul(a, b),
      "matmul: shapes {3, 4} and {5, 6} do not match: a has 4 columns, b has 5 rows");
  REQUIRE_THROWS_WITH(meld::matmul(a, v),
                      "matmul: operands must have rank 2 or 3 (a {3, 4}, b {4})");
  tensor<float, B> c({3, 3});
  REQUIRE_THROWS_AS(meld::gemm(1.f, a, tensor<float, B>({4, 6}), 0.f, c), meld::shape_error);
  REQUIRE_THROWS_AS(meld::matmul(tensor<float, B>({2, 3, 4}), tensor<float, B>({3, 4, 5})),
                    meld::shape_error);
}

// ---- the optimized kernel -----------------------------------------------------------------------

namespace {

namespace cpu_eval = meld::detail::cpu_eval;

using test::thread_count_guard;

// Element (i, j) of a rank-2 host tensor or view, by stride arithmetic (independent of meld).
template <class X>
auto elem(const X& x, index_t i, index_t j) {
  return x.data()[i * x.strides()[0] + j * x.strides()[1]];
}

// alpha a b + beta c0 in long double, and a bound on the rounding error of any float or double
// evaluation: each element is a sum of k products, whatever the order or the use of fused
// multiply-adds, within (k + 3) u (|alpha| |a| |b| + |beta| |c0|), u the unit roundoff (one more
// rounding for alpha, two for beta c0 and the final addition). The test allows 2 u: the bound
// stays tight enough to catch a wrong or missing term (a product of size ~1 against a bound of
// ~k^2 1e-7 for floats). a, b and c0 are on the host (copies of device operands: test::host).
struct expected_product {
  tensor<double> value, bound;
};
template <class T, class A, class B, class C>
expected_product expected_gemm(double alpha, const A& a, const B& b, double beta, const C& c0) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const double u = std::numeric_limits<T>::epsilon();
  expected_product e{tensor<double>({m, n}), tensor<double>({m, n})};
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      long double s = 0, mag = 0;
      for (index_t p = 0; p < k; ++p) {
        const long double x = elem(a, i, p), y = elem(b, p, j);
        s += x * y;
        mag += std::fabs(x * y);
      }
      const double c = beta == 0 ? 0.0 : double(elem(c0, i, j));
      e.value(i, j) = double(alpha * s + beta * c);
      e.bound(i, j) =
          double(k + 3) * u * (std::fabs(alpha) * double(mag) + std::fabs(beta * c)) + 1e-300;
    }
  return e;
}

// got: a rank-2 tensor or view of any backend (a device result is copied to the host first).
template <class X>
void check_within(const X& got, const expected_product& want) {
  if constexpr (!meld::backend_t<X>::host_accessible) {
    check_within(test::host(got), want);
  } else {
    const index_t m = want.value.shape()[0], n = want.value.shape()[1];
    REQUIRE(got.shape() == shape_t{m, n});
    index_t bad = 0;
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        const double g = elem(got, i, j), w = want.value(i, j);
        if (!(std::fabs(g - w) <= want.bound(i, j))) {  // NaN fails too
          if (bad++ < 5)
            FAIL_CHECK("C(" << i << ", " << j << ") = " << g << ", want " << w << " +- "
                            << want.bound(i, j));
        }
      }
    REQUIRE(bad == 0);
  }
}

// A rank-2 operand of shape {r, c} on backend B stored in one of several layouts, holding the
// same values as a random row-major tensor: contiguous, transposed (column-major), strided (every
// other row and every third column of a bigger tensor), or reversed (negative strides).
enum class layout_kind { row_major, column_major, strided, reversed };
constexpr layout_kind all_layouts[] = {layout_kind::row_major, layout_kind::column_major,
                                       layout_kind::strided, layout_kind::reversed};

template <class T, class B>
struct operand {
  tensor<T, B> storage;
  meld::tensor_view<T, B> view;
};
template <class T, class B = meld::cpu<>>
operand<T, B> make_operand(index_t r, index_t c, layout_kind kind, std::uint32_t seed) {
  switch (kind) {
    case layout_kind::row_major: {
      auto t = test::random_tensor<T, B>({r, c}, seed);
      auto v = t.view();
      return {std::move(t), v};
    }
    case layout_kind::column_major: {
      auto t = test::random_tensor<T, B>({c, r}, seed);
      auto v = t.transpose();
      return {std::move(t), v};
    }
    case layout_kind::strided: {
      auto t = test::random_tensor<T, B>({2 * r + 1, 3 * c + 2}, seed);
      auto v = t.slice(range(1, 2 * r + 1, 2), range(2, 3 * c + 2, 3));
      return {std::move(t), v};
    }
    case layout_kind::reversed: {
      auto t = test::random_tensor<T, B>({r, c}, seed);
      auto v = t.slice(range(r - 1, std::nullopt, -1), range(c - 1, std::nullopt, -1));
      return {std::move(t), v};
    }
  }
  throw std::logic_error("layout");
}

template <class T>
cpu_eval::matrix_ref<const T> ref_of(const meld::tensor_view<T>& v) {
  return {v.data(), v.shape()[0], v.shape()[1], v.strides()[0], v.strides()[1]};
}
template <class T>
cpu_eval::matrix_ref<T> mutable_ref_of(const meld::tensor_view<T>& v) {
  return {const_cast<T*>(v.data()), v.shape()[0], v.shape()[1], v.strides()[0], v.strides()[1]};
}

// The blocked kernel with tiny blocks (2 row panels, 7 steps of k, 2 column panels per block) for
// one shape, operand layouts and alpha / beta chosen from `pick`: Kernel's operands of S, C of T
// (Rounded: the kernel reads the operands rounded to bfloat16).
template <class T, class S = T, class Kernel = cpu_eval::packed_kernel<T>, bool Rounded = false>
void check_blocked(index_t m, index_t n, index_t k, int pick, int threads, index_t kc = 7) {
  using tile = Kernel;
  const cpu_eval::gemm_blocking tiny{2 * tile::mr, kc, 2 * tile::nr};
  const layout_kind la = all_layouts[pick % 4], lb = all_layouts[(pick / 4) % 4],
                    lc = all_layouts[(pick / 16) % 4];
  const T alphas[] = {T(1), T(-0.75)}, betas[] = {T(0), T(1), T(2.5)};
  // alpha changes every 64 picks, so that each layout triple meets both (the kernel reads A in
  // place only when alpha is 1).
  const T alpha = alphas[(pick / 64) % 2], beta = betas[pick % 3];
  INFO("m " << m << " n " << n << " k " << k << " layouts " << int(la) << int(lb) << int(lc)
            << " alpha " << alpha << " beta " << beta << " threads " << threads);
  auto a = make_operand<S>(m, k, la, std::uint32_t(3 * pick + 1));
  auto b = make_operand<S>(k, n, lb, std::uint32_t(3 * pick + 2));
  auto c = make_operand<T>(m, n, lc, std::uint32_t(3 * pick + 3));
  if (beta == T(0)) c.view = std::numeric_limits<T>::quiet_NaN();  // must be ignored
  const auto want = [&] {
    if constexpr (Rounded) {
      auto rounded = [](const auto& v) {
        return tensor<T>(meld::cast<T>(meld::cast<meld::bfloat16>(v)));
      };
      return expected_gemm<T>(alpha, rounded(a.view), rounded(b.view), beta, c.view);
    } else {
      return expected_gemm<T>(alpha, a.view, b.view, beta, c.view);
    }
  }();
  // The elements of c's storage outside the view must not change.
  tensor<T> before = c.storage.clone();
  std::vector<char> inside(std::size_t(c.storage.size()), 0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      inside[std::size_t(&c.view.data()[i * c.view.strides()[0] + j * c.view.strides()[1]] -
                         c.storage.data())] = 1;
  cpu_eval::gemm_blocked<Kernel>(alpha, ref_of(a.view), ref_of(b.view), beta,
                                 mutable_ref_of(c.view), tiny, threads);
  check_within(c.view, want);
  for (index_t i = 0; i < c.storage.size(); ++i)
    if (!inside[std::size_t(i)]) REQUIRE(c.storage.data()[i] == before.data()[i]);
}

}  // namespace

HOST_TEST_CASE("the blocked kernel crosses every block boundary and edge tile", "[matmul]") {
  thread_count_guard guard;
  auto run = [](auto zero, auto operand, auto kernel, auto rounded) {
    using T = decltype(zero);
    using S = decltype(operand);
    using tile = typename decltype(kernel)::type;
    const index_t mr = tile::mr, nr = tile::nr;
    const index_t ms[] = {1, mr - 1, mr, mr + 1, 2 * mr + 1, 5 * mr + 3};
    const index_t ns[] = {1, nr - 1, nr, nr + 1, 2 * nr + 3, 5 * nr - 1};
    const index_t ks[] = {1, 6, 7, 8, 15, 29};
    int pick = 0;
    for (index_t m : ms)
      for (index_t n : ns)
        for (index_t k : ks) {
          const int threads = 1 + pick % 4;
          meld::set_num_threads(threads);
          check_blocked<T, S, tile, decltype(rounded)::value>(m, n, k, pick++, threads);
        }
    {
      // Blocks of k long enough for the packings' whole 16 x 16 blocks of 4-byte words (read along
      // one dimension, transposed in registers: float, and bfloat16 pairs), beside their edges.
      for (index_t m : {index_t(15), index_t(16), index_t(33), 2 * mr + 1})
        for (index_t n : {nr, 2 * nr + 3})
          for (index_t k : {index_t(32), index_t(45), index_t(64), index_t(95), index_t(131)}) {
            const int threads = 1 + pick % 2;
            meld::set_num_threads(threads);
            check_blocked<T, S, tile, decltype(rounded)::value>(m, n, k, pick++, threads, 64);
          }
    }
  };
  SECTION("float") {
    run(0.f, 0.f, std::type_identity<cpu_eval::packed_kernel<float>>{}, std::false_type{});
  }
  SECTION("double") {
    run(0.0, 0.0, std::type_identity<cpu_eval::packed_kernel<double>>{}, std::false_type{});
  }
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  SECTION("bfloat16 operands, float C: the vdpbf16ps kernel (k in pairs, odd blocks padded)") {
    run(0.f, meld::bfloat16(), std::type_identity<cpu_eval::bf16_dot_kernel>{}, std::false_type{});
  }
  SECTION("float operands rounded to bfloat16 as the vdpbf16ps kernel packs them") {
    run(0.f, 0.f, std::type_identity<cpu_eval::bf16_dot_kernel>{}, std::true_type{});
  }
#endif
#if defined(MELD_DETAIL_AMX)
  if (cpu_eval::amx_bf16_usable()) {
    SECTION("bfloat16 operands, float C: the AMX kernel (k in whole tiles, padded with zeros)") {
      run(0.f, meld::bfloat16(), std::type_identity<cpu_eval::bf16_amx_kernel>{},
          std::false_type{});
    }
    SECTION("float operands rounded to bfloat16 as the AMX kernel packs them") {
      run(0.f, 0.f, std::type_identity<cpu_eval::bf16_amx_kernel>{}, std::true_type{});
    }
  } else {
    WARN("AMX-BF16 compiled but not usable here (CPU, Linux or MELD_NO_AMX): its kernel untested");
  }
#endif
}

HOST_TEST_CASE("matmul around the default block sizes", "[matmul][big]") {
  thread_count_guard guard;
  auto run = [](auto zero) {
    using T = decltype(zero);
    using tile = cpu_eval::gemm_tile<T>;
    const auto& blocks = cpu_eval::default_gemm_blocking<T>();
    INFO("MC " << blocks.mc << " KC " << blocks.kc << " NC " << blocks.nc);
    REQUIRE(blocks.mc % tile::mr == 0);
    REQUIRE(blocks.nc % tile::nr == 0);
    const std::tuple<index_t, index_t, index_t> shapes[] = {
        {blocks.mc + 1, 2 * tile::nr + 1, blocks.kc + 1},     // one more row block, k block
        {2 * tile::mr + 5, blocks.nc + 3, 3},                 // one more column block
        {37, 41, 2 * blocks.kc + 13},                         // three k blocks
        {2 * tile::mr + 3, 5 * tile::nr + 7, blocks.kc + 7},  // few rows: B read in place
        {257, 263, 269}};                                     // primes
    int seed = 100;
    for (auto [m, n, k] : shapes)
      for (int threads : {1, 3}) {
        meld::set_num_threads(threads);
        INFO(m << " x " << k << " by " << k << " x " << n << ", threads " << threads);
        auto a = test::random_tensor<T>({m, k}, std::uint32_t(seed++));
        auto b = test::random_tensor<T>({k, n}, std::uint32_t(seed++));
        tensor<T> c = meld::matmul(a, b);
        check_within(c, expected_gemm<T>(1, a, b, 0, c));
        // The same product with both operands transposed views, into a transposed view.
        tensor<T> at = a.transpose(), bt = b.transpose();
        tensor<T> ct({n, m});
        meld::gemm(T(1), at.transpose(), bt.transpose(), T(0), ct.transpose());
        check_within(ct.transpose(), expected_gemm<T>(1, a, b, 0, c));
      }
  };
  SECTION("float") {
    run(0.f);
  }
  SECTION("double") {
    run(0.0);
  }
}

// (The host evaluators, sim's included, use two threads here, as the host tests did; a GPU
// backend is not affected by the setting.)
BACKEND_TEST_CASE("matmul and gemm with every operand layout on both sides", "[matmul]") {
  thread_count_guard guard;
  meld::set_num_threads(2);
  int pick = 0;
  for (layout_kind la : all_layouts)
    for (layout_kind lb : all_layouts)
      for (layout_kind lc : all_layouts) {
        INFO("layouts " << int(la) << int(lb) << int(lc));
        const index_t m = 61, n = 75, k = 53;
        auto a = make_operand<float, B>(m, k, la, std::uint32_t(pick++));
        auto b = make_operand<float, B>(k, n, lb, std::uint32_t(pick++));
        auto c = make_operand<float, B>(m, n, lc, std::uint32_t(pick++));
        const auto ha = test::host(a.view), hb = test::host(b.view);
        const auto want = expected_gemm<float>(-1.5, ha, hb, 0.5, test::host(c.view));
        meld::gemm(-1.5f, a.view, b.view, 0.5f, c.view);
        check_within(c.view, want);
        c.view = meld::matmul(a.view, b.view);
        const auto hc = test::host(c.view);
        check_within(hc, expected_gemm<float>(1, ha, hb, 0, hc));
      }
}

BACKEND_TEST_CASE("gemm's alpha and beta follow BLAS: zeros are not multiplied", "[matmul]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto ha = test::random_tensor<float>({70, 90}, 1);
  const auto hb = test::random_tensor<float>({90, 50}, 2);
  const auto hc0 = test::random_tensor<float>({70, 50}, 3);
  const auto a = test::on<B>(ha), b = test::on<B>(hb), c0 = test::on<B>(hc0);
  for (float alpha : {1.f, -2.f, 0.5f})
    for (float beta : {0.f, 1.f, -1.f, 3.f}) {
      INFO("alpha " << alpha << " beta " << beta);
      tensor<float, B> c = c0.clone();
      if (beta == 0.f) c = nan;  // ignored, NaN included
      const auto want = expected_gemm<float>(alpha, ha, hb, beta, test::host(c));
      meld::gemm(alpha, a, b, beta, c);
      check_within(c, want);
    }
  // alpha == 0 (or k == 0): a and b are not read; c = beta c.
  tensor<float, B> bad_a = meld::full<float, B>({70, 90}, nan);
  tensor<float, B> c = c0.clone();
  meld::gemm(0.f, bad_a, b, 2.f, c);
  tensor<float> hc = test::host(c);
  for (index_t i = 0; i < hc.size(); ++i) REQUIRE(hc.data()[i] == 2.f * hc0.data()[i]);
  meld::gemm(0.f, bad_a, b, 0.f, c);
  hc = test::host(c);
  for (index_t i = 0; i < hc.size(); ++i) REQUIRE(hc.data()[i] == 0.f);
  tensor<float, B> empty_a({70, 0}), empty_b({0, 50});
  c = nan;
  meld::gemm(1.f, empty_a, empty_b, 0.f, c);
  hc = test::host(c);
  for (index_t i = 0; i < hc.size(); ++i) REQUIRE(hc.data()[i] == 0.f);
  c = c0;  // assignment copies the elements
  meld::gemm(1.f, empty_a, empty_b, -1.f, c);
  hc = test::host(c);
  for (index_t i = 0; i < hc.size(); ++i) REQUIRE(hc.data()[i] == -hc0.data()[i]);
  // An empty output: nothing to do, nothing read.
  tensor<float, B> none({0, 50});
  meld::gemm(1.f, tensor<float, B>({0, 90}), b, 0.f, none);
  REQUIRE(
      tensor<float, B>(meld::matmul(tensor<float, B>({3, 4}), tensor<float, B>({4, 0}))).size() ==
      0);
}

HOST_TEST_CASE("matmul gives the same bits for 1, 2, 3 and 4 threads", "[matmul]") {
  thread_count_guard guard;
  auto a = test::random_tensor<float>({301, 203}, 7);
  auto b = test::random_tensor<float>({203, 517}, 8);
  auto v = test::random_tensor<float>({1, 777}, 17);
  auto w = test::random_tensor<float>({777, 2100}, 18);
  auto ad = test::random_tensor<double>({97, 1001}, 9);
  auto bd = test::random_tensor<double>({1001, 83}, 10);
  meld::set_num_threads(1);
  tensor<float> c1 = meld::matmul(a, b.transpose().transpose());
  tensor<double> d1 = meld::matmul(ad, bd);
  check_within(c1, expected_gemm<float>(1, a, b, 0, c1));
  check_within(d1, expected_gemm<double>(1, ad, bd, 0, d1));
  tensor<float> r1 = meld::matmul(v, w), t1 = meld::matmul(w.transpose(), v.transpose());
  check_within(r1, expected_gemm<float>(1, v, w, 0, r1));
  check_within(t1, expected_gemm<float>(1, w.transpose(), v.transpose(), 0, t1));
  for (int threads : {2, 3, 4}) {
    meld::set_num_threads(threads);
    INFO("threads " << threads);
    tensor<float> c = meld::matmul(a, b);
    tensor<double> d = meld::matmul(ad, bd);
    REQUIRE(std::memcmp(c.data(), c1.data(), sizeof(float) * std::size_t(c.size())) == 0);
    REQUIRE(std::memcmp(d.data(), d1.data(), sizeof(double) * std::size_t(d.size())) == 0);
    tensor<float> r = meld::matmul(v, w), t = meld::matmul(w.transpose(), v.transpose());
    REQUIRE(std::memcmp(r.data(), r1.data(), sizeof(float) * std::size_t(r.size())) == 0);
    REQUIRE(std::memcmp(t.data(), t1.data(), sizeof(float) * std::size_t(t.size())) == 0);
  }
}

// (Two threads for the host evaluators, as in the host test this was: see above.)
BACKEND_TEST_CASE("vector-shaped products and batches of strided matrices", "[matmul]") {
  thread_count_guard guard;
  meld::set_num_threads(2);
  // Row vector times a matrix, matrix times a column vector, a dot product, an outer product.
  for (auto [m, n, k] : {std::tuple<index_t, index_t, index_t>{1, 300, 503},
                         {300, 1, 503},
                         {1, 1500, 301},  // several chunks of columns, on two threads
                         {1300, 1, 203},
                         {1, 1, 1000},
                         {200, 150, 1}}) {
    for (layout_kind la : {layout_kind::row_major, layout_kind::column_major, layout_kind::strided})
      for (layout_kind lb : {layout_kind::row_major, layout_kind::column_major}) {
        INFO(m << " x " << k << " by " << k << " x " << n << " layouts " << int(la) << int(lb));
        auto a = make_operand<double, B>(m, k, la, 11);
        auto b = make_operand<double, B>(k, n, lb, 12);
        tensor<double, B> c = meld::matmul(a.view, b.view);
        const auto hc = test::host(c);
        check_within(hc, expected_gemm<double>(1, test::host(a.view), test::host(b.view), 0, hc));
      }
  }
  // Batches whose matrices are strided: a permuted {m, batch, k} tensor, a reversed batch axis.
  auto a_store = test::random_tensor<float, B>({37, 4, 45}, 13);
  auto a = a_store.permute({1, 0, 2});  // {4, 37, 45}
  auto b_store = test::random_tensor<float, B>({4, 29, 45}, 14);
  auto b = b_store.slice(range(3, std::nullopt, -1)).permute({0, 2, 1});  // {4, 45, 29}
  const auto ha = test::host(a), hb = test::host(b);
  tensor<float, B> c = meld::matmul(a, b);
  REQUIRE(c.shape() == shape_t{4, 37, 29});
  const auto hc = test::host(c);
  for (index_t s = 0; s < 4; ++s) {
    auto cs = hc.slice(s);
    check_within(cs, expected_gemm<float>(1, ha.slice(s), hb.slice(s), 0, cs));
  }
  // Many small products: one per task (the same bits for any thread count: a host test below).
  const auto hxs = test::random_tensor<double>({64, 12, 20}, 19);
  const auto hws = test::random_tensor<double>({20, 16}, 20);
  tensor<double, B> ys = meld::matmul(test::on<B>(hxs), test::on<B>(hws));
  const auto hys = test::host(ys);
  for (index_t s = 0; s < 64; ++s) {
    auto y = hys.slice(s);
    check_within(y, expected_gemm<double>(1, hxs.slice(s), hws, 0, y));
  }
  // Accumulation into a batch of views.
  tensor<float, B> acc = meld::full<float, B>({4, 37, 29}, 1.f);
  meld::gemm(2.f, a, b, 1.f, acc);
  const auto hacc = test::host(acc);
  for (index_t s = 0; s < 4; ++s) {
    auto one = meld::full<float>({37, 29}, 1.f);
    auto as = hacc.slice(s);
    check_within(as, expected_gemm<float>(2, ha.slice(s), hb.slice(s), 1, one));
  }
}

HOST_TEST_CASE("a batch of small products gives the same bits for 1, 2 and 3 threads", "[matmul]") {
  thread_count_guard guard;
  // Many small products: one per task, the same bits for any thread count.
  auto xs = test::random_tensor<double>({64, 12, 20}, 19);
  auto ws = test::random_tensor<double>({20, 16}, 20);
  meld::set_num_threads(1);
  tensor<double> ys1 = meld::matmul(xs, ws);
  for (int threads : {2, 3}) {
    meld::set_num_threads(threads);
    tensor<double> ys = meld::matmul(xs, ws);
    REQUIRE(std::memcmp(ys.data(), ys1.data(), sizeof(double) * std::size_t(ys.size())) == 0);
  }
  for (index_t s = 0; s < 64; ++s) {
    auto ys = ys1.slice(s);
    check_within(ys, expected_gemm<double>(1, xs.slice(s), ws, 0, ys));
  }
}

BACKEND_TEST_CASE("integer matmul is exact", "[matmul]") {
  const auto ha = test::random_tensor<std::int32_t>({33, 70}, 15, -100, 100);
  const auto hb = test::random_tensor<std::int32_t>({70, 19}, 16, -100, 100);
  const auto a = test::on<B>(ha), b = test::on<B>(hb);
  const auto c = test::host(tensor<std::int32_t, B>(meld::matmul(a, b.transpose().transpose())));
  for (index_t i = 0; i < 33; ++i)
    for (index_t j = 0; j < 19; ++j) {
      std::int64_t s = 0;
      for (index_t p = 0; p < 70; ++p) s += std::int64_t(ha(i, p)) * hb(p, j);
      REQUIRE(c(i, j) == s);
    }
}

HOST_TEST_CASE("narrow products computed transposed match a naive loop", "[matmul]") {
  thread_count_guard guard;
  // c (m x n) narrower than a tile, over one k block: gemm computes c^T = b^T a^T, n in the rows of
  // the tiles (a linear layer's forward product into 10 classes: 256 x 128 times 128 x 10).
  auto run = [](auto zero) {
    using T = decltype(zero);
    constexpr index_t nr = cpu_eval::gemm_tile<T>::nr;
    int pick = 0;
    for (index_t m : {index_t(2 * nr + 5), index_t(256)})
      for (index_t n : {index_t(2), index_t(10), nr / 4, nr / 2 - 1})
        for (index_t k : {index_t(3), index_t(128)}) {
          // (With narrower vectors, or n near NR / 2, the transposed tiles save too little.)
          if (!cpu_eval::gemm_transposed_fits<T>(m, n, k)) continue;
          ++pick;
          const T alpha = pick % 2 ? T(1) : T(-0.5), beta = pick % 3 ? T(0) : T(1.5);
          INFO("m " << m << " n " << n << " k " << k << " alpha " << alpha << " beta " << beta);
          auto a = make_operand<T>(m, k, all_layouts[pick % 4], std::uint32_t(pick));
          auto b = make_operand<T>(k, n, all_layouts[(pick / 4) % 4], std::uint32_t(pick + 100));
          auto c = make_operand<T>(m, n, layout_kind::row_major, std::uint32_t(pick + 200));
          if (beta == T(0)) c.view = std::numeric_limits<T>::quiet_NaN();  // must be ignored
          const auto want = expected_gemm<T>(alpha, a.view, b.view, beta, c.view);
          tensor<T> c0 = c.storage.clone();
          meld::set_num_threads(1);
          meld::gemm(alpha, a.view, b.view, beta, c.view);
          check_within(c.view, want);
          tensor<T> one = c.storage.clone();
          meld::set_num_threads(3);  // the same bits on more threads
          meld::copy(c.storage, c0);
          meld::gemm(alpha, a.view, b.view, beta, c.view);
          REQUIRE(std::memcmp(c.storage.data(), one.data(), sizeof(T) * std::size_t(one.size())) ==
                  0);
        }
    REQUIRE(pick >= 8);
    // Wide enough, or a long k: not transposed.
    REQUIRE_FALSE(cpu_eval::gemm_transposed_fits<T>(256, nr, 128));
    REQUIRE_FALSE(cpu_eval::gemm_transposed_fits<T>(12, 10, 128));
    REQUIRE_FALSE(
        cpu_eval::gemm_transposed_fits<T>(256, 10, cpu_eval::default_gemm_blocking<T>().kc + 1));
  };
  SECTION("float") {
    run(0.f);
  }
  SECTION("double") {
    run(0.0);
  }
}

HOST_TEST_CASE("thin products with a long k (dot-product tiles) match a naive loop", "[matmul]") {
  thread_count_guard guard;
  // a row-major, b column-major (contiguous along k): the weight gradient's layout, where
  // gemm_dot computes R x C dot products at a time over blocks of k (the last k elements that do
  // not fill a vector, or a bfloat16 read's 32, added one by one; edge tiles; several blocks of k
  // for the longest). Operands of S, C of T, read through Read (Rounded: the reads round the
  // operands to bfloat16).
  auto run = [](auto zero, auto operand, auto read, auto rounded) {
    using T = decltype(zero);
    using S = decltype(operand);
    using Read = typename decltype(read)::type;
    constexpr index_t W = index_t(xsimd::batch<T, meld::detail::simd_arch>::size);
    const index_t ms[] = {1, 3, 4, 5, 6, 20, 33};
    constexpr index_t nr = cpu_eval::gemm_tile<T>::nr, mr = cpu_eval::gemm_tile<T>::mr;
    // The widest c it takes: NR / 2 columns, NR - 1 for at most MR rows.
    const index_t ns[] = {1, 2, 3, nr / 2 - 1, nr / 2, nr - 1};  // (NR = 8 for doubles in AVX2)
    const index_t ks[] = {4 * W, 4 * W + 1, 1000, 20007};
    int pick = 0;
    for (index_t m : ms)
      for (index_t n : ns)
        for (index_t k : ks) {
          if (n > nr / 2 && m > mr) continue;
          if (m * k > 200000 && n != 3) continue;  // a few shapes only
          ++pick;
          const T alpha = pick % 2 ? T(1) : T(-0.5), beta = pick % 3 ? T(0) : T(1.5);
          INFO("m " << m << " n " << n << " k " << k << " alpha " << alpha << " beta " << beta);
          auto a = make_operand<S>(m, k, layout_kind::row_major, std::uint32_t(pick));
          auto b = make_operand<S>(k, n, layout_kind::column_major, std::uint32_t(pick + 100));
          auto c = make_operand<T>(m, n, all_layouts[pick % 4], std::uint32_t(pick + 200));
          if (beta == T(0)) c.view = std::numeric_limits<T>::quiet_NaN();  // must be ignored
          REQUIRE(cpu_eval::gemm_dot_fits<T>(ref_of(a.view), ref_of(b.view), n, k));
          const auto want = [&] {
            if constexpr (decltype(rounded)::value) {
              auto as_bf16 = [](const auto& v) {
                return tensor<T>(meld::cast<T>(meld::cast<meld::bfloat16>(v)));
              };
              return expected_gemm<T>(alpha, as_bf16(a.view), as_bf16(b.view), beta, c.view);
            } else {
              return expected_gemm<T>(alpha, a.view, b.view, beta, c.view);
            }
          }();
          tensor<T> c0 = c.storage.clone();
          meld::set_num_threads(1);
          cpu_eval::gemm_dot<Read>(alpha, ref_of(a.view), ref_of(b.view), beta,
                                   mutable_ref_of(c.view), 1);
          check_within(c.view, want);
          tensor<T> one = c.storage.clone();
          for (int threads : {2, 3}) {  // the same bits on more threads
            meld::set_num_threads(threads);
            meld::copy(c.storage, c0);
            cpu_eval::gemm_dot<Read>(alpha, ref_of(a.view), ref_of(b.view), beta,
                                     mutable_ref_of(c.view), threads);
            REQUIRE(std::memcmp(c.storage.data(), one.data(),
                                sizeof(T) * std::size_t(one.size())) == 0);
          }
        }
  };
  using std::type_identity;
  SECTION("float") {
    run(0.f, 0.f, type_identity<cpu_eval::read_as_stored<float>>{}, std::false_type{});
  }
  SECTION("double") {
    run(0.0, 0.0, type_identity<cpu_eval::read_as_stored<double>>{}, std::false_type{});
  }
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  SECTION("bfloat16 operands, multiplied in pairs (vdpbf16ps)") {
    run(0.f, meld::bfloat16(), type_identity<cpu_eval::bf16_operand_read>{}, std::false_type{});
  }
  SECTION("float operands rounded to bfloat16 as they are read, multiplied in pairs") {
    run(0.f, 0.f, type_identity<cpu_eval::bf16_operand_read>{}, std::true_type{});
  }
  SECTION("a bfloat16 product takes that path where the kernels' tiles would be mostly empty") {
    // The weight gradient of the convolution 1 -> 20, 3 x 3, in nn::precision::bfloat16.
    auto g = test::random_tensor<float>({20, 2 * 676 + 5}, 43);
    auto col = test::random_tensor<float>({9, 2 * 676 + 5}, 44);
#if defined(MELD_DETAIL_AMX)
    REQUIRE(cpu_eval::bf16_dot_products_fit<cpu_eval::bf16_amx_kernel>(
        ref_of(g.view()), ref_of(col.transpose()), 9, g.shape()[1]));
#endif
    REQUIRE(cpu_eval::bf16_dot_products_fit<cpu_eval::bf16_dot_kernel>(
        ref_of(g.view()), ref_of(col.transpose()), 9, g.shape()[1]));
    tensor<float> dw({20, 9});
    meld::gemm(1.f, meld::cast<meld::bfloat16>(g), meld::cast<meld::bfloat16>(col.transpose()), 0.f,
               dw);
    auto as_bf16 = [](const auto& v) {
      return tensor<float>(meld::cast<float>(meld::cast<meld::bfloat16>(v)));
    };
    check_within(dw, expected_gemm<float>(1, as_bf16(g), as_bf16(col.transpose()), 0, dw));
  }
#endif
  SECTION("matmul takes that path and gives the naive loop's result") {
    // A convolution's weight gradient, 1 -> 20 channels, 3 x 3: 9 columns where vectors hold 16
    // floats (NR = 64), 4 where they hold 8.
    const index_t n = std::min<index_t>(9, cpu_eval::gemm_tile<float>::nr / 4);
    auto g = test::random_tensor<float>({20, 2 * 676 + 5}, 41);
    auto col = test::random_tensor<float>({n, 2 * 676 + 5}, 42);
    REQUIRE(
        cpu_eval::gemm_dot_fits<float>(ref_of(g.view()), ref_of(col.transpose()), n, g.shape()[1]));
    tensor<float> dw = meld::matmul(g, col.transpose());
    check_within(dw, expected_gemm<float>(1, g, col.transpose(), 0, dw));
  }
}
