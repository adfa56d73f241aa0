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
