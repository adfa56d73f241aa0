// What only the CUDA backend has: half and bfloat16 storage with float math (tensor-core
// products), and its allocation errors. Everything else the backends share runs in the
// backend-generic suites compiled for cuda<sync> and cuda<async> (test_cuda_core,
// test_cuda_elementwise, test_cuda_reduce, test_cuda_exec). Compiled always; runs where a GPU is
// present (else: skipped).
#include "../support.hpp"

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

}  // namespace

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
