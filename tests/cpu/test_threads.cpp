// The threaded and vectorized paths: tails, odd sizes, unaligned views and 1..N threads, against
// the scalar reference and against each other.
#include "../support.hpp"

using meld::index_t;
using meld::range;
using meld::shape_t;
using meld::tensor;
using test::at;
using test::check_elements;
using test::index_list;

using test::thread_count_guard;

TEST_CASE("MELD_NUM_THREADS and set_num_threads choose the pool size", "[cpu]") {
  thread_count_guard guard;
  meld::set_num_threads(3);
  REQUIRE(meld::num_threads() == 3);
  meld::set_num_threads(1);
  REQUIRE(meld::num_threads() == 1);
  REQUIRE_THROWS_AS(meld::set_num_threads(0), std::invalid_argument);
}

TEST_CASE("every size near the vector width and the parallel split", "[cpu][big]") {
  thread_count_guard guard;
  for (int threads : {1, 2, 3, 4}) {
    meld::set_num_threads(threads);
    for (index_t n : {index_t(1), index_t(15), index_t(16), index_t(17), index_t(63), index_t(65),
                      index_t(1023), index_t(131071), index_t(400003)}) {
      INFO("threads " << threads << " n " << n);
      auto x = test::random_tensor<float>({n}, std::uint32_t(n));
      auto z = test::random_tensor<float>({n}, std::uint32_t(n + 1));
      tensor<float> y = 2.f * x + 3.f * z - 0.5f * x * z;
      const float* px = x.data();
      const float* pz = z.data();
      for (index_t i = 0; i < n; ++i) {
        const float want = 2.f * px[i] + 3.f * pz[i] - 0.5f * px[i] * pz[i];
        if (std::abs(y.data()[i] - want) > 1e-5f * (1 + std::abs(want))) FAIL("element " << i);
      }
      // Unaligned, offset views: chunk boundaries fall inside cache lines of the source.
      auto xs = x.slice(range(n > 1 ? 1 : 0, n));
      tensor<float> ys = meld::exp(xs) + xs;
      check_elements(ys, [&](const index_list& i) { return std::exp(at(xs, i)) + at(xs, i); });
    }
  }
}

// Every length from 1 to past two vector widths (up to 16 lanes), on every element type, at every
// start offset within a cache line: each element matches the scalar reference, and the elements
// just before and after the destination keep their values (partial batches load and store only
// their own lanes).
TEMPLATE_TEST_CASE("tails of every length and element type leave neighbours untouched", "[cpu]",
                   float, double, std::int32_t, std::int64_t) {
  using T = TestType;
  thread_count_guard guard;
  meld::set_num_threads(1);
  constexpr index_t guard_value = 77, pad = 16;
  for (index_t n = 1; n <= 40; ++n) {
    for (index_t offset : {index_t(0), index_t(1), index_t(3), index_t(7)}) {
      INFO("n " << n << " offset " << offset);
      auto x = test::random_tensor<T>({n + 2 * pad}, std::uint32_t(n * 8 + offset));
      auto z = test::random_tensor<T>({n + 2 * pad}, std::uint32_t(n * 8 + offset + 1000));
      tensor<T> out({n + 2 * pad});
      out = T(guard_value);
      auto xs = x.slice(range(pad + offset, pad + offset + n));
      auto zs = z.slice(range(pad - offset, pad - offset + n));
      auto dst = out.slice(range(pad + offset, pad + offset + n));
      dst = xs * T(3) - zs + meld::maximum(xs, zs);  // flat path: contiguous views
      tensor<T> fresh = xs * T(3) - zs + meld::maximum(xs, zs);
      for (index_t i = 0; i < n + 2 * pad; ++i) {
        const bool inside = i >= pad + offset && i < pad + offset + n;
        if (!inside) {
          REQUIRE(out(i) == T(guard_value));
          continue;
        }
        const T a = xs(i - pad - offset), b = zs(i - pad - offset);
        const T want = static_cast<T>(a * T(3) - b + std::max(a, b));
        // Exact for integers; floats may differ by the rounding of a fused multiply-add.
        const double tol = std::is_integral_v<T> ? 0.0 : 1e-5 * (1 + std::abs(double(want)));
        REQUIRE(std::abs(double(out(i)) - double(want)) <= tol);
        REQUIRE(std::abs(double(fresh(i - pad - offset)) - double(want)) <= tol);
      }
      // A reduction's tail: sum over the same lengths, against a double reference.
      double want = 0;
      for (index_t i = 0; i < n; ++i) want += static_cast<double>(xs(i));
      REQUIRE(static_cast<double>(meld::sum(xs)) == Approx(want).margin(1e-4));
    }
  }
}

// Destinations of 16 MiB and more are written with non-temporal stores (executor.hpp,
// stream_store_bytes): an unaligned start, a partial last batch, comparisons, broadcast rows and
// doubles, on 1..3 threads, against the scalar reference.
TEST_CASE("large destinations (streaming stores) get every element right", "[cpu][big]") {
  thread_count_guard guard;
  const index_t n = (index_t(16) << 20) / index_t(sizeof(float)) + 37;
  auto x = test::random_tensor<float>({n + 1}, 11);
  auto z = test::random_tensor<float>({n + 1}, 12);
  const auto xs = x.slice(range(1, n + 1));  // starts 4 bytes past a cache line
  const auto zs = z.slice(range(0, n));
  auto m = test::random_tensor<float>({2049, 2051}, 13);  // 16.8 MB, rows not multiples of 16
  auto v = test::random_tensor<float>({2051}, 14);
  auto d = test::random_tensor<double>({(index_t(16) << 20) / 8 + 5}, 15);
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    meld::set_num_threads(threads);
    tensor<float> y = 1.5f * xs - zs * xs;
    tensor<float> c = xs > zs;
    tensor<float> b = m + v;
    tensor<double> dd = d * 2.0 + 1.0;
    for (index_t i = 0; i < n; ++i) {
      const float a = xs(i), w = zs(i);
      if (std::abs(y(i) - (1.5f * a - w * a)) > 1e-5f * (1 + std::abs(1.5f * a - w * a)))
        FAIL("y element " << i);
      if (c(i) != (a > w ? 1.f : 0.f)) FAIL("c element " << i);
    }
    for (index_t r = 0; r < 2049; ++r)
      for (index_t j = 0; j < 2051; ++j)
        if (b(r, j) != m(r, j) + v(j)) FAIL("b element " << r << ", " << j);
    for (index_t i = 0; i < d.size(); ++i)
      if (dd(i) != d(i) * 2.0 + 1.0) FAIL("dd element " << i);
  }
}

