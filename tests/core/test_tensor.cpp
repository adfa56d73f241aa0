// Tensors: construction, copies, assignment, factories and allocation errors on every backend
// (reference values from host copies); element access, iteration and data() alignment on the
// host; meld::to round trips between each backend and the host.
#include "../backends.hpp"

using meld::range;
using meld::shape_t;
using meld::tensor;
using test::index_list;

namespace {

// Whether B is one of the simulated devices.
template <class B>
inline constexpr bool is_sim = std::is_same_v<B, meld::sim<typename B::policy>>;

// h copied to B and back: the same shape, and exactly the same elements.
template <class B, class T>
void check_round_trip(const tensor<T>& h) {
  INFO("shape " << h.shape());
  const tensor<T, B> d = meld::to<B>(h);
  REQUIRE(d.shape() == h.shape());
  REQUIRE(d.is_contiguous());
  const tensor<T> back = meld::to<meld::cpu<>>(d);
  REQUIRE(back.shape() == h.shape());
  REQUIRE(std::equal(h.begin(), h.end(), back.begin(), back.end()));
}

template <class B, class T>
void check_round_trips(std::uint32_t seed) {
  check_round_trip<B>(test::random_tensor<T>({3, 5, 7}, seed, -100, 100));
  check_round_trip<B>(test::random_tensor<T>({1000}, seed + 1, -100, 100));
  check_round_trip<B>(test::random_tensor<T>(shape_t{}, seed + 2, -100, 100));  // rank 0
  check_round_trip<B>(tensor<T>());                                             // {0}
  check_round_trip<B>(tensor<T>({3, 0, 2}));
}

}  // namespace

BACKEND_TEST_CASE("construction from a braced shape zero-fills", "[core]") {
  tensor<float, B> t({2, 3});
  REQUIRE(t.rank() == 2);
  REQUIRE(t.size() == 6);
  REQUIRE(t.shape() == shape_t{2, 3});
  REQUIRE(t.shape().size() == 2);
  REQUIRE(t.shape()[1] == 3);
  REQUIRE(t.strides() == meld::dims{3, 1});
  for (float v : test::host(t)) REQUIRE(v == 0.f);

  tensor<double, B> big({1 << 20});
  REQUIRE(test::value(meld::sum(big)) == 0.0);

  tensor<std::int32_t, B> i({4});
  tensor<std::int64_t, B> l({2, 2, 2});
  REQUIRE(i.size() == 4);
  REQUIRE(l.rank() == 3);
}

