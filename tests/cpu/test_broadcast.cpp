// Numpy broadcasting on random shape pairs, and assignments whose source overlaps the destination.
#include "../support.hpp"

using meld::all;
using meld::index_t;
using meld::range;
using meld::shape_t;
using meld::tensor;
using test::at;
using test::check_elements;
using test::index_list;

TEST_CASE("200 random broadcast shape pairs match a naive loop", "[cpu]") {
  std::mt19937 gen(2024);
  for (int trial = 0; trial < 200; ++trial) {
    const shape_t out = test::random_shape(gen, 0, 5, 6);
    const shape_t sa = test::broadcastable_from(gen, out), sb = test::broadcastable_from(gen, out);
    const shape_t expected = meld::broadcast_shapes(sa, sb, "test");
    INFO("trial " << trial << ": " << sa << " with " << sb);
    auto a = test::random_tensor<float>(sa, trial * 2 + 1);
    auto b = test::random_tensor<float>(sb, trial * 2 + 2);
    tensor<float> r = a * b - meld::exp(b) / 4.f;
    REQUIRE(r.shape() == expected);
    check_elements(
        r, [&](const index_list& i) { return at(a, i) * at(b, i) - std::exp(at(b, i)) / 4.f; });
    tensor<double> m = meld::where(a > b, meld::cast<double>(a), 0.0);
    check_elements(
        m, [&](const index_list& i) { return at(a, i) > at(b, i) ? double(at(a, i)) : 0.0; });
  }
}

TEST_CASE("broadcasting into a view and mixed element types", "[cpu]") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 50; ++trial) {
    const shape_t out = test::random_shape(gen, 1, 4, 5);
    const shape_t sa = test::broadcastable_from(gen, out);
    auto a = test::random_tensor<std::int32_t>(sa, trial + 300, -50, 50);
    auto d = test::random_tensor<double>(out, trial + 400);
    tensor<double> dst(out);
    dst.view() = a * 0.5 + d;  // int32 * double scalar -> double
    check_elements(
        dst, [&](const index_list& i) { return at(a, i) * 0.5 + at(d, i); }, 1e-12);
  }
}

TEST_CASE("in-place updates read each element before writing it", "[cpu]") {
  auto x = meld::arange<float>(100000.f);
  x = x + 1.f;
  REQUIRE(x(99999) == 100000.f);
  x *= x;
  REQUIRE(x(3) == 16.f);
  x.slice(range(0, 100000, 2)) += 1.f;
  REQUIRE(x(2) == 10.f);
  REQUIRE(x(3) == 16.f);
}

TEST_CASE("overlapping sources are evaluated through a temporary", "[cpu]") {
  SECTION("x = transpose(x)") {
    auto x = test::random_tensor<float>({64, 64}, 3);
    tensor<float> ref = x.transpose();
    x = x.transpose();
    check_elements(
        x, [&](const index_list& i) { return at(ref, i); }, 0);
    auto y = test::random_tensor<double>({37, 37}, 4);
    tensor<double> yref = y.transpose() + y;
    y.view() = y.transpose() + y;
    check_elements(
        y, [&](const index_list& i) { return at(yref, i); }, 0);
  }
  SECTION("shifted slices of one array") {
    auto a = meld::arange<float>(1000.f);
    a.slice(range(1, 1000)) = a.slice(range(0, 999));  // a[1:] = a[:-1]
    REQUIRE(a(0) == 0.f);
    REQUIRE(a(1) == 0.f);
    REQUIRE(a(999) == 998.f);
    auto b = meld::arange<float>(1000.f);
    b.slice(range(0, 999)) = b.slice(range(1, 1000)) * 2.f;
    REQUIRE(b(0) == 2.f);
    REQUIRE(b(998) == 1998.f);
    REQUIRE(b(999) == 999.f);
  }
  SECTION("a reversed view of itself") {
    auto a = meld::arange<std::int64_t>(1001);
    a.view() = a.slice(range::every(-1));
    REQUIRE(a(0) == 1000);
    REQUIRE(a(1000) == 0);
    REQUIRE(a(500) == 500);
  }
  SECTION("a broadcast of one of its own elements") {
    auto a = meld::arange<float>(1.f, 9.f);
    a.view() = a / a.slice(range(0, 1));  // every element divided by the original a[0]
    REQUIRE(a(7) == 8.f);
    auto m = meld::arange<float>(12.f).reshape({3, 4});
    tensor<float> copy(m);
    auto mv = m.view();
    mv = mv - mv.slice(range(0, 1), all);  // subtract the first row from every row
    check_elements(
        m,
        [&](const index_list& i) {
          return at(copy, i) - at(copy, {0, i[1]});
        },
        0);
  }
}
