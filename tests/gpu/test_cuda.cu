// What only the CUDA backend has: half and bfloat16 storage with float math (tensor-core
// products), its allocation errors, and the operations it runs on host copies (host_kernel:
// indexing, scans, sorts), against the CPU's results. Everything else the backends share runs in
// the backend-generic suites compiled for cuda<sync> and cuda<async> (test_cuda_core,
// test_cuda_elementwise, test_cuda_reduce, test_cuda_exec). Compiled always; runs where a GPU is
// present (else: skipped).
#include <cstdint>
#include <vector>

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
