// The README's section on the tensor surface, run: its snippets, and the values they claim.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <vector>

#include "../backends.hpp"

TEST_CASE("the README's tensor surface snippets run as written", "[surface]") {
  std::ostringstream cout;  // the snippets' std::cout
  meld::tensor<float> m{{1, 2.5, -3}, {4, 5, 6}};
  auto v = meld::from_range<float>({1, 2, 3});
  std::vector<double> data(12, 0.5);
  auto d = meld::from_range(data, meld::shape_t{3, 4});
  double buffer[6] = {};
  auto b = meld::borrow(buffer, {2, 3});
  meld::tensor sum = m + v;
  cout << m << '\n';
  meld::print_options opt;
  opt.precision = 2;
  std::string text = meld::to_string(m.transpose(), opt);

  REQUIRE(d.shape() == meld::shape_t{3, 4});
  b += 1.0;
  REQUIRE(buffer[5] == 1.0);
  REQUIRE(sum(1, 2) == 9);
  REQUIRE(cout.str() ==
          "tensor<float32, cpu<sync>> shape {2, 3}\n"
          "[[ 1.0000,  2.5000, -3.0000],\n"
          " [ 4.0000,  5.0000,  6.0000]]\n");
  REQUIRE(text ==
          "tensor_view<float32, cpu<sync>> shape {3, 2}\n[[ 1.00,  4.00],\n [ 2.50,  5.00],\n "
          "[-3.00,  6.00]]");

  const auto path = std::string("meld_readme_") + std::to_string(::getpid()) + ".npy";
  meld::save_npy(path, m);
  meld::tensor<float> back = meld::load_npy<float>(path);
  std::remove(path.c_str());
  REQUIRE(std::equal(back.begin(), back.end(), m.begin(), m.end()));

  meld::tensor<float> c = meld::concatenate(1, m, m * 2.f);
  meld::tensor<float> s = meld::stack(0, m, m);
  auto halves = meld::split(c, 2, 1);
  auto idx = meld::from_range<std::int64_t>({1, 0, 0});
  meld::tensor<float> rows = meld::index_select(m, 0, idx);
  meld::tensor<float> picked =
      meld::gather(m, 1, meld::from_range<std::int64_t>({0, 2}, meld::shape_t{2, 1}));
  meld::tensor<float> acc({3});
  meld::scatter_add(acc, 0, idx, v);
  meld::tensor<float> positive = meld::masked_select(m, m > 0.f);

  REQUIRE(c.shape() == meld::shape_t{2, 6});
  REQUIRE(c(1, 5) == 12);
  REQUIRE(s.shape() == meld::shape_t{2, 2, 3});
  REQUIRE(halves.size() == 2);
  REQUIRE(halves[1](0, 0) == 2);
  REQUIRE(rows(0, 0) == 4);
  REQUIRE(picked(0, 0) == 1);
  REQUIRE(picked(1, 0) == 6);
  REQUIRE(acc(0) == 5);  // v[1] + v[2]
  REQUIRE(acc(1) == 1);
  REQUIRE(positive.size() == 5);
}
