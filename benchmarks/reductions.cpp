// Full reductions: sum(x), dot(x, z) and sum(x * z + w), meld vs a hand loop vs Eigen 3.4.
//
// The hand loop is the one a performance-minded programmer writes: xsimd batches of the native
// width, four independent accumulators (so that the additions' latency overlaps), a horizontal sum
// at the end and a scalar tail. (A plain `s += x[i]` loop is latency-bound and ~20x slower, since
// the compiler may not reorder float additions.) With more than one thread: OpenMP, one contiguous
// segment per thread, partial sums added in thread order. Eigen: its own redux (x.sum(),
// x.matrix().dot(z.matrix()), (x * z + w).sum()), threaded the same way.
//
// Each benchmark also reports its result's error against a double-precision reference, in units of
// eps * sum |terms| (counter err_eps).
//
// var over 2^24 floats: meld::var's one pass (Welford lanes in double, merged with Chan's formula)
// against the two passes it replaced (meld::mean, then meld::sum(square(x - mean)), pairwise in
// float), and STREAM triad (y = x + 3 z, a meld expression) on arrays of the same size for the
// memory bandwidth of the same run. Bytes count one read of x for both vars (12 per element for
// triad); rel_err is against two passes in double. Run interleaved, best of N:
//   meld_bench --benchmark_filter='^var/' --benchmark_enable_random_interleaving=true
//              --benchmark_repetitions=10 --benchmark_report_aggregates_only=true  (rows "_min")
#include "common.hpp"

#include <Eigen/Core>
#include <xsimd/xsimd.hpp>

namespace {

using bench::index_t;
using batch = xsimd::batch<float>;

// The three cases as functions of batches (or scalars) of x, z, w.
struct sum_case {
  static constexpr int streams = 1;
  static constexpr const char* name = "sum";
  template <class V>
  static V term(V x, V, V) {
    return x;
  }
};
struct dot_case {
  static constexpr int streams = 2;
  static constexpr const char* name = "dot";
  template <class V>
  static V term(V x, V z, V) {
    return x * z;
  }
};
struct sum_fma_case {
  static constexpr int streams = 3;
  static constexpr const char* name = "sum_xz_w";
  template <class V>
  static V term(V x, V z, V w) {
    return x * z + w;
  }
};

template <class Case>
__attribute__((noinline)) float hand_reduce(const float* x, const float* z, const float* w,
                                            index_t n) {
  constexpr index_t W = batch::size;
  auto at = [&](index_t i) {
    return Case::term(batch::load_unaligned(x + i),
                      Case::streams > 1 ? batch::load_unaligned(z + i) : batch(0.f),
                      Case::streams > 2 ? batch::load_unaligned(w + i) : batch(0.f));
  };
  batch a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  index_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 += at(i);
    a1 += at(i + W);
    a2 += at(i + 2 * W);
    a3 += at(i + 3 * W);
  }
  for (; i + W <= n; i += W) a0 += at(i);
  float s = xsimd::hadd((a0 + a1) + (a2 + a3));
  for (; i < n; ++i)
    s += Case::term(x[i], Case::streams > 1 ? z[i] : 0.f, Case::streams > 2 ? w[i] : 0.f);
  return s;
}

struct inputs {
  meld::tensor<float> x, z, w;
  double want = 0, abs_sum = 0;  // the exact-ish result and sum |terms|, in double
  explicit inputs(index_t n) : x(bench::data(n, 1)), z(bench::data(n, 2)), w(bench::data(n, 3)) {}
  template <class Case>
  void reference() {
    want = abs_sum = 0;
    for (index_t i = 0; i < x.size(); ++i) {
      const double t = Case::term(double(x.data()[i]), double(z.data()[i]), double(w.data()[i]));
      want += t;
      abs_sum += std::abs(t);
    }
  }
};

template <class Case>
float meld_reduce(const inputs& in) {
  if constexpr (std::is_same_v<Case, sum_case>)
    return meld::sum(in.x);
  else if constexpr (std::is_same_v<Case, dot_case>)
    return meld::dot(in.x, in.z);
  else
    return meld::sum(in.x * in.z + in.w);
}

template <class Case>
void reduce_meld(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  inputs in(n);
  in.reference<Case>();
  float r = 0;
  for (auto _ : state) {
    r = meld_reduce<Case>(in);
    benchmark::DoNotOptimize(r);
  }
  state.counters["err_eps"] = bench::error_in_eps(r, in.want, in.abs_sum);
  bench::set_bytes(state, n, Case::streams);
}

