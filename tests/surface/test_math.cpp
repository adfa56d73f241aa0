// The missing math (clip, floor / ceil / round, isnan / isinf / isfinite, var / std, logsumexp,
// norm, cumsum / cumprod, sort / argsort / topk) on every backend: hand-checked values, var's one
// pass against two passes in double on data where the naive formula cancels, and a random
// differential test against numpy (tests/surface/math_reference.py) over shapes, strided views,
// axes and NaN / Inf placement.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../backends.hpp"

namespace fs = std::filesystem;
using meld::index_t;
using meld::shape_t;
using meld::tensor;

namespace {

template <class X>
auto elements(const X& x) {
  const auto h = test::host(x);
  return std::vector<meld::value_t<decltype(h)>>(h.begin(), h.end());
}

[[maybe_unused]] bool have_numpy() {
  static const bool yes = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return yes;
}

const float nan_f = std::numeric_limits<float>::quiet_NaN();
const float inf_f = std::numeric_limits<float>::infinity();

// The variance of v with two passes in double (the mean, then the squared deviations from it).
double two_pass_var(const std::vector<double>& v, int ddof) {
  double mean = 0, ss = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) ss += (x - mean) * (x - mean);
  return ss / static_cast<double>(static_cast<index_t>(v.size()) - ddof);
}

// The textbook one-pass formula (sum(x^2) - n mean^2) / (n - ddof), in double.
double naive_var(const std::vector<double>& v, int ddof) {
  double s = 0, s2 = 0;
  for (double x : v) s += x, s2 += x * x;
  const double n = static_cast<double>(v.size());
  return (s2 - s * s / n) / (n - ddof);
}

// The elements of a host tensor or view along `axis`, one list per output (in row-major order of
// the other axes).
template <class X>
std::vector<std::vector<double>> lines_along(const X& h, int axis) {
  shape_t outer = h.shape();
  outer.erase(axis);
  std::vector<std::vector<double>> lines;
  test::for_each_index(outer, [&](const test::index_list& o) {
    test::index_list i = o;
    i.insert(i.begin() + axis, 0);
    std::vector<double> line;
    for (index_t k = 0; k < h.shape()[axis]; ++k) {
      i[static_cast<std::size_t>(axis)] = k;
      line.push_back(static_cast<double>(test::at(h, i)));
    }
    lines.push_back(std::move(line));
  });
  return lines;
}

template <class X>
std::vector<double> all_elements(const X& h) {
  std::vector<double> v;
  test::for_each_index(h.shape(),
                       [&](const test::index_list& i) { v.push_back(double(test::at(h, i))); });
  return v;
}

double relative(double got, double want) {
  return std::abs(got - want) / std::abs(want);
}

}  // namespace

SYNC_BACKEND_TEST_CASE("rounding, clip and classification elementwise", "[surface]") {
  const auto x = meld::from_range<float, B>({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.7, -2.7});
  REQUIRE(elements(meld::round(x)) == std::vector<float>{-2, -2, -0, 0, 2, 2, 3, -3});
  REQUIRE(elements(meld::floor(x)) == std::vector<float>{-3, -2, -1, 0, 1, 2, 2, -3});
  REQUIRE(elements(meld::ceil(x)) == std::vector<float>{-2, -1, -0, 1, 2, 3, 3, -2});
  const auto i = meld::from_range<std::int32_t, B>({-7, 3});
  meld::tensor ri = meld::round(i);  // integers keep their type and value
  STATIC_REQUIRE(std::is_same_v<decltype(ri), tensor<std::int32_t, B>>);
  REQUIRE(elements(ri) == std::vector<std::int32_t>{-7, 3});

  const auto y = meld::from_range<float, B>({nan_f, inf_f, -inf_f, 0, -5, 5});
  const auto c = elements(meld::clip(y, -1.f, 2.f));
  REQUIRE(std::isnan(c[0]));
  REQUIRE(std::vector<float>(c.begin() + 1, c.end()) == std::vector<float>{2, -1, 0, -1, 2});
  REQUIRE(elements(meld::cast<std::int32_t>(meld::isnan(y))) ==
          std::vector<std::int32_t>{1, 0, 0, 0, 0, 0});
  REQUIRE(elements(meld::cast<std::int32_t>(meld::isinf(y))) ==
          std::vector<std::int32_t>{0, 1, 1, 0, 0, 0});
  REQUIRE(elements(meld::cast<std::int32_t>(meld::isfinite(y))) ==
          std::vector<std::int32_t>{0, 0, 0, 1, 1, 1});
  // Fused: one expression, NaN replaced by 0.
  const tensor<float, B> cleaned = meld::where(meld::isnan(y), 0.f, meld::clip(y, -1.f, 1.f));
  REQUIRE(elements(cleaned) == std::vector<float>{0, 1, -1, 0, -1, 1});
}

