// Views (slice, transpose, permute, reshape, broadcast_to, squeeze, unsqueeze) on every backend:
// their shapes and strides, the elements they see (read through host copies, and compared with
// the same view of the host's copy), writes through them, and the storage they keep alive.
#include <limits>

#include "../backends.hpp"

using meld::range;  // (meld::all stays qualified: nvcc declares a global all(bool))
using meld::shape_t;
using meld::tensor;
using test::index_list;

namespace {

// 0, 1, 2, ... in shape s, on backend B.
template <class B = meld::cpu<>>
tensor<float, B> iota(const shape_t& s) {
  return meld::arange<float, B>(static_cast<float>(s.product())).reshape(s);
}

// A view of device memory sees exactly the elements that the same view of the host's copy sees.
template <class V, class H>
void check_same_view(const V& device_view, const H& host_view) {
  REQUIRE(device_view.shape() == host_view.shape());
  REQUIRE(device_view.strides() == host_view.strides());
  test::check_elements(
      device_view, [&](const index_list& i) { return test::at(host_view, i); }, 0);
}

}  // namespace

BACKEND_TEST_CASE("slicing with ranges, steps and indices", "[core]") {
  auto t = iota<B>({4, 5});
  const auto h = iota({4, 5});
  auto v = t.slice(range(1, 3), range(0, 5, 2));
  REQUIRE(v.shape() == shape_t{2, 3});
  const auto hv = test::host(v);
  REQUIRE(hv(0, 0) == 5.f);
  REQUIRE(hv(1, 2) == 14.f);
  REQUIRE_FALSE(v.is_contiguous());
  check_same_view(v, h.slice(range(1, 3), range(0, 5, 2)));

  auto row = t.slice(2);  // an index drops the axis
  REQUIRE(row.shape() == shape_t{5});
  REQUIRE(test::host(row)(4) == 14.f);
  auto col = t.slice(meld::all, -1);
  REQUIRE(col.shape() == shape_t{4});
  REQUIRE(test::host(col)(3) == 19.f);
  check_same_view(col, h.slice(meld::all, -1));

  auto rev = t.slice(range::every(-1), range(-2));
  REQUIRE(rev.shape() == shape_t{4, 2});
  const auto hrev = test::host(rev);
  REQUIRE(hrev(0, 0) == 18.f);
  REQUIRE(hrev(3, 1) == 4.f);
  check_same_view(rev, h.slice(range::every(-1), range(-2)));
  auto back = t.slice(range(3, 0, -2));
  REQUIRE(back.shape() == shape_t{2, 5});
  REQUIRE(test::host(back)(1, 0) == 5.f);
  REQUIRE(t.slice(range(2, 2)).shape() == shape_t{0, 5});

  // Writing through a view changes the tensor.
  t.slice(meld::all, 0) = 100.f;
  REQUIRE(test::host(t)(3, 0) == 100.f);
  v += 1000.f;
  const auto ht = test::host(t);
  REQUIRE(ht(1, 2) == 1007.f);
  REQUIRE(ht(1, 1) == 6.f);
}

BACKEND_TEST_CASE("bad slices throw shape_error naming the axis", "[core]") {
  auto t = iota<B>({4, 5});
  REQUIRE_THROWS_WITH(t.slice(range(0, 6)),
                      "slice: range(0, 6, 1) is out of range for axis 0 of extent 4");
  REQUIRE_THROWS_WITH(t.slice(meld::all, 5),
                      "slice: index 5 is out of range for axis 1 of extent 5 in shape {4, 5}");
  REQUIRE_THROWS_AS(t.slice(meld::all, range(0, 3, 0)), meld::shape_error);
  REQUIRE_THROWS_AS(t.slice(0, 0, 0), meld::shape_error);
  REQUIRE_THROWS_AS(t.slice(range(-9)), meld::shape_error);
}

