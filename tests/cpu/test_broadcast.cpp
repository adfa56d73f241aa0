// Numpy broadcasting on random shape pairs, and assignments whose source overlaps the destination,
// on every backend (operands copied from host tensors, which give the reference values).
#include "../backends.hpp"

using meld::index_t;
using meld::range;  // (meld::all stays qualified: nvcc declares a global all(bool))
using meld::shape_t;
using meld::tensor;
using test::at;
using test::check_elements;
using test::index_list;

BACKEND_TEST_CASE("200 random broadcast shape pairs match a naive loop", "[broadcast]") {
  std::mt19937 gen(2024);
  for (int trial = 0; trial < 200; ++trial) {
    const shape_t out = test::random_shape(gen, 0, 5, 6);
    const shape_t sa = test::broadcastable_from(gen, out), sb = test::broadcastable_from(gen, out);
    const shape_t expected = meld::broadcast_shapes(sa, sb, "test");
    INFO("trial " << trial << ": " << sa << " with " << sb);
    const auto ha = test::random_tensor<float>(sa, trial * 2 + 1);
    const auto hb = test::random_tensor<float>(sb, trial * 2 + 2);
    const auto a = test::on<B>(ha), b = test::on<B>(hb);
    tensor<float, B> r = a * b - meld::exp(b) / 4.f;
    REQUIRE(r.shape() == expected);
    check_elements(
        r, [&](const index_list& i) { return at(ha, i) * at(hb, i) - std::exp(at(hb, i)) / 4.f; });
    tensor<double, B> m = meld::where(a > b, meld::cast<double>(a), 0.0);
    check_elements(
        m, [&](const index_list& i) { return at(ha, i) > at(hb, i) ? double(at(ha, i)) : 0.0; });
  }
}

BACKEND_TEST_CASE("broadcasting into a view and mixed element types", "[broadcast]") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 50; ++trial) {
    const shape_t out = test::random_shape(gen, 1, 4, 5);
    const shape_t sa = test::broadcastable_from(gen, out);
    const auto ha = test::random_tensor<std::int32_t>(sa, trial + 300, -50, 50);
    const auto hd = test::random_tensor<double>(out, trial + 400);
    const auto a = test::on<B>(ha);
    const auto d = test::on<B>(hd);
    tensor<double, B> dst(out);
    dst.view() = a * 0.5 + d;  // int32 * double scalar -> double
    check_elements(
        dst, [&](const index_list& i) { return at(ha, i) * 0.5 + at(hd, i); }, 1e-12);
  }
}

BACKEND_TEST_CASE("in-place updates read each element before writing it", "[broadcast]") {
  auto x = meld::arange<float, B>(100000.f);
  x = x + 1.f;
  REQUIRE(test::host(x)(99999) == 100000.f);
  x *= x;
  REQUIRE(test::host(x)(3) == 16.f);
  x.slice(range(0, 100000, 2)) += 1.f;
  const auto hx = test::host(x);
  REQUIRE(hx(2) == 10.f);
  REQUIRE(hx(3) == 16.f);
}

BACKEND_TEST_CASE("overlapping sources are evaluated through a temporary", "[broadcast]") {
  SECTION("x = transpose(x)") {
    const auto hx = test::random_tensor<float>({64, 64}, 3);
    auto x = test::on<B>(hx);
    const tensor<float> ref = hx.transpose();
    x = x.transpose();
    check_elements(
        x, [&](const index_list& i) { return at(ref, i); }, 0);
    const auto hy = test::random_tensor<double>({37, 37}, 4);
    auto y = test::on<B>(hy);
    const tensor<double> yref = hy.transpose() + hy;
    y.view() = y.transpose() + y;
    check_elements(
        y, [&](const index_list& i) { return at(yref, i); }, 0);
  }
  SECTION("shifted slices of one array") {
    auto a = meld::arange<float, B>(1000.f);
    a.slice(range(1, 1000)) = a.slice(range(0, 999));  // a[1:] = a[:-1]
    const auto ha = test::host(a);
    REQUIRE(ha(0) == 0.f);
    REQUIRE(ha(1) == 0.f);
    REQUIRE(ha(999) == 998.f);
    auto b = meld::arange<float, B>(1000.f);
    b.slice(range(0, 999)) = b.slice(range(1, 1000)) * 2.f;
    const auto hb = test::host(b);
    REQUIRE(hb(0) == 2.f);
    REQUIRE(hb(998) == 1998.f);
    REQUIRE(hb(999) == 999.f);
  }
  SECTION("a reversed view of itself") {
    auto a = meld::arange<std::int64_t, B>(1001);
    a.view() = a.slice(range::every(-1));
    const auto ha = test::host(a);
    REQUIRE(ha(0) == 1000);
    REQUIRE(ha(1000) == 0);
    REQUIRE(ha(500) == 500);
  }
  SECTION("a broadcast of one of its own elements") {
    auto a = meld::arange<float, B>(1.f, 9.f);
    a.view() = a / a.slice(range(0, 1));  // every element divided by the original a[0]
    REQUIRE(test::host(a)(7) == 8.f);
    auto m = meld::arange<float, B>(12.f).reshape({3, 4});
    const tensor<float> copy = test::host(m);
    auto mv = m.view();
    mv = mv - mv.slice(range(0, 1), meld::all);  // subtract the first row from every row
    check_elements(
        m,
        [&](const index_list& i) {
          return at(copy, i) - at(copy, {0, i[1]});
        },
        0);
  }
}
