// meld::bfloat16 and meld::half as storage types: their conversions over all 65,536 values and at
// every rounding boundary (references from the bit layouts and from double arithmetic, not from
// the types' own code); on every backend, the SIMD conversions equal the scalar ones, expressions
// compute in float and round once, reductions accumulate in float, and products of 16-bit
// operands equal a double-precision product of the same rounded values.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "../backends.hpp"

using meld::bfloat16;
using meld::shape_t;
using meld::tensor;

namespace {

// The float whose upper half is `bits` (the bfloat16 layout, read independently of bfloat16).
float float_of_bits(std::uint16_t bits) {
  const std::uint32_t u = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool is_nan_bits(std::uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

// Floats that exercise the rounding: ties (even and odd), values just off a tie, NaNs with
// payloads only in the lower half, infinities, the largest finite values (which round up to
// infinity), subnormals, zeros of both signs; then random values over the whole range.
std::vector<float> hard_floats(std::size_t random_count) {
  std::vector<float> v;
  for (std::uint32_t hi : {0x0000u, 0x0001u, 0x3f80u, 0x3f81u, 0x7f7fu, 0x7f80u, 0x8000u, 0xbf80u,
                           0xff7fu, 0xff80u, 0x0080u, 0x007fu})
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const std::uint32_t u = (hi << 16) | lo;
      float f;
      std::memcpy(&f, &u, 4);
      v.push_back(f);
    }
  std::mt19937 gen(7);
  for (std::size_t i = 0; i < random_count; ++i) {
    const std::uint32_t u = gen();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

// Whether two bfloat16 values agree: the same bits, or both NaN.
bool same_value(bfloat16 a, bfloat16 b) {
  return a.bits == b.bits || (is_nan_bits(a.bits) && is_nan_bits(b.bits));
}

}  // namespace

TEST_CASE("bfloat16 widens every one of its 65,536 values exactly", "[core][bfloat16]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = bfloat16::from_raw(bits);
    if (is_nan_bits(bits)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_bits(bfloat16(f).bits));  // stays NaN, never becomes infinity
    } else {
      REQUIRE(bits_of(f) == std::uint32_t(bits) << 16);
      REQUIRE(bfloat16(f).bits == bits);  // and narrows back to itself
    }
  }
}

TEST_CASE("bfloat16 rounds floats to nearest, ties to even, at every boundary",
          "[core][bfloat16]") {
  // Between each positive finite value and the next: the midpoint (a float, since bfloat16 has 16
  // fewer mantissa bits) goes to the one with an even last bit, the floats beside it to the
  // nearer one. The reference compares distances in double.
  for (std::uint32_t b = 0; b < 0x7f80; ++b) {
    const double lo = float_of_bits(static_cast<std::uint16_t>(b));
    const double hi = float_of_bits(static_cast<std::uint16_t>(b + 1));  // infinity after 0x7f7f
    const float mid = b == 0x7f7f ? float(lo + (lo - float_of_bits(0x7f7e)) / 2)
                                  : static_cast<float>((lo + hi) / 2);
    REQUIRE(double(mid) == (b == 0x7f7f ? mid : (lo + hi) / 2));  // exact
    const auto even = static_cast<std::uint16_t>(b % 2 == 0 ? b : b + 1);
    for (const float sign : {1.f, -1.f}) {
      const std::uint16_t s = sign < 0 ? 0x8000 : 0;
      INFO("between bits " << b << " and " << b + 1 << ", sign " << sign);
      REQUIRE(bfloat16(sign * mid).bits == (even | s));
      const float below = std::nextafter(mid, 0.f), above = std::nextafter(mid, INFINITY);
      REQUIRE(bfloat16(sign * below).bits == (b | s));
      REQUIRE(bfloat16(sign * above).bits == ((b + 1) | s));
    }
  }
  // Every float rounds to a neighbour at most half a unit away: spot-check the whole range.
  for (const float f : hard_floats(100000)) {
    if (std::isnan(f) || std::isinf(f)) continue;
    const double r = bfloat16(f);
    if (std::isinf(r)) {
      REQUIRE(std::fabs(double(f)) >= 0x1.fep127);  // at or past the last midpoint
      continue;
    }
    const double ulp = std::ldexp(1.0, std::max(std::ilogb(r == 0 ? 1e-45 : r), -126) - 7);
    REQUIRE(std::fabs(r - double(f)) <= ulp / 2);
  }
}

SYNC_BACKEND_TEST_CASE("bfloat16 tensors convert as the scalar conversion does",
                       "[core][bfloat16]") {
  const std::vector<float> values = hard_floats(4000);  // not a multiple of any vector width
  const tensor<float> h = meld::from_span(std::span<const float>(values));
  const tensor<float, B> x = test::on<B>(h);
  // float -> bfloat16 (the SIMD narrowing, its tails included) and back (the widening).
  const tensor<bfloat16, B> n = meld::cast<bfloat16>(x);
  const tensor<bfloat16> n_host = meld::to<meld::cpu<>>(n);
  const tensor<float, B> w = meld::cast<float>(n);
  const tensor<float> w_host = meld::to<meld::cpu<>>(w);
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ", float bits " << bits_of(values[i]));
    const auto ii = static_cast<meld::index_t>(i);
    REQUIRE(same_value(n_host(ii), bfloat16(values[i])));
    const float wi = w_host(ii);
    REQUIRE((bits_of(wi) == std::uint32_t(n_host(ii).bits) << 16 ||
             (std::isnan(wi) && is_nan_bits(n_host(ii).bits))));
  }
  // A strided source and destination go through the planned path.
  tensor<bfloat16, B> every_other({2000});
  every_other = meld::cast<bfloat16>(x.slice(meld::range(0, 4000, 2)));
  const tensor<bfloat16> eo = meld::to<meld::cpu<>>(every_other);
  for (meld::index_t i = 0; i < 2000; ++i)
    REQUIRE(same_value(eo(i), bfloat16(values[std::size_t(2 * i)])));
  // A cast inside a float expression: its lanes rounded, the rest computed in float; stored into
  // float and, rounded once more (exactly: the values are bfloat16's), into bfloat16.
  const tensor<float> error = meld::to<meld::cpu<>>(tensor<float, B>(meld::cast<bfloat16>(x) - x));
  const tensor<bfloat16> twice =
      meld::to<meld::cpu<>>(tensor<bfloat16, B>(meld::cast<bfloat16>(x) * 2.f));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ", float bits " << bits_of(values[i]));
    const auto ii = static_cast<meld::index_t>(i);
    const float want = float(bfloat16(values[i])) - values[i];
    REQUIRE((bits_of(error(ii)) == bits_of(want) || (std::isnan(error(ii)) && std::isnan(want))));
    REQUIRE(same_value(twice(ii), bfloat16(float(bfloat16(values[i])) * 2.f)));
  }
}

