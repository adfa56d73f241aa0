// A tour of meld's API: the snippets of the README, compiled and checked (run as a test).
// The blocks between /* [name] */ markers appear in the API reference (Doxygen \snippet).
#include <cmath>
#include <cstdio>
#include <cstdlib>

/* [include] */
#include <meld/meld.hpp>
/* [include] */

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "tour: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

int main() {
  // --- tensors and fused expressions ---
  /* [fused] */
  meld::tensor<float> x({1 << 20}), z({1 << 20}), y({1 << 20});  // zero-filled, CPU, synchronous
  x = meld::uniform<float>({1 << 20}, -1.f, 1.f, /*seed=*/42);
  z = 0.5f;
  y = 2.f * x + meld::exp(z) - x * z;  // one SIMD loop over all cores, no temporaries
  float s = meld::sum(x * z);          // a fused map-reduce
  /* [fused] */
  CHECK(std::abs(y(7) - (2.f * x(7) + std::exp(0.5f) - x(7) * 0.5f)) < 1e-5f);
  CHECK(std::abs(s - 0.5f * meld::sum(x)) < 1e-2f);

  /* [lazy] */
  auto e = x + z;  // an expression: nothing is computed yet
  y = e * e;       // evaluated here, in one pass
  /* [lazy] */
  CHECK(std::abs(y(3) - (x(3) + 0.5f) * (x(3) + 0.5f)) < 1e-5f);

  // --- broadcasting, as in numpy ---
  /* [broadcast] */
  meld::tensor<float> m({64, 1}), n({1, 32});
  m = 2.f;
  n = 3.f;
  meld::tensor<float> outer = m * n;  // shape {64, 32}
  /* [broadcast] */
  CHECK(outer.shape() == meld::shape_t({64, 32}) && outer(63, 31) == 6.f);

  // --- views: slices, transposes, reshapes share memory ---
  /* [views] */
  meld::tensor<float> a = meld::arange<float>(12.f).reshape({3, 4});
  auto row = a.slice(1);                                  // {4}: the second row
  auto evens = a.slice(meld::all, meld::range(0, 4, 2));  // {3, 2}: every other column
  auto at = a.transpose();                                // {4, 3}
  row += 100.f;                                           // writes into a
  /* [views] */
  CHECK(a(1, 2) == 106.f && evens(2, 1) == 10.f && at(3, 0) == 3.f);

  // --- reductions, whole and along an axis ---
  /* [reductions] */
  meld::tensor<float> col_sums = meld::sum(a, 0);                // {4}
  meld::tensor<float> p = meld::exp(a - meld::max(a, 1, true));  // a stable softmax numerator
  p /= meld::sum(p, 1, true);
  /* [reductions] */
  CHECK(col_sums(0) == 0.f + 104.f + 8.f);
  CHECK(std::abs(meld::sum(p) - 3.f) < 1e-5f);
  CHECK(meld::argmax(a) == 7);

  // --- copies are explicit ---
  /* [copies] */
  meld::tensor<float> copy(a);  // deep copy; `auto copy = a;` would not compile
  meld::tensor<float> same = a.clone();
  copy(0, 0) = -1.f;
  /* [copies] */
  CHECK(a(0, 0) == 0.f && same(0, 0) == 0.f);

  // --- errors name what was wrong ---
  /* [errors] */
  try {
    meld::tensor<float> bad = a + meld::tensor<float>({5});
    CHECK(false);
  } catch (const meld::shape_error& err) {
    std::printf("expected error: %s\n", err.what());
  }
  /* [errors] */

  std::printf("tour ok: s=%g, threads=%d\n", static_cast<double>(s), meld::num_threads());
  return 0;
}