BACKEND_TEST_CASE("var, std, logsumexp and norm: closed forms", "[surface]") {
  // A large mean against a small spread: sum(x^2) - n mean^2 would lose every digit in float.
  const auto x = meld::from_range<float, B>({1e6f + 1, 1e6f + 2, 1e6f + 3, 1e6f + 4});
  REQUIRE(meld::var(x) == 1.25f);
  REQUIRE(meld::var(x, 1) == Approx(5.0 / 3.0).epsilon(1e-6));
  REQUIRE(meld::std(x) == Approx(std::sqrt(1.25)).epsilon(1e-6));
  const auto m = meld::from_range<double, B>({1, 2, 3, 4, 6, 8}, shape_t{2, 3});
  REQUIRE(elements(meld::var(m, 1, false)) == std::vector<double>{2.0 / 3.0, 8.0 / 3.0});
  REQUIRE(meld::var(meld::from_range<std::int32_t, B>({1, 2})) == 0.25);  // integers: double

  const auto big = meld::from_range<float, B>({1000, 1000});
  REQUIRE(meld::logsumexp(big) == Approx(1000 + std::log(2.0)));
  REQUIRE(meld::logsumexp(meld::from_range<float, B>({-inf_f, -inf_f})) == -inf_f);
  REQUIRE(meld::logsumexp(meld::from_range<float, B>({inf_f, 1})) == inf_f);
  const auto rows = meld::from_range<double, B>({0, 0, 1000, -inf_f}, shape_t{2, 2});
  const auto l = elements(meld::logsumexp(rows, 1));
  REQUIRE(l[0] == Approx(std::log(2.0)));
  REQUIRE(l[1] == 1000);

  const auto v = meld::from_range<double, B>({3, -4});
  REQUIRE(meld::norm(v) == 5);
  REQUIRE(meld::norm(v, 1) == 7);
  REQUIRE(meld::norm(v, std::numeric_limits<double>::infinity()) == 4);
  REQUIRE_THROWS_WITH(meld::norm(v, 3), "norm: ord 3 is not 1, 2 or infinity");
  REQUIRE_THROWS_WITH(meld::var(v, 2), "var: ddof 2 is out of range for 2 elements");
}