BACKEND_TEST_CASE("expressions over bfloat16 compute in float and round once", "[core][bfloat16]") {
  const tensor<float> ha = test::random_tensor<float>({37, 29}, 11, -4, 4);
  const tensor<float> hb = test::random_tensor<float>({29}, 12, -4, 4);
  const tensor<bfloat16, B> a = meld::cast<bfloat16>(test::on<B>(ha));
  const tensor<bfloat16, B> b = meld::cast<bfloat16>(test::on<B>(hb));
  static_assert(std::is_same_v<meld::value_t<decltype(a * b + 1.f)>, float>);
  // Broadcast b over a's rows; the result stored as bfloat16.
  const tensor<bfloat16, B> y = meld::exp(a * 0.5f) - a * b + 1.f;
  const tensor<bfloat16> yh = meld::to<meld::cpu<>>(y);
  const tensor<bfloat16> ah = meld::to<meld::cpu<>>(a), bh = meld::to<meld::cpu<>>(b);
  for (meld::index_t i = 0; i < 37; ++i)
    for (meld::index_t j = 0; j < 29; ++j) {
      const double av = float(ah(i, j)), bv = float(bh(j));
      const double ref = std::exp(av * 0.5) - av * bv + 1.0;  // from the rounded operands
      // One rounding to bfloat16 (2^-8 relative), after float arithmetic (a few float ulps).
      REQUIRE(float(yh(i, j)) == Approx(ref).epsilon(0x1p-8 + 1e-5).margin(1e-5));
    }
}

