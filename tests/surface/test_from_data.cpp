// Building tensors from data: literals (nested initializer lists), copies of ranges and spans,
// borrowed views of the caller's memory, and class template argument deduction from expressions.
// References: the literal values themselves, read back through host copies.
#include <array>
#include <list>
#include <span>
#include <vector>

#include "../backends.hpp"

using meld::shape_t;
using meld::tensor;

namespace {

// The elements of x (any backend) in row-major order.
template <class X>
auto elements(const X& x) {
  const auto h = test::host(x);
  return std::vector<meld::value_t<decltype(h)>>(h.begin(), h.end());
}

// The message of the shape_error that f throws ("" if none).
template <class F>
std::string shape_error_of(F&& f) {
  try {
    f();
  } catch (const meld::shape_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BACKEND_TEST_CASE("tensor literals take their shape from nested initializer lists", "[surface]") {
  const tensor<float, B> v = meld::from_range<float, B>({1, 2.5, -3});
  REQUIRE(v.shape() == shape_t{3});
  REQUIRE(elements(v) == std::vector<float>{1, 2.5f, -3});
  const auto one = meld::from_range<std::int32_t, B>({7}, shape_t{1, 1});
  REQUIRE(one.shape() == shape_t{1, 1});
  REQUIRE(elements(one) == std::vector<std::int32_t>{7});
  const tensor<float, B> column{{1}, {2}};
  REQUIRE(column.shape() == shape_t{2, 1});

  const tensor<float, B> m{{1, 2, 3}, {4, 5, 6}};
  REQUIRE(m.shape() == shape_t{2, 3});
  REQUIRE(elements(m) == std::vector<float>{1, 2, 3, 4, 5, 6});
  const tensor<std::int64_t, B> c = {{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}, {{9, 10}, {11, 12}}};
  REQUIRE(c.shape() == shape_t{3, 2, 2});
  REQUIRE(elements(c) == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const tensor<double, B> r4{{{{1, 2}}}, {{{3, 4}}}};  // innermost lists of 2: not ambiguous
  REQUIRE(r4.shape() == shape_t{2, 1, 1, 2});
  REQUIRE(elements(r4) == std::vector<double>{1, 2, 3, 4});

  // A braced shape in parentheses is still a shape.
  const tensor<float, B> z({2, 3});
  REQUIRE(z.shape() == shape_t{2, 3});
  REQUIRE(elements(z) == std::vector<float>(6, 0.f));
  const tensor<std::int32_t, B> zi({4});
  REQUIRE(zi.shape() == shape_t{4});
}

BACKEND_TEST_CASE("ragged tensor literals are an error naming the axis", "[surface]") {
  const std::string two = shape_error_of([] { tensor<float, B> t{{1, 2}, {3, 4}, {5}}; });
  REQUIRE(two.find("ragged initializer list: along axis 1 the list at [2] has 1 elements where "
                   "the first has 2") != std::string::npos);
  const std::string three = shape_error_of([] {
    tensor<float, B> t{{{1, 2}, {3, 4}}, {{5, 6}, {7}}};
  });
  REQUIRE(three.find("along axis 2 the list at [1, 1] has 1 elements where the first has 2") !=
          std::string::npos);
  const std::string rows = shape_error_of([] { tensor<float, B> t{{{1, 1}}, {{2, 2}, {3, 3}}}; });
  REQUIRE(rows.find("along axis 1 the list at [1] has 2 elements where the first has 1") !=
          std::string::npos);
}

BACKEND_TEST_CASE("from_range and from_span copy the caller's values", "[surface]") {
  std::vector<double> v{1.5, -2, 3, 4, 5, 6};
  const tensor<double, B> a = meld::from_range<void, B>(v);
  REQUIRE(a.shape() == shape_t{6});
  REQUIRE(elements(a) == v);
  const std::list<int> l{1, 2, 3, 4, 5, 6};
  const tensor<float, B> b = meld::from_range<float, B>(l, shape_t{2, 3});
  REQUIRE(b.shape() == shape_t{2, 3});
  REQUIRE(elements(b) == std::vector<float>{1, 2, 3, 4, 5, 6});
  v[0] = 100;  // a copy: the tensor does not change
  REQUIRE(elements(a)[0] == 1.5);

  const std::array<std::int32_t, 4> arr{4, 3, 2, 1};
  const tensor<std::int32_t, B> c = meld::from_span<B>(std::span(arr), shape_t{2, 2});
  REQUIRE(c.shape() == shape_t{2, 2});
  REQUIRE(elements(c) == std::vector<std::int32_t>{4, 3, 2, 1});
  const float raw[3] = {1, 2, 3};
  const auto d = meld::from_span<B>(std::span(raw, 3));
  STATIC_REQUIRE(std::is_same_v<decltype(d), const tensor<float, B>>);
  REQUIRE(elements(d) == std::vector<float>{1, 2, 3});

  REQUIRE(shape_error_of([&] {
            (void)meld::from_range<float, B>(l, shape_t{4, 2});
          }) == "from_range: 6 values cannot fill shape {4, 2} (8 elements)");
  REQUIRE(shape_error_of([&] { (void)meld::from_span<B>(std::span(raw, 3), shape_t{2}); }) ==
          "from_span: 3 values cannot fill shape {2} (2 elements)");
}

BACKEND_TEST_CASE("tensor t = expression deduces the element type and backend", "[surface]") {
  const auto a = meld::from_range<float, B>({1, 2, 3});
  const auto b = meld::from_range<float, B>({10, 20, 30});
  meld::tensor t = a + b;
  STATIC_REQUIRE(std::is_same_v<decltype(t), tensor<float, B>>);
  REQUIRE(elements(t) == std::vector<float>{11, 22, 33});
  meld::tensor u = meld::sqrt(a * a) * 2.0;  // a double scalar is weak: float stays
  STATIC_REQUIRE(std::is_same_v<decltype(u), tensor<float, B>>);
  REQUIRE(elements(u) == std::vector<float>{2, 4, 6});
  const auto i = meld::from_range<std::int32_t, B>({1, 2, 3});
  meld::tensor w = i * 0.5;  // a floating scalar with integers: its floating type
  STATIC_REQUIRE(std::is_same_v<decltype(w), tensor<double, B>>);
  REQUIRE(elements(w) == std::vector<double>{0.5, 1, 1.5});
}

TEST_CASE("borrow views the caller's memory without copying", "[surface]") {
  std::vector<float> mem{0, 1, 2, 3, 4, 5};
  auto v = meld::borrow(mem.data(), {2, 3});
  STATIC_REQUIRE(std::is_same_v<decltype(v), meld::tensor_view<float>>);
  REQUIRE(v.shape() == shape_t{2, 3});
  REQUIRE(v(1, 2) == 5);
  v += 10.f;  // writes the caller's memory
  REQUIRE(mem == std::vector<float>{10, 11, 12, 13, 14, 15});
  const tensor<float> twice = v * 2.f;
  REQUIRE(twice(0, 1) == 22);
  // Strides in elements: a column-major (Fortran) reading of the same memory.
  const auto f = meld::borrow(static_cast<const float*>(mem.data()), {3, 2}, meld::strides_t{1, 3});
  STATIC_REQUIRE(std::is_same_v<decltype(f), const meld::tensor_view<const float>>);
  REQUIRE(f(2, 0) == 12);
  REQUIRE(f(0, 1) == 13);
  const tensor<float> t = f.transpose();  // equals v
  REQUIRE(std::equal(t.begin(), t.end(), mem.begin()));
  // Through cpu<async>: queued work reads the caller's memory; wait() before it goes away.
  {
    std::vector<double> m2{1, 2, 3, 4};
    auto a = meld::borrow<meld::cpu<meld::async>>(m2.data(), {4});
    a = a * a;
    a.wait();
    REQUIRE(m2 == std::vector<double>{1, 4, 9, 16});
  }
  REQUIRE(shape_error_of([] { (void)meld::borrow(static_cast<float*>(nullptr), {2}); }) ==
          "borrow: a null pointer for shape {2}");
  REQUIRE(shape_error_of([&] {
            (void)meld::borrow(mem.data(), {2, 3}, meld::strides_t{1});
          }) == "borrow: strides {1} do not match the rank of shape {2, 3}");
  REQUIRE(meld::borrow(static_cast<float*>(nullptr), {0, 3}).size() == 0);
}