// var reads the data once (Welford lanes in double merged with Chan's formula); a naive one-pass
// formula would cancel. Floats 10^6 + uniform(-1, 1) (kappa = |mean| / std = 1.7e6), n odd, against
// two passes in double: (sum(x^2) - n mean^2) / n misses this var (0.334) by a factor of 10 in
// double (3.70) and of 1.7e5 in float (55563), and by 0.6 - 1 % along the axes (1000 elements a
// line) in double, as the REQUIREs on the naive formula show. One pass stays within float's
// rounding: 1.3e-8 over every element, at most 1.8e-7 along the axes (std's rounding, squared).
BACKEND_TEST_CASE("var and std in one pass where sum(x^2) - n mean^2 cancels", "[surface]") {
  constexpr double tol = 1e-6;  // the result's float rounding is 6e-8
  std::mt19937 gen(33);
  std::uniform_real_distribution<double> spread(-1, 1);
  auto around_1e6 = [&](const shape_t& s) {
    tensor<float> h(s, meld::uninitialized);
    for (float& v : h) v = static_cast<float>(1e6 + spread(gen));
    return h;
  };
  const index_t n = 1'000'003;
  const tensor<float> h = around_1e6({n});
  const auto x = test::on<B>(h);
  const std::vector<double> all(h.begin(), h.end());
  const double want = two_pass_var(all, 0);
  REQUIRE(relative(naive_var(all, 0), want) > 1);
  float s = 0, s2 = 0;
  for (float v : h) s += v, s2 += v * v;
  REQUIRE(relative((double(s2) - double(s) * s / double(n)) / double(n), want) > 1e4);
  REQUIRE(relative(meld::var(x), want) <= tol);
  REQUIRE(relative(meld::var(x, 1), two_pass_var(all, 1)) <= tol);
  REQUIRE(relative(meld::std(x), std::sqrt(want)) <= tol);
  const auto every_third = x.slice(meld::range(1, n, 3));
  REQUIRE(relative(meld::var(every_third),
                   two_pass_var(all_elements(h.slice(meld::range(1, n, 3))), 0)) <= tol);

  // Along each axis of a matrix and of its views: contiguous, transposed, strided and reversed,
  // and a few strided columns (fewer outputs than the output-major path takes).
  const tensor<float> hm = around_1e6({999, 1001});
  const auto m = test::on<B>(hm);
  const auto check = [&](const auto& view, const auto& host_view, const char* what) {
    INFO(what << ", shape " << view.shape());
    REQUIRE(relative(meld::var(view), two_pass_var(all_elements(host_view), 0)) <= tol);
    for (const long axis : {0L, -1L}) {
      const int a = axis < 0 ? view.rank() - 1 : 0;
      const int ddof = a;
      const auto want_lines = lines_along(host_view, a);
      const tensor<float> got = test::host(meld::var(view, axis, false, ddof));
      const tensor<float> got_std = test::host(meld::std(view, axis, true, ddof));
      shape_t kept = view.shape();
      kept[a] = 1;
      REQUIRE(got_std.shape() == kept);
      REQUIRE(got.size() == static_cast<index_t>(want_lines.size()));
      double worst = 0, worst_naive = 0;
      for (index_t o = 0; o < got.size(); ++o) {
        const double w = two_pass_var(want_lines[static_cast<std::size_t>(o)], ddof);
        worst = std::max({worst, relative(got.data()[o], w),
                          relative(double(got_std.data()[o]) * got_std.data()[o], w)});
        worst_naive = std::max(
            worst_naive, relative(naive_var(want_lines[static_cast<std::size_t>(o)], ddof), w));
      }
      INFO("axis " << axis << ": worst relative error " << worst << " (naive formula "
                   << worst_naive << ")");
      REQUIRE(worst <= tol);
      REQUIRE(worst_naive > 100 * tol);
    }
  };
  check(m, hm, "contiguous");
  check(m.transpose(), hm.transpose(), "transposed");
  check(m.slice(meld::range(0, 999, 2), meld::range(1000, 0, -3)),
        hm.slice(meld::range(0, 999, 2), meld::range(1000, 0, -3)), "strided, reversed");
  check(m.slice(meld::all, meld::range(0, 1001, 20)), hm.slice(meld::all, meld::range(0, 1001, 20)),
        "strided columns");
}

BACKEND_TEST_CASE("var and std: ddof, one element, empty, NaN and infinities as numpy",
                  "[surface]") {
  const auto one = meld::from_range<float, B>({5});
  REQUIRE(meld::var(one) == 0.f);
  REQUIRE(meld::std(one) == 0.f);
  REQUIRE_THROWS_WITH(meld::var(one, 1), "var: ddof 1 is out of range for 1 elements");
  const tensor<float, B> empty({0});
  REQUIRE(std::isnan(meld::var(empty)));  // numpy: nan (0 / 0), with a warning
  REQUIRE(std::isnan(meld::std(empty)));
  REQUIRE_THROWS_WITH(meld::var(empty, 1), "var: ddof 1 is out of range for 0 elements");
  const tensor<double, B> no_columns({3, 0});
  const auto e = elements(meld::var(no_columns, 1, false));
  REQUIRE(e.size() == 3);
  REQUIRE(std::isnan(e[0]));
  REQUIRE(meld::var(no_columns, 0, true).shape() == shape_t{1, 0});
  REQUIRE(meld::var(meld::from_range<std::int32_t, B>({1, 2, 3, 4}), 1) == Approx(5.0 / 3.0));

  // NaN, or an infinity (inf - inf in the deviations, as numpy computes them), gives NaN; the
  // other outputs keep their values. Rows of 100: the SIMD steps and the scalar tail.
  auto h = test::random_tensor<double>({4, 100}, 9, -1, 1);
  h(1, 37) = std::numeric_limits<double>::quiet_NaN();
  h(2, 99) = std::numeric_limits<double>::infinity();
  h(3, 3) = -std::numeric_limits<double>::infinity();
  h(3, 60) = std::numeric_limits<double>::infinity();
  const auto x = test::on<B>(h);
  const auto rows = elements(meld::var(x, 1, false));
  REQUIRE(rows[0] == Approx(two_pass_var(lines_along(h, 1)[0], 0)).epsilon(1e-12));
  REQUIRE((std::isnan(rows[1]) && std::isnan(rows[2]) && std::isnan(rows[3])));
  const auto columns = elements(meld::var(x, 0, false));  // output-major
  for (index_t c = 0; c < 100; ++c)
    REQUIRE(std::isnan(columns[static_cast<std::size_t>(c)]) ==
            (c == 37 || c == 99 || c == 3 || c == 60));
  REQUIRE(std::isnan(meld::var(x)));
  REQUIRE(std::isnan(meld::var(x.slice(meld::range(3, 4)))));
  REQUIRE(std::isnan(meld::var(meld::from_range<float, B>({inf_f}))));
  REQUIRE(std::isnan(meld::std(meld::from_range<float, B>({1, nan_f}))));
}