template <class Case>
void reduce_hand(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  inputs in(n);
  in.reference<Case>();
  const float *x = in.x.data(), *z = in.z.data(), *w = in.w.data();
  std::vector<float> partial(static_cast<std::size_t>(threads));
  float r = 0;
  for (auto _ : state) {
    if (threads == 1) {
      r = hand_reduce<Case>(x, z, w, n);
    } else {
      std::fill(partial.begin(), partial.end(), 0.f);
      bench::segments(n, threads, [&](index_t lo, index_t hi) {
        partial[static_cast<std::size_t>(omp_get_thread_num())] =
            hand_reduce<Case>(x + lo, z + lo, w + lo, hi - lo);
      });
      r = 0;
      for (float p : partial) r += p;
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["err_eps"] = bench::error_in_eps(r, in.want, in.abs_sum);
  bench::set_bytes(state, n, Case::streams);
}

template <class Case>
float eigen_reduce(const Eigen::ArrayXf& x, const Eigen::ArrayXf& z, const Eigen::ArrayXf& w,
                   index_t lo, index_t len) {
  if constexpr (std::is_same_v<Case, sum_case>)
    return x.segment(lo, len).sum();
  else if constexpr (std::is_same_v<Case, dot_case>)
    return x.matrix().segment(lo, len).dot(z.matrix().segment(lo, len));
  else
    return (x.segment(lo, len) * z.segment(lo, len) + w.segment(lo, len)).sum();
}

template <class Case>
void reduce_eigen(benchmark::State& state) {
  const index_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  bench::use_threads(threads);
  inputs in(n);
  in.reference<Case>();
  const Eigen::ArrayXf x = Eigen::Map<const Eigen::ArrayXf>(in.x.data(), n);
  const Eigen::ArrayXf z = Eigen::Map<const Eigen::ArrayXf>(in.z.data(), n);
  const Eigen::ArrayXf w = Eigen::Map<const Eigen::ArrayXf>(in.w.data(), n);
  std::vector<float> partial(static_cast<std::size_t>(threads));
  float r = 0;
  for (auto _ : state) {
    if (threads == 1) {
      r = eigen_reduce<Case>(x, z, w, 0, n);
    } else {
      std::fill(partial.begin(), partial.end(), 0.f);
      bench::segments(n, threads, [&](index_t lo, index_t hi) {
        partial[static_cast<std::size_t>(omp_get_thread_num())] =
            eigen_reduce<Case>(x, z, w, lo, hi - lo);
      });
      r = 0;
      for (float p : partial) r += p;
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["err_eps"] = bench::error_in_eps(r, in.want, in.abs_sum);
  bench::set_bytes(state, n, Case::streams);
}

// ---- var ----------------------------------------------------------------------------------------

constexpr index_t var_n = index_t(1) << 24;

// n = 2^24 at one and all threads, with the best repetition as an aggregate ("_min").
void var_args(benchmark::internal::Benchmark* b) {
  for (int t : bench::thread_counts()) b->Args({var_n, t});
  b->ArgNames({"n", "t"});
  b->UseRealTime();
  b->ComputeStatistics(
      "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

double two_pass_double(const meld::tensor<float>& x) {
  double mean = 0, ss = 0;
  for (float v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (float v : x) ss += (v - mean) * (v - mean);
  return ss / static_cast<double>(x.size());
}

template <bool OnePass>
void var_bench(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  const meld::tensor<float> x = bench::data(n, 1);
  float r = 0;
  for (auto _ : state) {
    if constexpr (OnePass) {
      r = meld::var(x);
    } else {
      const float m = meld::mean(x);
      r = meld::sum(meld::square(x - m)) / static_cast<float>(n);
    }
    benchmark::DoNotOptimize(r);
  }
  const double want = two_pass_double(x);
  state.counters["rel_err"] = std::abs(r - want) / want;
  bench::set_bytes(state, n, 1);
}

void var_triad(benchmark::State& state) {
  const index_t n = state.range(0);
  bench::use_threads(static_cast<int>(state.range(1)));
  const meld::tensor<float> x = bench::data(n, 1), z = bench::data(n, 2);
  meld::tensor<float> y({n});
  for (auto _ : state) {
    y = x + 3.f * z;
    benchmark::DoNotOptimize(y.data());
  }
  bench::set_bytes(state, n, 3);
}

BENCHMARK(var_bench<true>)->Name("var/meld_one_pass")->Apply(var_args);
BENCHMARK(var_bench<false>)->Name("var/two_pass")->Apply(var_args);
BENCHMARK(var_triad)->Name("var/triad")->Apply(var_args);

BENCHMARK(reduce_meld<sum_case>)->Name("sum/meld")->Apply(bench::size_and_threads);
BENCHMARK(reduce_hand<sum_case>)->Name("sum/hand")->Apply(bench::size_and_threads);
BENCHMARK(reduce_eigen<sum_case>)->Name("sum/eigen")->Apply(bench::size_and_threads);
BENCHMARK(reduce_meld<dot_case>)->Name("dot/meld")->Apply(bench::size_and_threads);
BENCHMARK(reduce_hand<dot_case>)->Name("dot/hand")->Apply(bench::size_and_threads);
BENCHMARK(reduce_eigen<dot_case>)->Name("dot/eigen")->Apply(bench::size_and_threads);
BENCHMARK(reduce_meld<sum_fma_case>)->Name("sum_xz_w/meld")->Apply(bench::size_and_threads);
BENCHMARK(reduce_hand<sum_fma_case>)->Name("sum_xz_w/hand")->Apply(bench::size_and_threads);
BENCHMARK(reduce_eigen<sum_fma_case>)->Name("sum_xz_w/eigen")->Apply(bench::size_and_threads);

}  // namespace
