// Printing: meld::to_string and operator<< on every backend, against layouts written out by hand
// from what numpy and PyTorch print for the same arrays.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "../backends.hpp"

using meld::shape_t;
using meld::tensor;

namespace {

// A host tensor of the shape holding the values in row-major order.
template <class T>
tensor<T> filled(const shape_t& shape, const std::vector<T>& values) {
  tensor<T> t(shape, meld::uninitialized);
  REQUIRE(static_cast<std::size_t>(t.size()) == values.size());
  std::copy(values.begin(), values.end(), t.begin());
  return t;
}

template <class B>
std::string label() {
  return std::string(B::name) + (test::is_async<B> ? "<async>" : "<sync>");
}

// The text of t on B without its header line.
template <class B, class T>
std::string body(const tensor<T>& h, meld::print_options opt = {}) {
  opt.header = false;
  return meld::to_string(test::on<B>(h), opt);
}

}  // namespace

BACKEND_TEST_CASE("to_string lays out floats as PyTorch does, with a header line", "[surface]") {
  const auto h = filled<float>({2, 3}, {1, 2.5f, -3, 4, 5, 6});
  const tensor<float, B> d = test::on<B>(h);
  REQUIRE(meld::to_string(d) == "tensor<float32, " + label<B>() +
                                    "> shape {2, 3}\n"
                                    "[[ 1.0000,  2.5000, -3.0000],\n"
                                    " [ 4.0000,  5.0000,  6.0000]]");
  std::ostringstream os;
  os << d;
  REQUIRE(os.str() == meld::to_string(d));
  // A view (a transpose, strided) is gathered on its device first.
  REQUIRE(meld::to_string(d.transpose()) == "tensor_view<float32, " + label<B>() +
                                                "> shape {3, 2}\n"
                                                "[[ 1.0000,  4.0000],\n"
                                                " [ 2.5000,  5.0000],\n"
                                                " [-3.0000,  6.0000]]");
  meld::print_options two;
  two.precision = 2;
  REQUIRE(body<B>(h, two) == "[[ 1.00,  2.50, -3.00],\n [ 4.00,  5.00,  6.00]]");
}

BACKEND_TEST_CASE("to_string writes integers, integral floats, scientific and non-finite values",
                  "[surface]") {
  REQUIRE(body<B>(filled<std::int32_t>({2, 3}, {0, 1, 2, 3, -40, 5})) ==
          "[[  0,   1,   2],\n [  3, -40,   5]]");
  REQUIRE(body<B>(filled<std::int64_t>({2}, {std::int64_t(1) << 40, -7})) ==
          "[1099511627776,            -7]");
  REQUIRE(body<B>(filled<double>({3}, {1, 2, -3})) == "[ 1.,  2., -3.]");
  REQUIRE(body<B>(filled<double>({2}, {1e-5, 1})) == "[1.0000e-05, 1.0000e+00]");
  REQUIRE(body<B>(filled<float>({2}, {1e9f, 2})) == "[1.0000e+09, 2.0000e+00]");
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(body<B>(filled<float>({4}, {std::nanf(""), inf, -inf, 1.5f})) ==
          "[   nan,    inf,   -inf, 1.5000]");
  REQUIRE(body<B>(filled<float>(shape_t{}, {3.5f})) == "3.5000");
  REQUIRE(meld::to_string(tensor<float, B>(shape_t{2, 0})) ==
          "tensor<float32, " + label<B>() + "> shape {2, 0}\n[]");
}

BACKEND_TEST_CASE("to_string separates the blocks of rank-3 tensors by a blank line", "[surface]") {
  REQUIRE(body<B>(filled<std::int32_t>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})) ==
          "[[[0, 1],\n  [2, 3]],\n\n [[4, 5],\n  [6, 7]]]");
}

BACKEND_TEST_CASE("to_string summarizes large tensors with ... and wraps long rows", "[surface]") {
  REQUIRE(body<B>(meld::arange<std::int64_t>(2000)) ==
          "[   0,    1,    2,  ..., 1997, 1998, 1999]");
  // {40, 40}: 1600 elements > 1000, each axis keeps 3 at each end.
  const tensor<std::int32_t> grid = meld::arange<std::int32_t>(1600).reshape({40, 40});
  REQUIRE(body<B>(grid) ==
          "[[   0,    1,    2,  ...,   37,   38,   39],\n"
          " [  40,   41,   42,  ...,   77,   78,   79],\n"
          " [  80,   81,   82,  ...,  117,  118,  119],\n"
          " ...,\n"
          " [1480, 1481, 1482,  ..., 1517, 1518, 1519],\n"
          " [1520, 1521, 1522,  ..., 1557, 1558, 1559],\n"
          " [1560, 1561, 1562,  ..., 1597, 1598, 1599]]");
  meld::print_options narrow;
  narrow.line_width = 20;
  REQUIRE(body<B>(meld::arange<std::int32_t>(12), narrow) ==
          "[ 0,  1,  2,  3,  4,\n  5,  6,  7,  8,  9,\n 10, 11]");
  // No line of a wrapped row is longer than the width (the numbers checked all appear).
  narrow.line_width = 33;
  const std::string text = body<B>(meld::arange<std::int32_t>(100), narrow);
  std::istringstream lines(text);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) REQUIRE(line.size() <= 33u);
  REQUIRE(count == 13);  // 8 elements per line: "[" or " ", then 8 of "dd," and 7 spaces: 32
  meld::print_options all;
  all.threshold = 1 << 20;
  REQUIRE(body<B>(meld::arange<std::int64_t>(2000), all).find("...") == std::string::npos);
}

HOST_TEST_CASE("to_string refuses options that make no sense", "[surface]") {
  meld::print_options bad;
  bad.precision = -1;
  try {
    (void)meld::to_string(tensor<float>({2}), bad);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    REQUIRE(std::string(e.what()).find("precision in [0, 30] (got -1)") != std::string::npos);
  }
}