HOST_TEST_CASE("host tensors are aligned to 64 bytes", "[core]") {
  tensor<float> t({2, 3});
  REQUIRE(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
  tensor<double> big({1 << 20});
  REQUIRE(reinterpret_cast<std::uintptr_t>(big.data()) % 64 == 0);
}

BACKEND_TEST_CASE("rank 0, empty and rank 8 tensors", "[core]") {
  tensor<float, B> scalar{shape_t{}};
  REQUIRE(scalar.rank() == 0);
  REQUIRE(scalar.size() == 1);
  scalar = 4.f;
  REQUIRE(test::host(scalar).item() == 4.f);
  REQUIRE(test::value(meld::sum(scalar)) == 4.f);

  tensor<float, B> empty;
  REQUIRE(empty.shape() == shape_t{0});
  REQUIRE(empty.size() == 0);
  REQUIRE(empty.empty());

  tensor<float, B> zero_extent({3, 0, 2});
  REQUIRE(zero_extent.size() == 0);
  zero_extent = zero_extent + 1.f;  // nothing to do, no crash
  REQUIRE(zero_extent.shape() == shape_t{3, 0, 2});

  tensor<float, B> r8({1, 2, 1, 2, 1, 2, 1, 2});
  REQUIRE(r8.rank() == 8);
  r8.slice(0, 1, 0, 1, 0, 1, 0, 1) = 3.f;  // a rank-0 view of one element
  REQUIRE(test::value(meld::sum(r8)) == 3.f);
  REQUIRE(test::host(r8)(0, 1, 0, 1, 0, 1, 0, 1) == 3.f);
  REQUIRE_THROWS_AS((tensor<float, B>({1, 1, 1, 1, 1, 1, 1, 1, 1})), meld::shape_error);
}

HOST_TEST_CASE("element access of rank 0 and rank 8 host tensors", "[core]") {
  tensor<float> scalar{shape_t{}};
  scalar() = 4.f;
  REQUIRE(scalar.item() == 4.f);
  tensor<float> r8({1, 2, 1, 2, 1, 2, 1, 2});
  r8(0, 1, 0, 1, 0, 1, 0, 1) = 3.f;
  REQUIRE(meld::sum(r8) == 3.f);
}

BACKEND_TEST_CASE("copies are explicit and deep", "[core]") {
  STATIC_REQUIRE(std::is_constructible_v<tensor<float, B>, const tensor<float, B>&>);
  STATIC_REQUIRE_FALSE(std::is_convertible_v<const tensor<float, B>&, tensor<float, B>>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<tensor<float, B>>);

  tensor<float, B> a({3});
  a.slice(range(0, 1)) = 1.f;
  tensor<float, B> b(a);
  tensor<float, B> c = a.clone();
  b.slice(range(0, 1)) = 5.f;
  REQUIRE(test::host(a)(0) == 1.f);
  REQUIRE(test::host(c)(0) == 1.f);
  REQUIRE(b.raw_data() != a.raw_data());

  // Assignment copies values and takes the shape of the right-hand side.
  tensor<float, B> d({7, 7});
  d = a;
  REQUIRE(d.shape() == shape_t{3});
  REQUIRE(test::host(d)(0) == 1.f);
  const float* storage = d.raw_data();
  d = b;  // same shape: storage is reused
  REQUIRE(d.raw_data() == storage);
  REQUIRE(test::host(d)(0) == 5.f);

  tensor<float, B> moved(std::move(d));
  REQUIRE(test::host(moved)(0) == 5.f);
  REQUIRE(d.shape() == shape_t{0});  // NOLINT: a moved-from tensor is empty
}

BACKEND_TEST_CASE("assignment from expressions and scalars", "[core]") {
  tensor<float, B> x = meld::arange<float, B>(4.f);
  tensor<float, B> y({2, 2});
  y = 3.f;  // a number fills, keeping the shape
  REQUIRE(y.shape() == shape_t{2, 2});
  REQUIRE(test::value(meld::sum(y)) == 12.f);
  y = x * 2.f;  // an expression gives its shape
  REQUIRE(y.shape() == shape_t{4});
  REQUIRE(test::host(y)(3) == 6.f);
  y += x;
  REQUIRE(test::host(y)(3) == 9.f);
  y -= 1.f;
  y *= x;
  y /= 2.f;
  REQUIRE(test::host(y)(3) == Approx((9.f - 1.f) * 3.f / 2.f));
  REQUIRE_THROWS_AS((y += tensor<float, B>({2, 4})), meld::shape_error);  // would change y's shape
  tensor<double, B> converted(x);  // converts elementwise (explicitly: it copies)
  STATIC_REQUIRE_FALSE(std::is_convertible_v<const tensor<float, B>&, tensor<double, B>>);
  REQUIRE(test::host(converted)(2) == 2.0);
  tensor<std::int32_t, B> ints = meld::cast<std::int32_t>(x * 1.5f);
  REQUIRE(test::host(ints)(3) == 4);
}

HOST_TEST_CASE("element access is checked", "[core]") {
  tensor<float> t({2, 3});
  t(1, 2) = 7.f;
  REQUIRE(t(1, 2) == 7.f);
  REQUIRE(t(-1, -1) == 7.f);
  REQUIRE_THROWS_AS(t(2, 0), meld::index_error);
  REQUIRE_THROWS_WITH(t(0, 3),
                      "element access: index 3 is out of range for axis 1 of shape {2, 3}");
  REQUIRE_THROWS_WITH(t(0), "element access: 1 indices for a tensor of rank 2 {2, 3}");
  REQUIRE_THROWS_AS(t.item(), meld::shape_error);
  const tensor<float>& ct = t;
  STATIC_REQUIRE(std::is_same_v<decltype(ct(0, 0)), const float&>);
}

BACKEND_TEST_CASE("factories", "[core]") {
  auto z = meld::zeros<double, B>({2, 2});
  auto o = meld::ones<float, B>({3});
  auto f = meld::full<std::int32_t, B>({2}, 7);
  REQUIRE(test::value(meld::sum(z)) == 0.0);
  REQUIRE(test::value(meld::sum(o)) == 3.f);
  REQUIRE(test::host(f)(1) == 7);

  auto a = meld::arange<float, B>(1.f, 2.f, 0.25f);
  REQUIRE(a.size() == 4);
  REQUIRE(test::host(a)(3) == 1.75f);
  auto down = meld::arange<std::int64_t, B>(5, 0, -2);
  REQUIRE(down.size() == 3);
  REQUIRE(test::host(down)(2) == 1);
  REQUIRE(meld::arange<float, B>(3.f, 1.f).size() == 0);
  REQUIRE_THROWS_AS((meld::arange<float, B>(0.f, 1.f, 0.f)), meld::shape_error);

  auto l = meld::linspace<double, B>(0.0, 1.0, 5);
  REQUIRE(l.size() == 5);
  const auto hl = test::host(l);
  REQUIRE(hl(1) == 0.25);
  REQUIRE(hl(4) == 1.0);
  REQUIRE(test::host(meld::linspace<float, B>(2.f, 3.f, 1))(0) == 2.f);
  REQUIRE(meld::linspace<float, B>(2.f, 3.f, 0).size() == 0);
}

BACKEND_TEST_CASE("an impossible allocation throws a clear error", "[core]") {
  // 2^61 floats: the size is representable but no machine has the memory.
  const std::string msg = test::message_of<meld::allocation_error>([] {
    tensor<float, B> t({1 << 20, 1 << 20, 1 << 21});
  });
  INFO(msg);
  REQUIRE(msg.find("tensor<float32> of shape {1048576, 1048576, 2097152}") != std::string::npos);
  REQUIRE(msg.find("cannot allocate") != std::string::npos);
  REQUIRE_THROWS_AS((tensor<float, B>({-3})), meld::shape_error);
}

BACKEND_TEST_CASE("meld::to copies between the backend and the host", "[core]") {
  check_round_trips<B, float>(1);
  check_round_trips<B, double>(11);
  check_round_trips<B, std::int32_t>(21);
  check_round_trips<B, std::int64_t>(31);

  // A view of device memory (strided, then broadcast) comes back as the same view of the host's.
  const auto h = test::random_tensor<float>({4, 6}, 41);
  const auto d = test::on<B>(h);
  test::check_elements(
      meld::to<meld::cpu<>>(d.transpose().slice(range(1, 6, 2))),
      [&](const index_list& i) { return test::at(h.transpose().slice(range(1, 6, 2)), i); }, 0);
  test::check_elements(
      d.slice(range(1, 2)).broadcast_to({3, 4, 6}),
      [&](const index_list& i) { return test::at(h.slice(range(1, 2)), i); }, 0);

  if constexpr (is_sim<B>) {
    // On another device: created there, copied back from there.
    meld::device_guard<B> on(1);
    const auto d1 = test::on<B>(h);
    REQUIRE(d1.device() == 1);
    const tensor<float> back = meld::to<meld::cpu<>>(d1);
    REQUIRE(std::equal(h.begin(), h.end(), back.begin(), back.end()));
  }

  if constexpr (is_sim<B>) {
    // Each direction is one counted transfer of the tensor's bytes; nothing between devices.
    const auto hd = test::random_tensor<double>({5, 7}, 42);
    meld::synchronize();  // no queued work of an earlier case may count here
    meld::reset_sim_transfers();
    const auto dd = meld::to<B>(hd);
    const tensor<double> back = meld::to<meld::cpu<>>(dd);
    const meld::transfer_counts n = meld::sim_transfers();
    REQUIRE(n.to_device_calls == 1);
    REQUIRE(n.to_device_bytes == 35 * sizeof(double));
    REQUIRE(n.to_host_calls == 1);
    REQUIRE(n.to_host_bytes == 35 * sizeof(double));
    REQUIRE(n.device_to_device_calls == 0);
    REQUIRE(n.device_to_device_bytes == 0);
    REQUIRE(std::equal(hd.begin(), hd.end(), back.begin(), back.end()));
  }
}
