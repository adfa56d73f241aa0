#include <limits>

#include <meld/core/checked.hpp>

#include "../support.hpp"

using meld::dims;
using meld::shape_t;

TEST_CASE("dims hold up to max_rank extents", "[core]") {
  shape_t s{2, 3, 4};
  REQUIRE(s.size() == 3);
  REQUIRE(s[1] == 3);
  REQUIRE(s.product() == 24);
  REQUIRE(shape_t{}.product() == 1);
  REQUIRE(s.str() == "{2, 3, 4}");
  s.insert(0, 7);
  REQUIRE(s == shape_t{7, 2, 3, 4});
  s.erase(2);
  REQUIRE(s == shape_t{7, 2, 4});
  REQUIRE(dims(std::vector<int>{5, 6}) == shape_t{5, 6});
  REQUIRE_THROWS_AS((shape_t{1, 2, 3, 4, 5, 6, 7, 8, 9}), meld::shape_error);
  REQUIRE(test::message_of<meld::shape_error>([] {
            shape_t{1, 2, 3, 4, 5, 6, 7, 8, 9};
          }).find("max_rank") != std::string::npos);
}

TEST_CASE("row-major strides and checked sizes", "[core]") {
  REQUIRE(meld::row_major_strides({2, 3, 4}) == dims{12, 4, 1});
  REQUIRE(meld::row_major_strides({}) == dims{});
  REQUIRE(meld::row_major_strides({3, 0, 2}) == dims{2, 2, 1});
  REQUIRE(meld::checked_size({2, 3}, "t") == 6);
  REQUIRE_THROWS_AS(meld::checked_size({-1, 3}, "t"), meld::shape_error);
  REQUIRE_THROWS_WITH(
      meld::checked_size({1 << 30, 1 << 30, 1 << 30}, "tensor"),
      "tensor: the element count of shape {1073741824, 1073741824, 1073741824} overflows");
}

TEST_CASE("element counts and strides that overflow int64 are refused", "[core]") {
  const meld::index_t big = (meld::index_t(1) << 62) + 1;
  // 4 x (2^62 + 1) wraps to 4 in int64.
  REQUIRE_THROWS_WITH(meld::checked_size({4, big}, "tensor"),
                      "tensor: the element count of shape {4, 4611686018427387905} overflows");
  // No elements, but strides that would overflow (numpy refuses these too).
  REQUIRE_THROWS_AS(meld::checked_size({0, big, 4}, "tensor"), meld::shape_error);
  REQUIRE_THROWS_AS(meld::row_major_strides({0, big, 4}), meld::shape_error);
  REQUIRE_THROWS_AS((meld::tensor<float>({0, big, 4})), meld::shape_error);
  REQUIRE(meld::checked_size({0, big}, "tensor") == 0);
  REQUIRE(meld::row_major_strides({0, big}) == meld::dims{big, 1});
  REQUIRE(meld::checked_size({std::numeric_limits<meld::index_t>::max()}, "t") ==
          std::numeric_limits<meld::index_t>::max());
  // Broadcasting two shapes that each fit into one that does not.
  REQUIRE_THROWS_WITH(meld::broadcast_shapes({1 << 30, 1, 1}, {1 << 30, 1 << 30}, "operator+"),
                      "operator+: the element count of shape {1073741824, 1073741824, "
                      "1073741824} overflows");
  // The helpers themselves, at the edges of int64.
  meld::index_t out = 0;
  constexpr meld::index_t hi = std::numeric_limits<meld::index_t>::max();
  constexpr meld::index_t lo = std::numeric_limits<meld::index_t>::min();
  REQUIRE(meld::detail::mul_fits(hi, 1, out));
  REQUIRE(out == hi);
  REQUIRE_FALSE(meld::detail::mul_fits(hi, 2, out));
  REQUIRE_FALSE(meld::detail::mul_fits(lo, -1, out));
  REQUIRE(meld::detail::mul_fits(lo, 1, out));
  REQUIRE(meld::detail::add_fits(hi, lo, out));
  REQUIRE(out == -1);
  REQUIRE_FALSE(meld::detail::add_fits(hi, 1, out));
  REQUIRE_FALSE(meld::detail::add_fits(lo, -1, out));
}

TEST_CASE("numpy broadcasting rules", "[core]") {
  using meld::broadcast_shapes;
  REQUIRE(broadcast_shapes({64, 1}, {1, 32}, "op") == shape_t{64, 32});
  REQUIRE(broadcast_shapes({5, 4}, {4}, "op") == shape_t{5, 4});
  REQUIRE(broadcast_shapes({}, {3, 2}, "op") == shape_t{3, 2});
  REQUIRE(broadcast_shapes({8, 1, 6, 1}, {7, 1, 5}, "op") == shape_t{8, 7, 6, 5});
  REQUIRE(broadcast_shapes({0}, {1}, "op") == shape_t{0});
  REQUIRE(broadcast_shapes({2, 0}, {2, 1}, "op") == shape_t{2, 0});
  REQUIRE_THROWS_WITH(broadcast_shapes({3, 4}, {5}, "operator+"),
                      "operator+: shapes {3, 4} and {5} cannot be broadcast (axis -1: 4 vs 5)");
  REQUIRE_THROWS_AS(broadcast_shapes({2, 1}, {3, 1}, "op"), meld::shape_error);
  REQUIRE(meld::broadcasts_to({4}, {3, 4}));
  REQUIRE(meld::broadcasts_to({1, 4}, {3, 4}));
  REQUIRE_FALSE(meld::broadcasts_to({3, 4}, {4}));
  REQUIRE_FALSE(meld::broadcasts_to({2}, {3, 4}));
}

TEST_CASE("axes normalize like Python's", "[core]") {
  REQUIRE(meld::normalize_axis(-1, 3, "f") == 2);
  REQUIRE(meld::normalize_axis(0, 3, "f") == 0);
  REQUIRE_THROWS_WITH(meld::normalize_axis(3, 3, "sum"),
                      "sum: axis 3 is out of range for a tensor of rank 3");
  REQUIRE_THROWS_AS(meld::normalize_axis(-4, 3, "f"), meld::shape_error);
}

TEST_CASE("shape_error is an invalid_argument", "[core]") {
  STATIC_REQUIRE(std::is_base_of_v<std::invalid_argument, meld::shape_error>);
  STATIC_REQUIRE(std::is_base_of_v<std::bad_alloc, meld::allocation_error>);
}
