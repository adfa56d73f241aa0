// The CUDA backend against the CPU backend: every elementwise operation, broadcasting and views,
// reductions (whole and along axes), matrix products (float, double, half, bfloat16), transfers,
// ordering across streams, and errors. Compiled always; runs where a GPU is present (else: skip).
#include "../support.hpp"

using meld::index_t;
using meld::range;
using meld::shape_t;
using meld::tensor;
using gpu = meld::cuda<meld::sync>;
using gpu_async = meld::cuda<meld::async>;

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

}  // namespace

TEST_CASE("elementwise operations match the CPU", "[gpu]") {
  const shape_t shapes[] = {{1}, {1000}, {1 << 20}, {33, 65}, {4, 1, 7}, {0}};
  std::uint32_t seed = 1;
  for (const shape_t& s : shapes) {
    INFO("shape " << s);
    auto a = test::random_tensor<float>(s, seed++, -3, 3);
    auto b = test::random_tensor<float>(s, seed++, 0.5, 3);
    auto ga = meld::to<gpu>(a), gb = meld::to<gpu>(b);
    tensor<float, gpu> gr;
    gr = 2.f * ga + meld::exp(gb) - ga * gb;
    require_close(host(gr), tensor<float>(2.f * a + meld::exp(b) - a * b), 1e-5);
    gr = meld::where(ga > gb, meld::sqrt(gb), meld::tanh(ga)) / gb;
    require_close(host(gr), tensor<float>(meld::where(a > b, meld::sqrt(b), meld::tanh(a)) / b),
                  1e-5);
    gr = meld::maximum(ga, gb) + meld::minimum(ga, 0.f) + meld::abs(ga) + meld::relu(ga) +
         meld::sigmoid(ga);
    require_close(host(gr),
                  tensor<float>(meld::maximum(a, b) + meld::minimum(a, 0.f) + meld::abs(a) +
                                meld::relu(a) + meld::sigmoid(a)),
                  1e-5);
    gr = meld::pow(gb, ga) + meld::log(gb) + meld::sin(ga) * meld::cos(ga);
    require_close(host(gr),
                  tensor<float>(meld::pow(b, a) + meld::log(b) + meld::sin(a) * meld::cos(a)),
                  1e-4);
    tensor<std::int32_t, gpu> gi = meld::cast<std::int32_t>(ga * 10.f) / 3;
    require_close(host(gi), tensor<std::int32_t>(meld::cast<std::int32_t>(a * 10.f) / 3), 0);
  }
}

TEST_CASE("broadcasting, strided views and aliasing on the GPU", "[gpu]") {
  std::mt19937 gen(3);
  for (int trial = 0; trial < 50; ++trial) {
    const shape_t out = test::random_shape(gen, 1, 4, 6);
    const shape_t sa = test::broadcastable_from(gen, out), sb = test::broadcastable_from(gen, out);
    auto a = test::random_tensor<double>(sa, trial + 10),
         b = test::random_tensor<double>(sb, trial + 20);
    tensor<double, gpu> r = meld::to<gpu>(a) * meld::to<gpu>(b) + 1.0;
    require_close(host(r), tensor<double>(a * b + 1.0), 1e-12);
  }
  auto m = test::random_tensor<float>({64, 48}, 5);
  auto gm = meld::to<gpu>(m);
  tensor<float, gpu> t = gm.transpose().slice(range(0, 48, 3), range(63, 0, -2)) * 2.f;
  require_close(host(t),
                tensor<float>(m.transpose().slice(range(0, 48, 3), range(63, 0, -2)) * 2.f), 0);
  gm = gm.transpose().transpose() + gm;  // in place
  require_close(host(gm), tensor<float>(m * 2.f), 0);
  auto sq = test::random_tensor<float>({32, 32}, 6);
  auto gsq = meld::to<gpu>(sq);
  gsq = gsq.transpose();  // overlaps: through a temporary
  require_close(host(gsq), tensor<float>(sq.transpose()), 0);
}

