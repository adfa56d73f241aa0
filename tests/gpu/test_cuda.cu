// What only the CUDA backend has: half and bfloat16 storage with float math (tensor-core
// products), its allocation errors, the operations it runs on host copies (host_kernel:
// indexing, scans, sorts), against the CPU's results, and var's one-pass kernels against two
// passes in double. Everything else the backends share runs in
// the backend-generic suites compiled for cuda<sync> and cuda<async> (test_cuda_core,
// test_cuda_elementwise, test_cuda_reduce, test_cuda_exec; cuda<async> alone on the emulated device
// and in CI's compile check, so this file is cuda<sync>'s). Compiled always; runs where a GPU is
// present (else: skipped).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../support.hpp"

using meld::index_t;
using meld::tensor;
using gpu = meld::cuda<meld::sync>;

namespace {

template <class T, class B>
tensor<T> host(const tensor<T, B>& t) {
  return meld::to<meld::cpu<>>(t);
}

template <class T>
void require_close(const tensor<T>& got, const tensor<T>& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  test::for_each_index(want.shape(), [&](const test::index_list& i) {
    const double g = double(test::at(got, i)), w = double(test::at(want, i));
    if (std::isnan(w))
      REQUIRE(std::isnan(g));
    else
      REQUIRE(g == Approx(w).epsilon(tol).margin(tol));
  });
}

// The variance along `axis` of a host tensor or view, one value per output (in row-major order of
// the other axes), with two passes in double.
template <class X>
std::vector<double> two_pass_var(const X& h, int axis, int ddof) {
  meld::shape_t outer = h.shape();
  outer.erase(axis);
  std::vector<double> out;
  test::for_each_index(outer, [&](const test::index_list& o) {
    test::index_list i = o;
    i.insert(i.begin() + axis, 0);
    const index_t n = h.shape()[axis];
    double mean = 0, ss = 0;
    for (i[std::size_t(axis)] = 0; i[std::size_t(axis)] < n; ++i[std::size_t(axis)])
      mean += double(test::at(h, i));
    mean /= double(n);
    for (i[std::size_t(axis)] = 0; i[std::size_t(axis)] < n; ++i[std::size_t(axis)])
      ss += (double(test::at(h, i)) - mean) * (double(test::at(h, i)) - mean);
    out.push_back(ss / double(n - ddof));
  });
  return out;
}

}  // namespace