BACKEND_TEST_CASE("reductions of bfloat16 accumulate in float", "[core][bfloat16]") {
  // 10,000 ones, summed in bfloat16 arithmetic, would stop at 256 (256 + 1 rounds to 256).
  const tensor<bfloat16, B> ones = meld::cast<bfloat16>(meld::ones<float, B>({10000}));
  static_assert(std::is_same_v<meld::reduce_result_t<meld::reducers::sum, decltype(ones)>, float>);
  REQUIRE(float(test::value(meld::sum(ones))) == 10000.f);
  const tensor<float> h = test::random_tensor<float>({64, 300}, 5, -1, 1);
  const tensor<bfloat16, B> x = meld::cast<bfloat16>(test::on<B>(h));
  const tensor<bfloat16> xh = meld::to<meld::cpu<>>(x);
  const tensor<float, B> rows = meld::sum(x, 1);
  const tensor<float> rh = meld::to<meld::cpu<>>(rows);
  double total = 0;
  for (meld::index_t i = 0; i < 64; ++i) {
    double s = 0;
    for (meld::index_t j = 0; j < 300; ++j) s += float(xh(i, j));
    REQUIRE(rh(i) == Approx(s).margin(1e-4));
    total += s;
  }
  REQUIRE(float(test::value(meld::sum(x))) == Approx(total).margin(1e-3));
  REQUIRE(float(test::value(meld::max(x))) ==
          float(*std::max_element(xh.begin(), xh.end(),
                                  [](auto p, auto q) { return float(p) < float(q); })));
}

BACKEND_TEST_CASE("products of bfloat16 accumulate in float", "[core][bfloat16]") {
  for (const auto& [m, k, n] : {std::array<meld::index_t, 3>{3, 5, 4}, {67, 300, 45}}) {
    INFO(m << " x " << k << " x " << n);
    const tensor<float> ha = test::random_tensor<float>({m, k}, 21, -1, 1);
    const tensor<float> hb = test::random_tensor<float>({n, k}, 22, -1, 1);
    const tensor<bfloat16, B> a = meld::cast<bfloat16>(test::on<B>(ha));
    const tensor<bfloat16, B> b = meld::cast<bfloat16>(test::on<B>(hb));
    const tensor<bfloat16, B> c = meld::matmul(a, b.transpose());  // B transposed: strided
    const tensor<float, B> cf =
        meld::matmul(meld::cast<float>(a), meld::cast<float>(b.transpose()));
    const tensor<bfloat16> ch = meld::to<meld::cpu<>>(c);
    const tensor<float> cfh = meld::to<meld::cpu<>>(cf);
    const tensor<bfloat16> ah = meld::to<meld::cpu<>>(a), bh = meld::to<meld::cpu<>>(b);
    const tensor<float, B> af = test::on<B>(ha), bf = test::on<B>(hb);
    tensor<float, B> cc({m, n});
    meld::gemm(1.f, meld::cast<bfloat16>(af), meld::cast<bfloat16>(bf.transpose()), 0.f, cc);
    const tensor<float> cch = meld::to<meld::cpu<>>(cc);
    for (meld::index_t i = 0; i < m; ++i)
      for (meld::index_t j = 0; j < n; ++j) {
        double ref = 0, size = 0;
        for (meld::index_t p = 0; p < k; ++p) {
          ref += double(float(ah(i, p))) * double(float(bh(j, p)));
          size += std::fabs(double(float(ah(i, p))) * double(float(bh(j, p))));
        }
        // The float product of the rounded operands: float accumulation error only.
        REQUIRE(cfh(i, j) == Approx(ref).margin(size * k * 0x1p-24));
        // The bfloat16 product: that, rounded once.
        REQUIRE(float(ch(i, j)) == Approx(ref).epsilon(0x1p-8).margin(size * k * 0x1p-24));
        // Float operands cast to bfloat16 in the product's expression: the same product (the
        // vdpbf16ps kernel rounds them as it packs them, where it runs).
        REQUIRE(cch(i, j) == Approx(ref).margin(size * k * 0x1p-24));
      }
  }
}