BACKEND_TEST_CASE("slice steps of any size, INT64_MAX and INT64_MIN included", "[core]") {
  constexpr meld::index_t hi = std::numeric_limits<meld::index_t>::max();
  constexpr meld::index_t lo = std::numeric_limits<meld::index_t>::min();
  auto t = iota<B>({4, 5});
  const auto h = iota({4, 5});
  // As numpy: a[:, 0:3:INT64_MAX] has one column, the first.
  auto first = t.slice(meld::all, range(0, 3, hi));
  REQUIRE(first.shape() == shape_t{4, 1});
  test::check_elements(
      first, [&](const index_list& i) { return h(i[0], 0); }, 0);
  REQUIRE(t.slice(meld::all, range(4, 5, hi)).shape() == shape_t{4, 1});
  REQUIRE(t.slice(meld::all, range(5, 5, hi)).shape() == shape_t{4, 0});
  // a[::INT64_MIN] walks backwards from the last element: one row, the last.
  auto last = t.slice(range::every(lo));
  REQUIRE(last.shape() == shape_t{1, 5});
  test::check_elements(
      last, [&](const index_list& i) { return h(3, i[1]); }, 0);
  REQUIRE(t.slice(meld::all, range(4, 0, lo)).shape() == shape_t{4, 1});
  REQUIRE(test::host(t.slice(meld::all, range(4, 0, lo)))(2, 0) == h(2, 4));
  REQUIRE(t.slice(meld::all, range(2, 2, lo)).shape() == shape_t{4, 0});
  REQUIRE(t.slice(range(1, -1, hi - 1), range::every(lo + 1)).shape() == shape_t{1, 1});
  // A step one short of the extent still takes two elements.
  REQUIRE(t.slice(meld::all, range(0, 5, 4)).shape() == shape_t{4, 2});
  REQUIRE(t.slice(meld::all, range::every(-4)).shape() == shape_t{4, 2});
}

BACKEND_TEST_CASE("views whose element count overflows int64 are refused", "[core]") {
  const meld::index_t big = (meld::index_t(1) << 62) + 1;
  tensor<float, B> t({4});
  // 4 x (2^62 + 1) wraps to 4: the view would write far outside the buffer.
  REQUIRE_THROWS_WITH(t.reshape({4, big}),
                      "reshape: the element count of shape {4, 4611686018427387905} overflows");
  REQUIRE_THROWS_AS(t.reshape({big, 4, -1}), meld::shape_error);
  tensor<float, B> empty({0});
  REQUIRE_THROWS_AS(empty.reshape({0, big, 4}), meld::shape_error);
  REQUIRE_THROWS_WITH(
      t.broadcast_to({big, 4}),
      "broadcast_to: the element count of shape {4611686018427387905, 4} overflows");
  // Two broadcasts that fit alone but not together, in an expression: refused, not a sum over
  // a wrapped element count.
  tensor<float, B> one({1});
  const auto rows = one.broadcast_to({1 << 30, 1, 1}), cols = one.broadcast_to({1 << 30, 1 << 30});
  REQUIRE_THROWS_AS(test::value(meld::sum(rows + cols)), meld::shape_error);
  REQUIRE_THROWS_AS((tensor<float, B>(rows * cols)), meld::shape_error);
  // The largest views that fit are fine.
  REQUIRE(one.broadcast_to({1 << 30, 1 << 30}).size() == meld::index_t(1) << 60);
  REQUIRE(t.reshape({1, 4, 1}).shape() == shape_t{1, 4, 1});
}

BACKEND_TEST_CASE("views of an empty tensor, at any offset", "[core]") {
  // An empty tensor has no storage: a view with an offset must not do arithmetic on its null
  // pointer (found by tests/fuzz/fuzz_views).
  tensor<float, B> e({3, 0, 2});
  auto row = e.slice(2);
  REQUIRE(row.shape() == shape_t{0, 2});
  REQUIRE(row.raw_data() == nullptr);
  auto part = e.slice(range(1, 3), meld::all, 1).transpose();
  REQUIRE(part.shape() == shape_t{0, 2});
  REQUIRE(tensor<float, B>(part * 2.f).size() == 0);
  REQUIRE(test::value(meld::sum(part)) == 0.f);
}

BACKEND_TEST_CASE("transpose and permute", "[core]") {
  auto t = iota<B>({2, 3, 4});
  const auto h = iota({2, 3, 4});
  auto tt = t.transpose();
  REQUIRE(tt.shape() == shape_t{4, 3, 2});
  REQUIRE(test::host(tt)(3, 2, 1) == h(1, 2, 3));
  check_same_view(tt, h.transpose());
  auto p = t.permute({1, 2, 0});
  REQUIRE(p.shape() == shape_t{3, 4, 2});
  REQUIRE(test::host(p)(2, 1, 1) == h(1, 2, 1));
  check_same_view(p, h.permute({1, 2, 0}));
  REQUIRE(test::value(meld::sum(p)) == test::value(meld::sum(t)));
  REQUIRE_THROWS_WITH(t.permute({0, 0, 1}), "permute: {0, 0, 1} repeats axis 0");
  REQUIRE_THROWS_AS(t.permute({0, 1}), meld::shape_error);
  REQUIRE_THROWS_AS(t.permute({0, 1, 3}), meld::shape_error);
}