// var and std read the device data once: a Welford partial per thread, merged by CUB with Chan's
// formula (over every element) or a segment's elements merged the same way (along an axis). Floats
// around 10^6 with a spread of 1, where sum(x^2) - n mean^2 cancels (tests/surface/test_math.cpp
// has the numbers), against two passes in double on the host.
TEST_CASE("var and std in one pass match two passes in double", "[gpu]") {
  constexpr double tol = 1e-6;  // the result's float rounding is 6e-8
  std::mt19937 gen(33);
  std::uniform_real_distribution<double> spread(-1, 1);
  auto around_1e6 = [&](const meld::shape_t& s) {
    tensor<float> h(s, meld::uninitialized);
    for (float& v : h) v = static_cast<float>(1e6 + spread(gen));
    return h;
  };
  auto relative = [](double got, double want) { return std::abs(got - want) / want; };
  const tensor<float> h = around_1e6({1'000'003});
  const auto g = meld::to<gpu>(h);
  const double want = two_pass_var(h, 0, 0)[0];
  REQUIRE(relative(meld::var(g), want) <= tol);
  REQUIRE(relative(meld::var(g, 1), two_pass_var(h, 0, 1)[0]) <= tol);
  REQUIRE(relative(meld::std(g), std::sqrt(want)) <= tol);
  REQUIRE(relative(meld::var(meld::to<meld::cuda<meld::async>>(h)), want) <= tol);
  REQUIRE(relative(meld::var(g.slice(meld::range(1, 1'000'003, 3))),
                   two_pass_var(h.slice(meld::range(1, 1'000'003, 3)), 0, 0)[0]) <= tol);

  const tensor<float> hm = around_1e6({999, 1001});
  const auto gm = meld::to<gpu>(hm);
  auto check = [&](const auto& view, const auto& host_view) {
    INFO("shape " << view.shape());
    for (const int axis : {0, 1}) {
      const tensor<float> got = host(tensor<float, gpu>(meld::var(view, axis, axis == 1, axis)));
      const auto want_axis = two_pass_var(host_view, axis, axis);
      REQUIRE(got.size() == static_cast<index_t>(want_axis.size()));
      double worst = 0;
      for (index_t o = 0; o < got.size(); ++o)
        worst = std::max(worst, relative(got.data()[o], want_axis[std::size_t(o)]));
      INFO("axis " << axis << ": worst relative error " << worst);
      REQUIRE(worst <= tol);
    }
  };
  check(gm, hm);
  check(gm.transpose(), hm.transpose());
  check(gm.slice(meld::range(0, 999, 2), meld::range(1000, 0, -3)),
        hm.slice(meld::range(0, 999, 2), meld::range(1000, 0, -3)));

  // NaN or an infinity gives NaN, as numpy; an empty axis gives NaN (0 / 0).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(std::isnan(meld::var(meld::from_range<float, gpu>({1, nan, 3}))));
  REQUIRE(std::isnan(meld::var(meld::from_range<float, gpu>({1, inf, 3}))));
  REQUIRE(std::isnan(meld::var(tensor<float, gpu>({0}))));
  const tensor<float> rows = host(tensor<float, gpu>(meld::var(
      meld::from_range<float, gpu>({1, 2, 3, 4, inf, 6}, meld::shape_t{2, 3}), 1, false)));
  REQUIRE(rows(0) == Approx(2.0 / 3.0));
  REQUIRE(std::isnan(rows(1)));
  REQUIRE(std::isnan(host(tensor<float, gpu>(meld::var(tensor<float, gpu>({2, 0}), 1, false)))(0)));
  REQUIRE(meld::var(meld::from_range<std::int32_t, gpu>({1, 2, 3, 4})) == 1.25);
}

TEST_CASE("half and bfloat16 storage with float math", "[gpu]") {
  auto a = test::random_tensor<float>({64, 128}, 13, -1, 1),
       b = test::random_tensor<float>({128, 32}, 14, -1, 1);
  tensor<meld::half, gpu> ha = meld::cast<meld::half>(meld::to<gpu>(a));
  tensor<meld::half, gpu> hb = meld::cast<meld::half>(meld::to<gpu>(b));
  tensor<meld::bfloat16, gpu> ba = meld::cast<meld::bfloat16>(meld::to<gpu>(a));
  tensor<float, gpu> back = meld::cast<float>(ha) * 2.f;
  require_close(host(back), tensor<float>(a * 2.f), 2e-3);
  tensor<meld::half, gpu> hc = meld::matmul(ha, hb);
  require_close(host(tensor<float, gpu>(meld::cast<float>(hc))), tensor<float>(meld::matmul(a, b)),
                3e-2);
  tensor<float, gpu> bsum = meld::cast<float>(ba) + 1.f;
  require_close(host(bsum), tensor<float>(a + 1.f), 1e-2);
}

TEST_CASE("transfers round-trip and errors are clear", "[gpu]") {
  auto x = test::random_tensor<double>({1234}, 15);
  REQUIRE(meld::sum(host(meld::to<gpu>(x)) != x) == 0);
  auto gx = meld::to<gpu>(x);
  tensor<double, gpu> other({7});
  REQUIRE_THROWS_AS(gx + other, meld::shape_error);
  const std::string msg =
      test::message_of<meld::allocation_error>([] { tensor<float, gpu> huge({1LL << 50}); });
  INFO(msg);
  REQUIRE(msg.find("cannot allocate") != std::string::npos);
  REQUIRE(msg.find("free of") != std::string::npos);
}