BACKEND_TEST_CASE("cumsum widens int32, sort puts NaN last, topk orders ties by position",
                  "[surface]") {
  const auto i = meld::from_range<std::int32_t, B>({2000000000, 2000000000, -5}, shape_t{1, 3});
  meld::tensor s = meld::cumsum(i, 1);
  STATIC_REQUIRE(std::is_same_v<decltype(s), tensor<std::int64_t, B>>);
  REQUIRE(elements(s) == std::vector<std::int64_t>{2000000000, 4000000000, 3999999995});
  REQUIRE(elements(meld::cumprod(meld::from_range<float, B>({1, 2, 3, 4}), 0)) ==
          std::vector<float>{1, 2, 6, 24});
  const auto y = meld::from_range<float, B>({3, nan_f, 1, 3, -inf_f});
  const auto sorted = elements(meld::sort(y));
  REQUIRE(std::vector<float>(sorted.begin(), sorted.end() - 1) ==
          std::vector<float>{-inf_f, 1, 3, 3});
  REQUIRE(std::isnan(sorted.back()));
  REQUIRE(elements(meld::argsort(y)) == std::vector<std::int64_t>{4, 2, 0, 3, 1});
  const auto top = meld::topk(y, 3);
  REQUIRE(elements(top.indices) == std::vector<std::int64_t>{1, 0, 3});
  const auto low = meld::topk(y, 2, 0, false);
  REQUIRE(elements(low.values) == std::vector<float>{-inf_f, 1});
  REQUIRE_THROWS_WITH(meld::topk(y, 6), "topk: k = 6 is out of range for axis 0 of shape {5}");
}