BACKEND_TEST_CASE("bfloat16 tensors from lists, joined, selected and updated in place",
                  "[core][bfloat16]") {
  // A braced list of numbers, each rounded (2.502 -> 2.5: steps of 1/64 between 2 and 4).
  const tensor<bfloat16, B> a = meld::from_range<bfloat16, B>({1, 2.502, -3});
  tensor<bfloat16, B> c = meld::concatenate(0, a, a);
  c = meld::where(c > 2.f, c, 0.f);
  c += 1.f;
  c *= c;  // read as float, squared, rounded once
  const tensor<bfloat16> h = meld::to<meld::cpu<>>(c);
  const float want[] = {1, 12.25f, 1, 1, 12.25f, 1};
  for (meld::index_t i = 0; i < 6; ++i) REQUIRE(float(h(i)) == want[i]);
  REQUIRE(meld::to_string(meld::to<meld::cpu<>>(a)).find("[ 1.0000,  2.5000, -3.0000]") !=
          std::string::npos);
}

// ---- half ---------------------------------------------------------------------------------------

namespace {

// The value of half bits b from the IEEE binary16 fields, in double (NaN for NaNs).
double half_value(std::uint16_t b) {
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  const double sign = (b & 0x8000) ? -1 : 1;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

bool is_half_nan(std::uint16_t b) {
  return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
}

bool same_value(meld::half a, meld::half b) {
  return a.bits == b.bits || (is_half_nan(a.bits) && is_half_nan(b.bits));
}

}  // namespace

TEST_CASE("meld::half widens every one of its 65,536 values exactly", "[core][half]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    INFO("bits " << b);
    const float f = meld::half::from_raw(bits);
    if (is_half_nan(bits)) {
      REQUIRE(std::isnan(f));
      const meld::half back(f);  // quiet, with the payload's bits kept
      REQUIRE(back.bits == (bits | 0x200u));
    } else {
      REQUIRE(double(f) == half_value(bits));
      REQUIRE(meld::half(f).bits == bits);
    }
  }
}