TEST_CASE("reductions match the CPU", "[gpu]") {
  auto x = test::random_tensor<float>({1000, 37}, 7, -1, 1);
  auto gx = meld::to<gpu>(x);
  REQUIRE(double(meld::sum(gx)) == Approx(double(meld::sum(x))).margin(1e-3));
  REQUIRE(meld::max(gx * 2.f) == meld::max(x * 2.f));
  REQUIRE(meld::min(gx) == meld::min(x));
  REQUIRE(meld::argmax(gx) == meld::argmax(x));
  REQUIRE(meld::argmin(gx + 1.f) == meld::argmin(x + 1.f));
  REQUIRE(double(meld::dot(gx, gx)) == Approx(double(meld::dot(x, x))).epsilon(1e-5));
  REQUIRE(double(meld::mean(gx)) == Approx(double(meld::mean(x))).margin(1e-5));
  for (int axis : {0, 1, -1}) {
    INFO("axis " << axis);
    require_close(host(tensor<float, gpu>(meld::sum(gx, axis))), tensor<float>(meld::sum(x, axis)),
                  1e-4);
    require_close(host(tensor<float, gpu>(meld::max(gx, axis, true))),
                  tensor<float>(meld::max(x, axis, true)), 0);
    require_close(host(tensor<float, gpu>(meld::mean(gx * gx, axis))),
                  tensor<float>(meld::mean(x * x, axis)), 1e-5);
    require_close(host(tensor<std::int64_t, gpu>(meld::argmax(gx, axis))),
                  tensor<std::int64_t>(meld::argmax(x, axis)), 0);
  }
  // A softmax: reductions inside an expression.
  tensor<float, gpu> p = meld::exp(gx - meld::max(gx, 1, true));
  p /= meld::sum(p, 1, true);
  tensor<float> cp = meld::exp(x - meld::max(x, 1, true));
  cp /= meld::sum(cp, 1, true);
  require_close(host(p), cp, 1e-5);
  tensor<float, gpu> empty({0, 3});
  REQUIRE(meld::sum(empty) == 0.f);
  REQUIRE_THROWS_AS(meld::max(empty), meld::shape_error);
}

TEST_CASE("matrix products through cuBLAS", "[gpu]") {
  auto a = test::random_tensor<float>({130, 70}, 8), b = test::random_tensor<float>({70, 90}, 9);
  auto ga = meld::to<gpu>(a), gb = meld::to<gpu>(b);
  require_close(host(tensor<float, gpu>(meld::matmul(ga, gb))), tensor<float>(meld::matmul(a, b)),
                1e-4);
  require_close(host(tensor<float, gpu>(meld::matmul(gb.transpose(), ga.transpose()))),
                tensor<float>(meld::matmul(b.transpose(), a.transpose())), 1e-4);
  auto ad = test::random_tensor<double>({3, 20, 30}, 10),
       bd = test::random_tensor<double>({30, 10}, 11);
  require_close(host(tensor<double, gpu>(meld::matmul(meld::to<gpu>(ad), meld::to<gpu>(bd)))),
                tensor<double>(meld::matmul(ad, bd)), 1e-12);
  tensor<float, gpu> acc = meld::to<gpu>(meld::full<float>({70, 90}, 1.f));
  meld::gemm(2.f, ga.transpose(), meld::to<gpu>(test::random_tensor<float>({130, 90}, 12)), 1.f,
             acc);
  tensor<float> want = meld::full<float>({70, 90}, 1.f);
  meld::gemm(2.f, a.transpose(), test::random_tensor<float>({130, 90}, 12), 1.f, want);
  require_close(host(acc), want, 1e-3);
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

TEST_CASE("asynchronous work is ordered across streams by events", "[gpu]") {
  meld::cuda_stream s1, s2;
  tensor<float, gpu_async> a({1 << 22}), b({1 << 22});
  {
    meld::cuda_stream_guard g(s1);
    tensor<float, gpu_async> x({1 << 22});
    x = 1.f;
    for (int i = 0; i < 20; ++i) x = x * 1.5f + 1.f;  // enqueued on s1
    meld::cuda_stream_guard g2(s2);
    tensor<float, gpu_async> y({1 << 22});
    y = x * 2.f;  // on s2: waits for x's last write on s1
    tensor<float> hy = meld::to<meld::cpu<>>(y);
    float want = 1.f;
    for (int i = 0; i < 20; ++i) want = want * 1.5f + 1.f;
    REQUIRE(hy(123) == Approx(want * 2.f).epsilon(1e-6));
  }
  auto total = meld::sum(a + 1.f);
  STATIC_REQUIRE(std::is_same_v<decltype(total), meld::future<float>>);
  REQUIRE(total.get() == float(1 << 22));
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