SYNC_BACKEND_TEST_CASE("numpy agrees on random shapes, views, axes and NaN / Inf", "[surface]") {
  if (!have_numpy()) {
    WARN("/usr/bin/python3 has no numpy: the differential math test is skipped");
    return;
  }
  const fs::path dir = fs::temp_directory_path() /
                       (std::string("meld_math_") + B::name +
                        (test::is_async<B> ? "_async_" : "_sync_") + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream manifest(dir / "manifest.txt");
  std::mt19937 gen(33);
  int id = 0;
  auto run_case = [&](auto tag) {
    using T = decltype(tag);
    const shape_t base = test::random_shape(gen, 1, 3, 6);
    auto h = test::random_tensor<T>(base, static_cast<std::uint32_t>(gen()), -4, 4);
    if constexpr (std::is_floating_point_v<T>) {
      if (gen() % 3 == 0)
        for (int k = 0; k < 2; ++k) {
          const T specials[] = {std::numeric_limits<T>::quiet_NaN(),
                                std::numeric_limits<T>::infinity(),
                                -std::numeric_limits<T>::infinity()};
          h.data()[gen() % static_cast<std::uint32_t>(h.size())] = specials[gen() % 3];
        }
    }
    const auto d = test::on<B>(h);
    // The operand: the tensor, its transpose, or every other element of the first axis.
    const int view_kind = static_cast<int>(gen() % 3);
    auto run = [&](const auto& x) {
      const std::string name = "c" + std::to_string(id++);
      meld::save_npy(dir / (name + "_in.npy"), x);
      const int rank = x.rank();
      const long axis =
          static_cast<long>(gen() % static_cast<unsigned>(rank)) - (gen() % 2 ? rank : 0);
      const auto out = dir / (name + "_out.npy");
      const char* ops_float[] = {"clip",     "floor", "ceil",    "round",     "isnan", "isinf",
                                 "isfinite", "var",   "std",     "logsumexp", "norm",  "cumsum",
                                 "cumprod",  "sort",  "argsort", "topk"};
      const char* ops_int[] = {"clip", "var", "norm", "cumsum", "sort", "argsort", "topk"};
      const std::string op =
          std::is_floating_point_v<T> ? ops_float[gen() % 16] : ops_int[gen() % 7];
      std::string p1 = "0", p2 = "0", ax = std::to_string(axis);
      const bool all = gen() % 3 == 0;  // a reduction over every element
      if (op == "clip") {
        meld::save_npy(out, tensor<T, B>(meld::clip(x, T(-1), T(2))));
        ax = "none";
        p1 = "-1";
        p2 = "2";
      } else if (op == "floor") {
        meld::save_npy(out, tensor<T, B>(meld::floor(x)));
      } else if (op == "ceil") {
        meld::save_npy(out, tensor<T, B>(meld::ceil(x)));
      } else if (op == "round") {
        meld::save_npy(out, tensor<T, B>(meld::round(x)));
      } else if (op == "isnan") {
        meld::save_npy(out, tensor<std::int32_t, B>(meld::cast<std::int32_t>(meld::isnan(x))));
      } else if (op == "isinf") {
        meld::save_npy(out, tensor<std::int32_t, B>(meld::cast<std::int32_t>(meld::isinf(x))));
      } else if (op == "isfinite") {
        meld::save_npy(out, tensor<std::int32_t, B>(meld::cast<std::int32_t>(meld::isfinite(x))));
      } else if (op == "var" || op == "std") {
        const int ddof = static_cast<int>(gen() % 2);
        if (x.shape()[static_cast<int>(axis < 0 ? axis + rank : axis)] <= ddof ||
            x.size() <= ddof) {
          --id;
          return;
        }
        p1 = std::to_string(ddof);
        if (all) {
          ax = "none";
          const auto v = op == "var" ? meld::var(x, ddof) : meld::std(x, ddof);
          meld::save_npy(out, meld::full<std::remove_const_t<decltype(v)>>(shape_t{}, v));
        } else {
          meld::save_npy(
              out, op == "var" ? meld::var(x, axis, false, ddof) : meld::std(x, axis, false, ddof));
        }
      } else if (op == "logsumexp") {
        if constexpr (std::is_floating_point_v<T>) {
          if (all) {
            ax = "none";
            meld::save_npy(out, meld::full<T>(shape_t{}, meld::logsumexp(x)));
          } else {
            meld::save_npy(out, meld::logsumexp(x, axis));
          }
        }
      } else if (op == "norm") {
        const double ords[] = {1, 2, std::numeric_limits<double>::infinity()};
        const double ord = ords[gen() % 3];
        p1 = std::isinf(ord) ? "inf" : std::to_string(static_cast<int>(ord));
        if (all) {
          ax = "none";
          const auto v = meld::norm(x, ord);
          meld::save_npy(out, meld::full<std::remove_const_t<decltype(v)>>(shape_t{}, v));
        } else {
          meld::save_npy(out, meld::norm(x, ord, axis));
        }
      } else if (op == "cumsum") {
        meld::save_npy(out, meld::cumsum(x, axis));
      } else if (op == "cumprod") {
        meld::save_npy(out, meld::cumprod(x, axis));
      } else if (op == "sort") {
        meld::save_npy(out, meld::sort(x, axis));
      } else if (op == "argsort") {
        meld::save_npy(out, meld::argsort(x, axis));
      } else {
        const index_t n = x.shape()[static_cast<int>(axis < 0 ? axis + rank : axis)];
        const index_t k = static_cast<index_t>(gen() % static_cast<unsigned>(n + 1));
        const bool largest = gen() % 2;
        const auto r = meld::topk(x, k, axis, largest);
        meld::save_npy(out, r.values);
        meld::save_npy(dir / (name + "_idx.npy"), r.indices);
        p1 = std::to_string(k);
        p2 = largest ? "1" : "0";
      }
      manifest << name << ' ' << op << ' ' << ax << ' ' << p1 << ' ' << p2 << '\n';
    };
    if (view_kind == 0)
      run(d);
    else if (view_kind == 1)
      run(d.transpose());
    else
      run(d.slice(meld::range(0, base[0], 2)));
  };
  for (int i = 0; i < 60; ++i) run_case(float{});
  for (int i = 0; i < 40; ++i) run_case(double{});
  for (int i = 0; i < 20; ++i) run_case(std::int32_t{});
  for (int i = 0; i < 20; ++i) run_case(std::int64_t{});
  manifest.close();
  const std::string cmd =
      std::string("/usr/bin/python3 ") + MELD_MATH_REFERENCE + " " + dir.string();
  const int rc = std::system(cmd.c_str());
  fs::remove_all(dir);
  REQUIRE(rc == 0);
}