TEST_CASE("meld::half rounds floats to nearest, ties to even, at every boundary", "[core][half]") {
  // Between each non-negative finite value and the next (infinity after 65504), subnormals
  // included: the midpoint (a float: half has 13 fewer mantissa bits) goes to the even one, the
  // floats beside it to the nearer one.
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {
    const double lo = half_value(static_cast<std::uint16_t>(b));
    const double hi = b == 0x7bff ? 65536.0 : half_value(static_cast<std::uint16_t>(b + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);
    REQUIRE(double(mid) == (lo + hi) / 2);  // exact
    const auto even = static_cast<std::uint16_t>(b % 2 == 0 ? b : b + 1);
    for (const float sign : {1.f, -1.f}) {
      const std::uint16_t s = sign < 0 ? 0x8000 : 0;
      INFO("between bits " << b << " and " << b + 1 << ", sign " << sign);
      REQUIRE(meld::half(sign * mid).bits == (even | s));
      const float below = std::nextafter(mid, 0.f), above = std::nextafter(mid, INFINITY);
      REQUIRE(meld::half(sign * below).bits == (b | s));
      REQUIRE(meld::half(sign * above).bits == ((b + 1) | s));
    }
  }
  REQUIRE(meld::half(1e-10f).bits == 0);        // far below the smallest subnormal
  REQUIRE(meld::half(-1e30f).bits == 0xfc00u);  // far beyond the largest value
  REQUIRE(meld::half(INFINITY).bits == 0x7c00u);
}

SYNC_BACKEND_TEST_CASE("meld::half tensors convert as the scalar conversion does", "[core][half]") {
  // Every half value widened (the SIMD widening, F16C where the target has it) ...
  std::vector<meld::half> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b)
    all[b] = meld::half::from_raw(static_cast<std::uint16_t>(b));
  const tensor<meld::half, B> h = test::on<B>(meld::from_span(std::span<const meld::half>(all)));
  const tensor<float> w = meld::to<meld::cpu<>>(tensor<float, B>(meld::cast<float>(h)));
  for (std::uint32_t b = 0; b < 65536; ++b) {
    INFO("bits " << b);
    const float want = all[b];
    REQUIRE((bits_of(w(b)) == bits_of(want) || (std::isnan(w(b)) && std::isnan(want))));
  }
  // ... and floats around every boundary and over the whole range narrowed.
  std::vector<float> values = hard_floats(20000);
  for (float f : {65504.f, 65519.f, 65520.f, 6.1e-5f, 5.9604645e-8f, 2.9802322e-8f, 1e-8f})
    for (float sign : {1.f, -1.f}) values.push_back(sign * f);
  const tensor<float, B> x = test::on<B>(meld::from_span(std::span<const float>(values)));
  const tensor<meld::half> n =
      meld::to<meld::cpu<>>(tensor<meld::half, B>(meld::cast<meld::half>(x)));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ", float bits " << bits_of(values[i]));
    REQUIRE(same_value(n(static_cast<meld::index_t>(i)), meld::half(values[i])));
  }
  // A cast inside a float expression: its lanes rounded, the rest computed in float.
  const tensor<float> error =
      meld::to<meld::cpu<>>(tensor<float, B>(meld::cast<meld::half>(x) - x));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ", float bits " << bits_of(values[i]));
    const float e = error(static_cast<meld::index_t>(i));
    const float want = float(meld::half(values[i])) - values[i];
    REQUIRE((bits_of(e) == bits_of(want) || (std::isnan(e) && std::isnan(want))));
  }
}

BACKEND_TEST_CASE("expressions and products of meld::half compute in float", "[core][half]") {
  const tensor<float> ha = test::random_tensor<float>({19, 40}, 31, -2, 2);
  const tensor<float> hb = test::random_tensor<float>({40, 7}, 32, -2, 2);
  const tensor<meld::half, B> a = meld::cast<meld::half>(test::on<B>(ha));
  const tensor<meld::half, B> b = meld::cast<meld::half>(test::on<B>(hb));
  const tensor<meld::half> ah = meld::to<meld::cpu<>>(a), bh = meld::to<meld::cpu<>>(b);
  const tensor<meld::half, B> y = a * a - 1.f;
  const tensor<meld::half> yh = meld::to<meld::cpu<>>(y);
  for (meld::index_t i = 0; i < 19; ++i)
    for (meld::index_t j = 0; j < 40; ++j) {
      const double av = float(ah(i, j));
      REQUIRE(float(yh(i, j)) == Approx(av * av - 1).epsilon(0x1p-11).margin(1e-6));
    }
  REQUIRE(float(test::value(meld::sum(a))) ==
          Approx(std::accumulate(ah.begin(), ah.end(), 0.0, [](double s, meld::half v) {
            return s + float(v);
          })).margin(1e-3));
  const tensor<float, B> c = meld::matmul(meld::cast<float>(a), meld::cast<float>(b));
  const tensor<meld::half, B> c16 = meld::matmul(a, b);
  const tensor<float> ch = meld::to<meld::cpu<>>(c);
  const tensor<meld::half> c16h = meld::to<meld::cpu<>>(c16);
  for (meld::index_t i = 0; i < 19; ++i)
    for (meld::index_t j = 0; j < 7; ++j) {
      double ref = 0, size = 0;
      for (meld::index_t p = 0; p < 40; ++p) {
        ref += double(float(ah(i, p))) * double(float(bh(p, j)));
        size += std::fabs(double(float(ah(i, p))) * double(float(bh(p, j))));
      }
      REQUIRE(ch(i, j) == Approx(ref).margin(size * 40 * 0x1p-24));
      REQUIRE(float(c16h(i, j)) == Approx(ref).epsilon(0x1p-11).margin(size * 40 * 0x1p-24));
    }
}
