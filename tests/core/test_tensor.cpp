#include "../support.hpp"

using meld::shape_t;
using meld::tensor;

TEST_CASE("construction from a braced shape zero-fills", "[core]") {
  tensor<float> t({2, 3});
  REQUIRE(t.rank() == 2);
  REQUIRE(t.size() == 6);
  REQUIRE(t.shape() == shape_t{2, 3});
  REQUIRE(t.shape().size() == 2);
  REQUIRE(t.shape()[1] == 3);
  REQUIRE(t.strides() == meld::dims{3, 1});
  for (float v : t) REQUIRE(v == 0.f);
  REQUIRE(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);

  tensor<double> big({1 << 20});
  REQUIRE(reinterpret_cast<std::uintptr_t>(big.data()) % 64 == 0);
  REQUIRE(meld::sum(big) == 0.0);

  tensor<std::int32_t> i({4});
  tensor<std::int64_t> l({2, 2, 2});
  REQUIRE(i.size() == 4);
  REQUIRE(l.rank() == 3);
}

TEST_CASE("rank 0, empty and rank 8 tensors", "[core]") {
  tensor<float> scalar{shape_t{}};
  REQUIRE(scalar.rank() == 0);
  REQUIRE(scalar.size() == 1);
  scalar() = 4.f;
  REQUIRE(scalar.item() == 4.f);

  tensor<float> empty;
  REQUIRE(empty.shape() == shape_t{0});
  REQUIRE(empty.size() == 0);
  REQUIRE(empty.empty());

  tensor<float> zero_extent({3, 0, 2});
  REQUIRE(zero_extent.size() == 0);
  zero_extent = zero_extent + 1.f;  // nothing to do, no crash
  REQUIRE(zero_extent.shape() == shape_t{3, 0, 2});

  tensor<float> r8({1, 2, 1, 2, 1, 2, 1, 2});
  REQUIRE(r8.rank() == 8);
  r8(0, 1, 0, 1, 0, 1, 0, 1) = 3.f;
  REQUIRE(meld::sum(r8) == 3.f);
  REQUIRE_THROWS_AS(tensor<float>({1, 1, 1, 1, 1, 1, 1, 1, 1}), meld::shape_error);
}

TEST_CASE("copies are explicit and deep", "[core]") {
  STATIC_REQUIRE(std::is_constructible_v<tensor<float>, const tensor<float>&>);
  STATIC_REQUIRE_FALSE(std::is_convertible_v<const tensor<float>&, tensor<float>>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<tensor<float>>);

  tensor<float> a({3});
  a(0) = 1.f;
  tensor<float> b(a);
  tensor<float> c = a.clone();
  b(0) = 5.f;
  REQUIRE(a(0) == 1.f);
  REQUIRE(c(0) == 1.f);
  REQUIRE(b.data() != a.data());

  // Assignment copies values and takes the shape of the right-hand side.
  tensor<float> d({7, 7});
  d = a;
  REQUIRE(d.shape() == shape_t{3});
  REQUIRE(d(0) == 1.f);
  const float* storage = d.data();
  d = b;  // same shape: storage is reused
  REQUIRE(d.data() == storage);
  REQUIRE(d(0) == 5.f);

  tensor<float> moved(std::move(d));
  REQUIRE(moved(0) == 5.f);
  REQUIRE(d.shape() == shape_t{0});  // NOLINT: a moved-from tensor is empty
}

TEST_CASE("assignment from expressions and scalars", "[core]") {
  tensor<float> x = meld::arange<float>(4.f);
  tensor<float> y({2, 2});
  y = 3.f;  // a number fills, keeping the shape
  REQUIRE(y.shape() == shape_t{2, 2});
  REQUIRE(meld::sum(y) == 12.f);
  y = x * 2.f;  // an expression gives its shape
  REQUIRE(y.shape() == shape_t{4});
  REQUIRE(y(3) == 6.f);
  y += x;
  REQUIRE(y(3) == 9.f);
  y -= 1.f;
  y *= x;
  y /= 2.f;
  REQUIRE(y(3) == Approx((9.f - 1.f) * 3.f / 2.f));
  REQUIRE_THROWS_AS(y += tensor<float>({2, 4}), meld::shape_error);  // would change y's shape
  tensor<double> converted(x);  // converts elementwise (explicitly: it copies)
  STATIC_REQUIRE_FALSE(std::is_convertible_v<const tensor<float>&, tensor<double>>);
  REQUIRE(converted(2) == 2.0);
  tensor<std::int32_t> ints = meld::cast<std::int32_t>(x * 1.5f);
  REQUIRE(ints(3) == 4);
}

TEST_CASE("element access is checked", "[core]") {
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

TEST_CASE("factories", "[core]") {
  auto z = meld::zeros<double>({2, 2});
  auto o = meld::ones<float>({3});
  auto f = meld::full<std::int32_t>({2}, 7);
  REQUIRE(meld::sum(z) == 0.0);
  REQUIRE(meld::sum(o) == 3.f);
  REQUIRE(f(1) == 7);

  auto a = meld::arange<float>(1.f, 2.f, 0.25f);
  REQUIRE(a.size() == 4);
  REQUIRE(a(3) == 1.75f);
  auto down = meld::arange<std::int64_t>(5, 0, -2);
  REQUIRE(down.size() == 3);
  REQUIRE(down(2) == 1);
  REQUIRE(meld::arange<float>(3.f, 1.f).size() == 0);
  REQUIRE_THROWS_AS(meld::arange<float>(0.f, 1.f, 0.f), meld::shape_error);

  auto l = meld::linspace<double>(0.0, 1.0, 5);
  REQUIRE(l.size() == 5);
  REQUIRE(l(1) == 0.25);
  REQUIRE(l(4) == 1.0);
  REQUIRE(meld::linspace<float>(2.f, 3.f, 1)(0) == 2.f);
  REQUIRE(meld::linspace<float>(2.f, 3.f, 0).size() == 0);
}

TEST_CASE("an impossible allocation throws a clear error", "[core]") {
  // 2^61 floats: the size is representable but no machine has the memory.
  const std::string msg = test::message_of<meld::allocation_error>([] {
    tensor<float> t({1 << 20, 1 << 20, 1 << 21});
  });
  INFO(msg);
  REQUIRE(msg.find("tensor<float32> of shape {1048576, 1048576, 2097152}") != std::string::npos);
  REQUIRE(msg.find("cannot allocate") != std::string::npos);
  REQUIRE_THROWS_AS(tensor<float>({-3}), meld::shape_error);
}
