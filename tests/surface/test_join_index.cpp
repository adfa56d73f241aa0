// Joining (concatenate, stack, split) and indexing (index_select, gather / take_along_axis,
// scatter_add, masked_select) on every backend, against naive loops over host copies.
#include <random>
#include <vector>

#include "../backends.hpp"

using meld::index_t;
using meld::shape_t;
using meld::tensor;
using test::index_list;

namespace {

template <class T>
tensor<T> iota(const shape_t& shape, T start = 0) {
  tensor<T> t(shape, meld::uninitialized);
  T v = start;
  for (T& x : t) x = v++;
  return t;
}

// x at coords (a host tensor or view).
template <class X>
auto at(const X& x, const index_list& c) {
  index_t o = 0;
  for (int d = 0; d < x.rank(); ++d) o += c[static_cast<std::size_t>(d)] * x.strides()[d];
  return x.data()[o];
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BACKEND_TEST_CASE("concatenate joins tensors, views and expressions along any axis", "[surface]") {
  const auto ha = test::random_tensor<float>({2, 3, 4}, 1);
  const auto hb = test::random_tensor<float>({2, 5, 4}, 2);
  const auto a = test::on<B>(ha);
  const auto b = test::on<B>(hb);
  for (long axis : {1L, -2L}) {
    const tensor<float, B> c =
        meld::concatenate(axis, a, b * 2.f + 1.f, a.slice(meld::all, meld::range(0, 1)));
    REQUIRE(c.shape() == shape_t{2, 9, 4});
    const auto h = test::host(c);
    test::for_each_index(h.shape(), [&](const index_list& i) {
      const index_t j = i[1];
      float expect;
      if (j < 3)
        expect = at(ha, {i[0], j, i[2]});
      else if (j < 8)
        expect = at(hb, {i[0], j - 3, i[2]}) * 2.f + 1.f;
      else
        expect = at(ha, {i[0], 0, i[2]});
      REQUIRE(at(h, i) == expect);
    });
  }
  // Along the last axis, of transposed (strided) views: {4, 3, 2} twice is {4, 3, 4}.
  const tensor<float, B> last = meld::concatenate(-1, a.transpose(), a.transpose() * a.transpose());
  REQUIRE(last.shape() == shape_t{4, 3, 4});
  const auto hl = test::host(last);
  test::for_each_index(hl.shape(), [&](const index_list& i) {
    const float v = at(ha, {i[2] % 2, i[1], i[0]});
    REQUIRE(at(hl, i) == (i[2] < 2 ? v : v * v));
  });
  // A list known at run time: split's views joined back.
  const auto parts = meld::split(b, std::vector<index_t>{1, 3}, 1);
  REQUIRE(parts.size() == 3);
  const tensor<float, B> again = meld::concatenate(1, parts);
  REQUIRE(test::host(again).shape() == hb.shape());
  const auto hagain = test::host(again);
  REQUIRE(std::equal(hagain.begin(), hagain.end(), hb.begin()));

  REQUIRE(error_of([&] { (void)meld::concatenate(0, a, b); }) ==
          "concatenate: part 1 has shape {2, 5, 4} and part 0 {2, 3, 4}: they must match on every "
          "axis but 0");
  REQUIRE(error_of([&] { (void)meld::concatenate(3, a, a); }) ==
          "concatenate: axis 3 is out of range for a tensor of rank 3");
  REQUIRE(error_of([&] {
            (void)meld::concatenate(0, a, a.slice(0));
          }).find("part 1 has shape {3, 4}") != std::string::npos);
}

BACKEND_TEST_CASE("stack joins along a new axis; split gives views", "[surface]") {
  const auto hx = iota<std::int32_t>({2, 3});
  const auto x = test::on<B>(hx);
  for (long axis : {0L, 1L, 2L, -1L}) {
    const tensor<std::int32_t, B> s = meld::stack(axis, x, x * 10, x + 100);
    const int a = axis < 0 ? 2 : static_cast<int>(axis);
    shape_t expect_shape = hx.shape();
    expect_shape.insert(a, 3);
    REQUIRE(s.shape() == expect_shape);
    const auto h = test::host(s);
    test::for_each_index(h.shape(), [&](const index_list& i) {
      index_list rest = i;
      const index_t part = i[static_cast<std::size_t>(a)];
      rest.erase(rest.begin() + a);
      const std::int32_t v = at(hx, rest);
      REQUIRE(at(h, i) == (part == 0 ? v : part == 1 ? v * 10 : v + 100));
    });
  }
  REQUIRE(error_of([&] { (void)meld::stack(0, x, x.transpose()); }) ==
          "stack: part 1 has shape {3, 2} and part 0 {2, 3}: stacked parts must have one shape");

  tensor<std::int32_t, B> y = test::on<B>(iota<std::int32_t>({6, 2}));
  auto thirds = meld::split(y, 3, 0);
  REQUIRE(thirds.size() == 3);
  for (const auto& t : thirds) REQUIRE(t.shape() == shape_t{2, 2});
  thirds[1] += 1000;  // a view: writes y
  const auto hy = test::host(y);
  for (index_t r = 0; r < 6; ++r)
    for (index_t c = 0; c < 2; ++c) REQUIRE(hy(r, c) == r * 2 + c + (r == 2 || r == 3 ? 1000 : 0));
  const auto uneven = meld::split(y, std::vector<index_t>{2, 2, 9}, 0);
  REQUIRE(uneven.size() == 4);
  REQUIRE(uneven[0].shape() == shape_t{2, 2});
  REQUIRE(uneven[1].shape() == shape_t{0, 2});
  REQUIRE(uneven[2].shape() == shape_t{4, 2});
  REQUIRE(uneven[3].shape() == shape_t{0, 2});
  REQUIRE(error_of([&] { (void)meld::split(y, 4, 0); }) ==
          "split: axis 0 of shape {6, 2} (extent 6) does not split into 4 equal parts");
}

BACKEND_TEST_CASE("index_select, gather and take_along_axis match naive loops", "[surface]") {
  std::mt19937 gen(5);
  const auto hx = test::random_tensor<double>({4, 5, 3}, 6);
  const auto x = test::on<B>(hx);
  for (int axis = 0; axis < 3; ++axis) {
    const index_t n = hx.shape()[axis];
    tensor<std::int64_t> hi({7}, meld::uninitialized);
    for (auto& v : hi) v = std::uniform_int_distribution<std::int64_t>(-n, n - 1)(gen);
    const tensor<double, B> sel = meld::index_select(x, axis, test::on<B>(hi));
    shape_t expect_shape = hx.shape();
    expect_shape[axis] = 7;
    REQUIRE(sel.shape() == expect_shape);
    const auto h = test::host(sel);
    test::for_each_index(h.shape(), [&](const index_list& i) {
      index_list s = i;
      const std::int64_t k = hi(i[static_cast<std::size_t>(axis)]);
      s[static_cast<std::size_t>(axis)] = k < 0 ? k + n : k;
      REQUIRE(at(h, i) == at(hx, s));
    });

    // gather: indices of x's rank, smaller along the other axes, int32.
    shape_t ishape = hx.shape();
    for (int d = 0; d < 3; ++d) ishape[d] = d == axis ? 6 : ishape[d] - 1;
    tensor<std::int32_t> hg(ishape, meld::uninitialized);
    for (auto& v : hg)
      v = std::uniform_int_distribution<std::int32_t>(0, static_cast<std::int32_t>(n - 1))(gen);
    const auto g = meld::gather(x, axis, test::on<B>(hg));
    const auto t = meld::take_along_axis(x, test::on<B>(hg), axis);
    REQUIRE(g.shape() == ishape);
    const auto hgath = test::host(g), htake = test::host(t);
    test::for_each_index(ishape, [&](const index_list& i) {
      index_list s = i;
      s[static_cast<std::size_t>(axis)] = at(hg, i);
      REQUIRE(at(hgath, i) == at(hx, s));
      REQUIRE(at(htake, i) == at(hx, s));
    });
  }
  // From a strided view, with a strided index view.
  const auto hidx = meld::from_range<std::int64_t>({3, 0, 1, 0, 2, 4});
  const auto idx = test::on<B>(hidx);
  const auto sel = meld::index_select(x.transpose(), 2, idx.slice(meld::range(0, 6, 2)));
  REQUIRE(sel.shape() == shape_t{3, 5, 3});
  const auto h = test::host(sel);
  test::for_each_index(h.shape(), [&](const index_list& i) {
    REQUIRE(at(h, i) == at(hx, {hidx(2 * i[2]), i[1], i[0]}));
  });

  const auto bad = test::on<B>(meld::from_range<std::int64_t>({0, 5}));
  REQUIRE_THROWS_WITH(test::host(meld::index_select(x, 1, bad)),
                      "index_select: index 5 is out of range for axis 1 of extent 5");
  REQUIRE(error_of([&] {
            (void)meld::gather(x, 0, test::on<B>(iota<std::int32_t>({2, 6, 3})));
          }) ==
          "gather: indices of shape {2, 6, 3} exceed a tensor of shape {4, 5, 3} along axis 1");
}

BACKEND_TEST_CASE("scatter_add adds in index order, the same bits on every run", "[surface]") {
  std::mt19937 gen(9);
  const auto hsrc = test::random_tensor<float>({50, 4}, 10, -1e3, 1e3);
  tensor<std::int64_t> hidx({50, 4}, meld::uninitialized);
  for (auto& v : hidx) v = std::uniform_int_distribution<std::int64_t>(0, 2)(gen);
  // The naive reference, in the same (row-major) order.
  tensor<float> expect({3, 4});
  test::for_each_index(hidx.shape(), [&](const index_list& i) {
    expect(hidx(i[0], i[1]), i[1]) += hsrc(i[0], i[1]);
  });
  const auto src = test::on<B>(hsrc);
  const auto idx = test::on<B>(hidx);
  for (int run = 0; run < 3; ++run) {
    tensor<float, B> dst({3, 4});
    meld::scatter_add(dst, 0, idx, src);
    const auto h = test::host(dst);
    REQUIRE(std::equal(h.begin(), h.end(), expect.begin()));  // exactly: the same order
  }
  // Into a view, along axis 1, with indices smaller than src.
  tensor<float, B> wide({2, 6});
  const auto hcol = meld::from_range<std::int32_t>({5, 5, 0, 1}, shape_t{2, 2});
  meld::scatter_add(wide.slice(meld::all, meld::range(0, 6)), 1, test::on<B>(hcol), src);
  const auto hw = test::host(wide);
  REQUIRE(hw(0, 5) == hsrc(0, 0) + hsrc(0, 1));
  REQUIRE(hw(1, 0) == hsrc(1, 0));
  REQUIRE(hw(1, 1) == hsrc(1, 1));
  REQUIRE(meld::sum(test::host(meld::abs(wide))) ==
          Approx(std::abs(hsrc(0, 0) + hsrc(0, 1)) + std::abs(hsrc(1, 0)) + std::abs(hsrc(1, 1))));
}

BACKEND_TEST_CASE("masked_select keeps the elements where a broadcast mask holds", "[surface]") {
  const auto hx = test::random_tensor<float>({6, 7}, 11);
  const auto x = test::on<B>(hx);
  const auto pos = meld::masked_select(x, x > 0.f);
  std::vector<float> expect;
  for (float v : hx)
    if (v > 0) expect.push_back(v);
  const auto h = test::host(pos);
  REQUIRE(h.shape() == shape_t{static_cast<index_t>(expect.size())});
  REQUIRE(std::equal(h.begin(), h.end(), expect.begin(), expect.end()));
  // A mask of shape {7} broadcast over the rows, read through a transposed view.
  const auto hcols = meld::from_range<std::int32_t>({1, 0, 0, 1, 0, 0, 1});
  const auto cols = meld::masked_select(x.transpose().transpose(), test::on<B>(hcols) != 0);
  const auto hc = test::host(cols);
  REQUIRE(hc.size() == 18);
  for (index_t r = 0; r < 6; ++r) {
    REQUIRE(hc(3 * r) == hx(r, 0));
    REQUIRE(hc(3 * r + 1) == hx(r, 3));
    REQUIRE(hc(3 * r + 2) == hx(r, 6));
  }
  REQUIRE(test::host(meld::masked_select(x, x > 100.f)).size() == 0);
  REQUIRE(error_of([&] {
            (void)meld::masked_select(x, test::on<B>(hcols).slice(meld::range(0, 6)) > 0);
          }) == "masked_select: a mask of shape {6} does not broadcast to shape {6, 7}");
}