BACKEND_TEST_CASE("reshape is a view when the strides allow it", "[core]") {
  auto t = iota<B>({2, 3, 4});
  const auto h = iota({2, 3, 4});
  auto r = t.reshape({6, -1});
  REQUIRE(r.shape() == shape_t{6, 4});
  REQUIRE(r.raw_data() == t.raw_data());
  REQUIRE(test::host(r)(5, 3) == 23.f);
  REQUIRE(t.flatten().shape() == shape_t{24});
  REQUIRE(t.reshape({4, 1, 6}).shape() == shape_t{4, 1, 6});
  REQUIRE(t.reshape({1, 24, 1}).shape() == shape_t{1, 24, 1});

  // A slice that keeps rows contiguous can merge them; a transpose cannot flatten.
  auto rows = t.slice(meld::all, range(0, 2));  // {2, 2, 4}, strides {12, 4, 1}
  auto merged = rows.reshape({2, 8});
  REQUIRE(merged.raw_data() == t.raw_data());
  REQUIRE(test::host(merged)(1, 5) == h(1, 1, 1));
  check_same_view(merged, h.slice(meld::all, range(0, 2)).reshape({2, 8}));
  REQUIRE(test::host(rows.reshape({2, 2, 2, 2}))(1, 1, 1, 0) == h(1, 1, 2));
  REQUIRE_THROWS_AS(rows.reshape({16}), meld::shape_error);
  REQUIRE_THROWS_AS(t.slice(meld::all, range(0, 3, 2)).reshape({2, 8}), meld::shape_error);
  REQUIRE_THROWS_WITH(t.transpose().reshape({24}),
                      "reshape: a view of shape {4, 3, 2} with strides {1, 4, 12} cannot be "
                      "reshaped to {24} without copying; copy it into a tensor first");
  REQUIRE_THROWS_WITH(t.reshape({5, 5}),
                      "reshape: cannot reshape {2, 3, 4} (24 elements) into {5, 5} (25 elements)");
  REQUIRE_THROWS_AS(t.reshape({-1, -1}), meld::shape_error);
  REQUIRE_THROWS_AS(t.reshape({7, -1}), meld::shape_error);
  // A copy of a transpose is contiguous again.
  tensor<float, B> copy = t.transpose();
  REQUIRE(test::host(copy.reshape({24}))(1) == h(1, 0, 0));
}

BACKEND_TEST_CASE("broadcast_to, squeeze and unsqueeze", "[core]") {
  auto v = iota<B>({3});
  const auto h = iota({3});
  auto b = v.broadcast_to({2, 3});
  REQUIRE(b.shape() == shape_t{2, 3});
  REQUIRE(test::host(b)(1, 2) == 2.f);
  REQUIRE(b.strides()[0] == 0);
  check_same_view(b, h.broadcast_to({2, 3}));
  STATIC_REQUIRE(std::is_const_v<std::remove_pointer_t<decltype(b.raw_data())>>);  // read-only
  if constexpr (B::host_accessible) {
    STATIC_REQUIRE(std::is_const_v<std::remove_pointer_t<decltype(b.data())>>);
  }
  REQUIRE_THROWS_WITH(v.broadcast_to({2, 4}),
                      "broadcast_to: shape {3} cannot be broadcast to {2, 4}");

  auto u = v.unsqueeze(0);
  REQUIRE(u.shape() == shape_t{1, 3});
  REQUIRE(v.unsqueeze(-1).shape() == shape_t{3, 1});
  check_same_view(v.unsqueeze(-1).broadcast_to({3, 4}), h.unsqueeze(-1).broadcast_to({3, 4}));
  REQUIRE(u.squeeze().shape() == shape_t{3});
  REQUIRE(u.squeeze(0).shape() == shape_t{3});
  REQUIRE_THROWS_WITH(u.squeeze(1), "squeeze: axis 1 of shape {1, 3} has extent 3, not 1");
  REQUIRE_THROWS_AS(v.unsqueeze(3), meld::shape_error);
}

BACKEND_TEST_CASE("views of const tensors are read-only; views keep their storage alive",
                  "[core]") {
  const tensor<float, B> c = iota<B>({2, 2});
  auto cv = c.slice(0);
  STATIC_REQUIRE(std::is_same_v<decltype(cv), meld::tensor_view<const float, B>>);
  auto make = [] {
    tensor<float, B> temp = iota<B>({4});
    return temp.slice(range(1, 3));
  };
  auto keep = make();
  REQUIRE(test::host(keep)(1) == 2.f);  // the storage outlives the tensor
  auto e = iota<B>({3}) + 1.f;          // an rvalue tensor in an expression is owned by it
  tensor<float, B> r = e;
  REQUIRE(test::host(r)(2) == 3.f);
}