// Freed blocks of 4 MiB and more are kept for the next tensor of the same size (memory.hpp):
// the same memory comes back, a different size gets its own, and release() empties the cache.
TEST_CASE("large host blocks are reused by the next tensor of their size", "[cpu]") {
  auto& cache = meld::detail::large_block_cache::global();
  cache.release();
  const index_t n = (index_t(4) << 20) / index_t(sizeof(float)) + 3;
  const float* first = nullptr;
  {
    tensor<float> a({n}, meld::uninitialized);
    first = a.data();
  }
  if (MELD_ASAN_BUILD) {  // nothing is cached there, so that a use after free is detected
    CHECK(cache.cached_bytes() == 0);
    return;
  }
  CHECK(cache.cached_bytes() >= std::size_t(n) * sizeof(float));
  tensor<float> other({2 * n}, meld::uninitialized);
  CHECK(other.data() != first);
  tensor<float> again({n});  // zero-initialized on reuse too
  CHECK(again.data() == first);
  CHECK(meld::sum(again) == 0.f);
  CHECK(cache.cached_bytes() == 0);
  cache.release();
}

TEST_CASE("multi-dimensional work splits across threads", "[cpu]") {
  thread_count_guard guard;
  auto m = test::random_tensor<float>({301, 517}, 1);
  auto v = test::random_tensor<float>({517}, 2);
  auto c = test::random_tensor<float>({301, 1}, 3);
  meld::set_num_threads(1);
  tensor<float> one = m * v + c - meld::sigmoid(m.transpose().transpose());
  tensor<float> col_one = meld::sum(m, 0);
  tensor<float> row_one = meld::max(m * 2.f, 1);
  for (int threads : {2, 3, 4}) {
    meld::set_num_threads(threads);
    tensor<float> many = m * v + c - meld::sigmoid(m.transpose().transpose());
    REQUIRE(meld::sum(meld::abs(many - one)) == 0.f);
    tensor<float> col = meld::sum(m, 0);
    tensor<float> row = meld::max(m * 2.f, 1);
    REQUIRE(meld::sum(col != col_one) == 0);
    REQUIRE(meld::sum(row != row_one) == 0);
  }
}

TEST_CASE("reductions give the same bits for any thread count", "[cpu]") {
  thread_count_guard guard;
  auto x = meld::normal<float>({3'000'017}, 0.f, 1.f, 5);
  meld::set_num_threads(1);
  const float s1 = meld::sum(x * x + 1.f);
  const float d1 = meld::dot(x, x);
  const index_t a1 = meld::argmax(x);
  const float m1 = meld::max(x);
  const float v1 = meld::var(x + 1e3f);  // var's moments: blocks and merges at fixed places too
  const auto rows = x.slice(meld::range(0, 3'000'000)).reshape({1000, 3000});
  const tensor<float> r1 = meld::var(rows, 1, false), c1 = meld::var(rows, 0, false);
  for (int threads : {2, 3, 4, 7}) {
    meld::set_num_threads(threads);
    REQUIRE(meld::sum(x * x + 1.f) == s1);
    REQUIRE(meld::dot(x, x) == d1);
    REQUIRE(meld::argmax(x) == a1);
    REQUIRE(meld::max(x) == m1);
    REQUIRE(meld::var(x + 1e3f) == v1);
    REQUIRE(meld::sum(meld::var(rows, 1, false) != r1) == 0);
    REQUIRE(meld::sum(meld::var(rows, 0, false) != c1) == 0);
  }
}

TEST_CASE("the pool runs nested and concurrent loops without deadlock", "[cpu]") {
  thread_count_guard guard;
  meld::set_num_threads(2);
  std::atomic<int> count{0};
  meld::thread_pool::global().parallel_for(4, [&](index_t) {
    meld::thread_pool::global().parallel_for(3, [&](index_t) { ++count; });  // runs inline
  });
  REQUIRE(count == 12);
  // Two host threads evaluating at once: one gets the pool, the other runs alone.
  auto a = test::random_tensor<float>({1 << 20}, 1);
  tensor<float> r1, r2;
  std::thread t1([&] { r1 = a * 2.f; });
  std::thread t2([&] { r2 = a * 2.f; });
  t1.join();
  t2.join();
  REQUIRE(meld::sum(r1 != r2) == 0);
  REQUIRE_THROWS_AS(
      meld::thread_pool::global().parallel_for(8,
                                               [](index_t i) {
                                                 if (i == 5)
                                                   throw std::runtime_error("task 5 failed");
                                               }),
      std::runtime_error);
  tensor<float> after = a + 1.f;  // the pool is usable after a failed loop
  REQUIRE(after(0) == a(0) + 1.f);
}
