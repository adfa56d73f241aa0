// Seeded random tensors: Philox4x32-10's known answers (host), reproducibility, distribution and
// the golden values of seed 2024 on every backend, and draws on a backend that are exactly the
// host's draws for the same seed.
#include "../backends.hpp"

using meld::tensor;
using test::index_list;

HOST_TEST_CASE("Philox4x32-10 matches Random123's known-answer vectors", "[core]") {
  using meld::detail::philox4x32;
  auto check = [](meld::detail::philox_words ctr, std::uint32_t k0, std::uint32_t k1,
                  std::array<std::uint32_t, 4> want) {
    const auto got = philox4x32(ctr, k0, k1);
    for (int i = 0; i < 4; ++i) REQUIRE(got.w[i] == want[i]);
  };
  check({{0, 0, 0, 0}}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  check({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  check({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

BACKEND_TEST_CASE("random tensors are reproducible and well distributed", "[core]") {
  auto a = meld::uniform<float, B>({1000}, -1.f, 1.f, 42);
  auto b = meld::uniform<float, B>({1000}, -1.f, 1.f, 42);
  auto c = meld::uniform<float, B>({1000}, -1.f, 1.f, 43);
  REQUIRE(test::value(meld::sum(a != b)) == 0);
  REQUIRE(test::value(meld::sum(a != c)) > 990);
  REQUIRE(test::value(meld::min(a)) >= -1.f);
  REQUIRE(test::value(meld::max(a)) < 1.f);

  meld::rng gen(7);
  auto first = gen.uniform<double, B>({3});
  auto second = gen.uniform<double, B>({3});
  REQUIRE(gen.counter() == 6);
  const auto all6 = test::host(meld::rng(7).uniform<double, B>({6}));
  REQUIRE(all6(3) == test::host(second)(0));  // a stream continues where it stopped
  REQUIRE(all6(0) == test::host(first)(0));

  auto n = meld::normal<double, B>({200000}, 1.0, 2.0, 3);
  const double mean = test::value(meld::mean(n));
  const double var = test::value(meld::mean(meld::square(n - mean)));
  REQUIRE(mean == Approx(1.0).margin(0.02));
  REQUIRE(var == Approx(4.0).epsilon(0.02));

  auto u = meld::uniform<float, B>({200000}, 0.f, 1.f, 5);
  REQUIRE(test::value(meld::mean(u)) == Approx(0.5).margin(0.005));

  auto ints = gen.integers<std::int32_t, B>({10000}, -3, 4);
  REQUIRE(test::value(meld::min(ints)) == -3);
  REQUIRE(test::value(meld::max(ints)) == 3);
  REQUIRE_THROWS_AS((gen.integers<std::int32_t, B>({2}, 4, 4)), meld::shape_error);
}

BACKEND_TEST_CASE("draws on a backend are the host's draws for the same seed", "[core]") {
  // Exactly equal (tolerance 0), element by element.
  const auto hu = meld::uniform<float>({3, 333}, -1.f, 1.f, 42);
  test::check_elements(
      meld::uniform<float, B>({3, 333}, -1.f, 1.f, 42),
      [&](const index_list& i) { return test::at(hu, i); }, 0);
  const auto hn = meld::normal<double>({1001}, 1.0, 2.0, 3);
  test::check_elements(
      meld::normal<double, B>({1001}, 1.0, 2.0, 3),
      [&](const index_list& i) { return test::at(hn, i); }, 0);

  // A stream drawn partly on B and partly on the host continues the same sequence.
  meld::rng on_b(9), on_host(9);
  const auto hd = on_host.uniform<double>({17});
  test::check_elements(
      on_b.uniform<double, B>({17}), [&](const index_list& i) { return test::at(hd, i); }, 0);
  const auto hi = on_host.integers<std::int32_t>({500}, -3, 4);
  test::check_elements(
      on_b.integers<std::int32_t, B>({500}, -3, 4),
      [&](const index_list& i) { return test::at(hi, i); }, 0);
  REQUIRE(on_b.counter() == on_host.counter());
}

BACKEND_TEST_CASE("the first values of seed 2024 are fixed forever", "[core]") {
  // Golden values: a change here changes every seeded result users have recorded.
  const auto u = test::host(meld::uniform<float, B>({3}, 0.f, 1.f, 2024));
  const auto z = test::host(meld::normal<double, B>({2}, 0.0, 1.0, 2024));
  // Computed by an independent Python implementation of Philox4x32-10 and the same conversions.
  REQUIRE(u(0) == 0.603689849f);
  REQUIRE(u(1) == 0.346284151f);
  REQUIRE(u(2) == 0.575268626f);
  REQUIRE(z(0) == Approx(1.3541920905069686).epsilon(1e-15));
  REQUIRE(z(1) == Approx(0.73872119363163302).epsilon(1e-15));
}