// cuda<sync>: each operation synchronizes its stream, and a reduction to a scalar returns the value
// (the generic suites run cuda<async> on the emulated device and in CI's compile check).
TEST_CASE("cuda<sync> assigns, and reduces to scalar values", "[gpu]") {
  const auto hx = test::random_tensor<float>({3, 1000}, 21, -2, 2);
  const auto x = meld::to<gpu>(hx);
  tensor<float, gpu> y = 2.f * x + meld::exp(x);
  const tensor<float> hy = host(y);
  double sum = 0, mx = -1e30, mn = 1e30;
  for (index_t i = 0; i < hx.size(); ++i) {
    const double v = 2.0 * hx.data()[i] + std::exp(double(hx.data()[i]));
    REQUIRE(hy.data()[i] == Approx(v).epsilon(1e-5).margin(1e-6));
    sum += v, mx = std::max(mx, v), mn = std::min(mn, v);
  }
  const float s = meld::sum(y), m = meld::mean(y), hi = meld::max(y), lo = meld::min(y);
  REQUIRE(s == Approx(sum).epsilon(1e-5));
  REQUIRE(m == Approx(sum / double(hx.size())).epsilon(1e-5));
  REQUIRE(hi == Approx(mx).epsilon(1e-6));
  REQUIRE(lo == Approx(mn).epsilon(1e-6));
  REQUIRE_THROWS_AS(meld::max(tensor<float, gpu>({0})), meld::shape_error);
}

// Indexing, scans and sorts run through the CUDA executor's host_kernel (operands copied to the
// host and back): the same bits as the CPU backend, whose results tests/surface checks against
// numpy. Strided and offset views, an index tensor on the device, a write into a strided view.
TEST_CASE("indexing, scans and sorts match the CPU's", "[gpu]") {
  const auto base = test::random_tensor<float>({9, 14}, 17, -2, 2);
  const auto x = base.slice(meld::range(1, 9), meld::range(13, 0, -2));  // {8, 7}, strided
  const auto gbase = meld::to<gpu>(base);
  const auto gx = gbase.slice(meld::range(1, 9), meld::range(13, 0, -2));
  auto same = [](const auto& on_gpu, const auto& on_cpu) {
    const auto h = host(tensor<std::remove_const_t<meld::value_t<decltype(on_cpu)>>, gpu>(on_gpu));
    const tensor<std::remove_const_t<meld::value_t<decltype(on_cpu)>>> c(on_cpu);
    REQUIRE(h.shape() == c.shape());
    REQUIRE(meld::sum(h != c) == 0);
  };
  const tensor<std::int64_t> idx = meld::from_range(std::vector<std::int64_t>{5, 0, -1, 2, 5});
  const auto gidx = meld::to<gpu>(idx);
  same(meld::index_select(gx, 0, gidx), meld::index_select(x, 0, idx));
  same(meld::index_select(gx, 1, gidx), meld::index_select(x, 1, idx));
  const tensor<std::int32_t> along =
      meld::cast<std::int32_t>(meld::rng(3).integers<std::int64_t>({8, 4}, 0, 7));
  same(meld::take_along_axis(gx, meld::to<gpu>(along), 1), meld::take_along_axis(x, along, 1));
  same(meld::gather(gx, 1, meld::to<gpu>(along)), meld::gather(x, 1, along));
  const tensor<std::int32_t> cols =
      meld::cast<std::int32_t>(meld::rng(4).integers<std::int64_t>({8, 4}, 0, 5));
  const auto src = test::random_tensor<float>({8, 4}, 18);
  tensor<float> dst = meld::zeros<float>({8, 10});
  auto gdst = meld::to<gpu>(dst);
  meld::scatter_add(dst.slice(meld::all, meld::range(0, 10, 2)), 1, cols, src);
  meld::scatter_add(gdst.slice(meld::all, meld::range(0, 10, 2)), 1, meld::to<gpu>(cols),
                    meld::to<gpu>(src));
  same(gdst, dst);
  same(meld::masked_select(gx, gx > 0.f), meld::masked_select(x, x > 0.f));
  same(meld::cumsum(gx, 1), meld::cumsum(x, 1));
  same(meld::cumprod(gx, 0), meld::cumprod(x, 0));
  same(meld::sort(gx, 0), meld::sort(x, 0));
  same(meld::argsort(gx, 1), meld::argsort(x, 1));
  const auto gtop = meld::topk(gx, 3, 1);
  const auto top = meld::topk(x, 3, 1);
  same(gtop.values, top.values);
  same(gtop.indices, top.indices);
}
