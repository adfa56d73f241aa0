// One-pass moments (count, mean, M2) on the CPU, for var and std: the block_reducer of
// reducers::squared_deviations (full reductions and reductions along a contiguous axis) and the
// per-position update of the output-major axis reduction.
//
// Accumulated in double whatever the elements (float and int32 batches are widened as they are
// read): float accumulators would lose eps_float * kappa of M2 (kappa = |mean| / std), 10 %
// already for data around 10^6 with a spread of 1. Every SIMD lane of four accumulators runs
// Welford's update (d = x - mean; mean += d / k; M2 += d (x - mean)) over one element per step, so
// that the count k is the same in every lane and 1 / k is one scalar per step (a table). After
// `span` steps a block's accumulators are merged with Chan's formula (detail::merge_moments) and
// pushed onto a pairwise stack, whose lanes are merged at the end in a fixed tree: the error of M2
// is O((span + log2(n)) eps kappa) in double. Elements that do not fill a step (row ends) go a
// batch at a time, each batch's moments by two passes over its lanes, onto a second pairwise stack.
// As for sums, the order depends only on the operand's layout, so a var gives the same bits for any
// thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../../core/gcc12_warnings.hpp"
#include "../../expr/reduce.hpp"
#include "loops.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// The element types whose batches the moments read (others take the scalar loop).
template <class V>
inline constexpr bool widens_to_double =
    std::is_same_v<V, float> || std::is_same_v<V, double> || std::is_same_v<V, std::int32_t> ||
    std::is_same_v<V, std::int64_t>;

// Batches of doubles per batch of elements: two for 4-byte elements, one for 8-byte ones.
template <class Batch>
inline constexpr int double_parts = sizeof(typename Batch::value_type) == 4 ? 2 : 1;

#if !defined(__CUDACC__)
// A batch of 4-byte elements (float, int32) as two batches of doubles, its low and high halves; in
// registers on x86.
template <class Batch>
MELD_INLINE void widen(const Batch& b, batch_for<double>& lo, batch_for<double>& hi) {
  using Arch = typename Batch::arch_type;
  using D = xsimd::batch<double, Arch>;  // batch_for<double>, named through Arch (dependent)
  using T = typename Batch::value_type;
  static_assert(Batch::size == 2 * D::size);
  [[maybe_unused]] constexpr bool is_float = std::is_same_v<T, float>;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    if constexpr (is_float) {
      const __m512 v = b;
      lo = D(_mm512_cvtps_pd(_mm512_castps512_ps256(v)));
      hi = D(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    } else {
      const __m512i v = b;
      lo = D(_mm512_cvtepi32_pd(_mm512_castsi512_si256(v)));
      hi = D(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(v, 1)));
    }
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, Arch>) {
    if constexpr (is_float) {
      const __m256 v = b;
      lo = D(_mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi = D(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    } else {
      const __m256i v = b;
      lo = D(_mm256_cvtepi32_pd(_mm256_castsi256_si128(v)));
      hi = D(_mm256_cvtepi32_pd(_mm256_extractf128_si256(v, 1)));
    }
    return;
  }
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, Arch>) {
    if constexpr (is_float) {
      const __m128 v = b;
      lo = D(_mm_cvtps_pd(v));
      hi = D(_mm_cvtps_pd(_mm_movehl_ps(v, v)));
    } else {
      const __m128i v = b;
      lo = D(_mm_cvtepi32_pd(v));
      hi = D(_mm_cvtepi32_pd(_mm_unpackhi_epi64(v, v)));
    }
    return;
  }
#endif
  alignas(64) T in[Batch::size];
  alignas(64) double out[Batch::size];
  b.store_aligned(in);
  for (std::size_t l = 0; l < Batch::size; ++l) out[l] = static_cast<double>(in[l]);
  lo = D::load_aligned(out);
  hi = D::load_aligned(out + D::size);
}
#endif

// The batch(es) of doubles of one batch of elements, into x[0] (and x[1]).
template <class Batch, class X>
MELD_INLINE void to_doubles(const Batch& b, X& x0, [[maybe_unused]] X& x1) {
#if !defined(__CUDACC__)
  if constexpr (double_parts<Batch> == 2)
    widen(b, x0, x1);
  else
    x0 = xsimd::batch_cast<double>(b);
#endif
}

// 1 / k for the counts k of a block (k <= 256): a table rather than a division, whose latency
// would lengthen each scalar update's chain (rows of a few elements run nothing else).
inline constexpr auto reciprocals = [] {
  struct table {
    double of[257];
  } t{};
  for (int k = 1; k <= 256; ++k) t.of[k] = 1.0 / k;
  return t;
}();

// a * b + c, fused where the batch's instruction set has it.
template <class X>
MELD_INLINE X multiply_add(const X& a, const X& b, const X& c) {
  if constexpr (std::is_arithmetic_v<X>)
    return a * b + c;
  else
    return xsimd::fma(a, b, c);
}

// Batch: batches of the elements (widens_to_double) that the cursor loads, or void for the scalar
// loop (any element type, converted to double).
template <class Batch>
struct block_reducer<reducers::squared_deviations, moments<double>, Batch> {
  using R = reducers::squared_deviations;
  using X = std::conditional_t<std::is_void_v<Batch>, double, batch_for<double>>;
  static constexpr index_t lanes = batch_size<std::conditional_t<std::is_void_v<Batch>, void, X>>;
  static constexpr int U = 4;                 // accumulators (independent chains)
  static constexpr index_t step = U * lanes;  // elements per step: one per lane
  static constexpr index_t span = 32;         // steps per block
  static constexpr index_t scalar_span = 256;

  X mean[U], m2[U];
  index_t k = 0;  // steps taken in the current block
  pairwise_stack<R, moments<X>> blocks;
  double scalar_mean = 0, scalar_m2 = 0;
  index_t scalar_k = 0;
  pairwise_stack<R, moments<double>> scalar_blocks;

  block_reducer() { reset(); }

  // Starts over after finish(), which has reset the accumulators.
  void clear() {
    blocks.top = 0;
    scalar_blocks.top = 0;
  }

  template <class C>
  MELD_INLINE void consume(const C& c, index_t j, index_t end) {
    // The accumulators live in locals during the loop (see block_reducer).
    X m0 = mean[0], m1 = mean[1], m2_ = mean[2], m3 = mean[3];
    X s0 = m2[0], s1 = m2[1], s2 = m2[2], s3 = m2[3];
    index_t taken = k;
    while (end - j >= step) {
      const index_t stop = std::min(span - taken, (end - j) / step);
      for (index_t t = 0; t < stop; ++t, j += step) {
        X x0, x1, x2, x3;
        load_step(c, j, x0, x1, x2, x3);
        const X inv(reciprocals.of[++taken]);
        auto update = [&](X& m, X& s, const X& x) {
          const X d = x - m;
          m = multiply_add(d, inv, m);
          s = multiply_add(d, x - m, s);
        };
        update(m0, s0, x0);
        update(m1, s1, x1);
        update(m2_, s2, x2);
        update(m3, s3, x3);
      }
      if (taken == span) {
        mean[0] = m0, mean[1] = m1, mean[2] = m2_, mean[3] = m3;
        m2[0] = s0, m2[1] = s1, m2[2] = s2, m2[3] = s3;
        k = taken;
        flush();
        taken = 0;
        m0 = m1 = m2_ = m3 = s0 = s1 = s2 = s3 = X(0.0);
      }
    }
    mean[0] = m0, mean[1] = m1, mean[2] = m2_, mean[3] = m3;
    m2[0] = s0, m2[1] = s1, m2[2] = s2, m2[3] = s3;
    k = taken;
    if (j < end) consume_scalar(c, j, end);
  }

  moments<double> finish() {
    if (k) flush();
    if (scalar_k) flush_scalar();
    const R op{};
    moments<double> out(0, 0, 0);
    if (blocks.top == 0) {  // (rows shorter than a step: nothing to pass around)
    } else if constexpr (std::is_void_v<Batch>) {
      out = blocks.result(out);
    } else {
      // The lanes (of one count) in a fixed tree: lane l meets lane l + width.
      const moments<X> total = blocks.result(moments<X>(0, X(0.0), X(0.0)));
      alignas(64) double mean_lanes[lanes], m2_lanes[lanes];
      total.mean.store_aligned(mean_lanes);
      total.m2.store_aligned(m2_lanes);
      moments<double> l[lanes];
      for (index_t i = 0; i < lanes; ++i)
        l[i] = moments<double>(total.count, mean_lanes[i], m2_lanes[i]);
      for (index_t width = lanes / 2; width >= 1; width /= 2)
        for (index_t i = 0; i < width; ++i) l[i] = op(l[i], l[i + width]);
      out = l[0];
    }
    return op(out, scalar_blocks.result(moments<double>(0, 0, 0)));
  }

 private:
  void reset() {
    for (int u = 0; u < U; ++u) mean[u] = m2[u] = X(0.0);
    k = 0;
  }

  // One element per lane of each accumulator, as doubles.
  template <class C>
  MELD_INLINE void load_step(const C& c, index_t j, X& x0, X& x1, X& x2, X& x3) const {
    if constexpr (std::is_void_v<Batch>) {
      x0 = static_cast<double>(c.get(j));
      x1 = static_cast<double>(c.get(j + 1));
      x2 = static_cast<double>(c.get(j + 2));
      x3 = static_cast<double>(c.get(j + 3));
    } else if constexpr (double_parts<Batch> == 2) {
      to_doubles(Batch(c.template load<Batch>(j)), x0, x1);
      to_doubles(Batch(c.template load<Batch>(j + 2 * lanes)), x2, x3);
    } else {
      to_doubles(Batch(c.template load<Batch>(j)), x0, x0);
      to_doubles(Batch(c.template load<Batch>(j + lanes)), x1, x1);
      to_doubles(Batch(c.template load<Batch>(j + 2 * lanes)), x2, x2);
      to_doubles(Batch(c.template load<Batch>(j + 3 * lanes)), x3, x3);
    }
  }

  // Fewer than a step's elements (a row's end). Batches: each batch's moments by two passes over
  // its lanes (the mean, then the squared deviations: an error of a few eps whatever kappa, for so
  // few values), pushed onto the scalar stack; the batches come through the same SIMD code as the
  // others, so each element's value does not depend on where its row ends. Scalar loop: Welford's
  // update per element.
  template <class C>
  void consume_scalar(const C& c, index_t j, index_t end) {
    if constexpr (std::is_void_v<Batch>) {
      for (; j < end; ++j) update_scalar(static_cast<double>(c.get(j)));
    } else {
      constexpr index_t W = Batch::size;
      alignas(64) double iota[lanes];
      for (index_t l = 0; l < lanes; ++l) iota[l] = static_cast<double>(l);
      const X lane = X::load_aligned(iota);
      for (; j < end; j += W) {
        const index_t count = std::min(W, end - j);
        X x0, x1(0.0);
        to_doubles(count == W ? Batch(c.template load<Batch>(j))
                              : Batch(c.template load_tail<Batch>(j, count)),
                   x0, x1);  // lanes past count are 0
        const double mean = horizontal<reducers::sum, double>(x0 + x1) * reciprocals.of[count];
        const X d0 = xsimd::select(lane < X(static_cast<double>(count)), x0 - X(mean), X(0.0));
        X squares = d0 * d0;
        if constexpr (double_parts<Batch> == 2) {
          const X d1 =
              xsimd::select(lane < X(static_cast<double>(count - lanes)), x1 - X(mean), X(0.0));
          squares = multiply_add(d1, d1, squares);
        }
        scalar_blocks.push(moments<double>(static_cast<double>(count), mean,
                                           horizontal<reducers::sum, double>(squares)));
      }
    }
  }

  void update_scalar(double x) {
    const double d = x - scalar_mean;
    scalar_mean += d * reciprocals.of[++scalar_k];
    scalar_m2 += d * (x - scalar_mean);
    if (scalar_k == scalar_span) flush_scalar();
  }

  // The block's four accumulators (of count k each) merged and pushed.
  void flush() {
    const R op{};
    const double n = static_cast<double>(k);
    blocks.push(op(op(moments<X>(n, mean[0], m2[0]), moments<X>(n, mean[1], m2[1])),
                   op(moments<X>(n, mean[2], m2[2]), moments<X>(n, mean[3], m2[3]))));
    reset();
  }

  void flush_scalar() {
    scalar_blocks.push(moments<double>(static_cast<double>(scalar_k), scalar_mean, scalar_m2));
    scalar_mean = scalar_m2 = 0;
    scalar_k = 0;
  }
};

// The output-major axis reduction's state for a block of `Outputs` outputs (arrays, so that a row
// of outputs is updated with SIMD): per output, the moments of the blocks of the axis done (mean,
// m2) and of the block in progress. Blocks of `span` positions (about sqrt of the axis length) are
// updated with Welford's recurrence and merged into the total as each ends: the error of M2 is
// O(sqrt(length) eps kappa), where a plain Welford loop gives O(length eps kappa).
template <index_t Outputs>
struct column_moments {
  double mean[Outputs], m2[Outputs], block_mean[Outputs], block_m2[Outputs];
};

// The block length along an axis of `extent` positions: the least power of two whose square
// reaches the extent.
inline index_t column_span(index_t extent) {
  index_t span = 1;
  while (span * span < extent) span *= 2;
  return span;
}

// Folds the values at position k of the axis (of `extent`), n outputs read through src, into the
// states of outputs first .. first + n. Batch: as block_reducer's.
template <class Batch, index_t Outputs, class C>
MELD_INLINE void column_moments_row(column_moments<Outputs>& acc, index_t first, const C& src,
                                    index_t n, index_t k, index_t extent) {
  const index_t span = column_span(extent);
  const index_t in_block = k % span, done = k - in_block;  // positions of earlier blocks
  const bool ends = in_block + 1 == span || k + 1 == extent;
  // Welford's 1 / count, and merge_moments(total, block)'s n_b / n and n_a n_b / n.
  const double inv = 1.0 / static_cast<double>(in_block + 1);
  const double fb = static_cast<double>(in_block + 1) / static_cast<double>(k + 1);
  const double na_fb = static_cast<double>(done) * fb;
  // x: a double or a batch of doubles, the values of outputs i ...
  auto update = [&](auto x, index_t i) {
    using Y = decltype(x);
    auto load = [](const double* p) {
      if constexpr (std::is_arithmetic_v<Y>)
        return *p;
      else
        return Y::load_unaligned(p);
    };
    auto store = [](double* p, const Y& v) {
      if constexpr (std::is_arithmetic_v<Y>)
        *p = v;
      else
        v.store_unaligned(p);
    };
    Y bm = x, bs = x - x;
    if (in_block != 0) {
      bm = load(acc.block_mean + i);
      bs = load(acc.block_m2 + i);
      const Y d = x - bm;
      bm = multiply_add(d, Y(inv), bm);
      bs = multiply_add(d, x - bm, bs);
    }
    if (!ends) {
      store(acc.block_mean + i, bm);
      store(acc.block_m2 + i, bs);
    } else if (done == 0) {  // the first block: merge_moments(empty, block)
      store(acc.mean + i, bm);
      store(acc.m2 + i, bs);
    } else {  // merge_moments(total, block), with the counts done and in_block + 1
      const Y m = load(acc.mean + i), d = bm - m;
      store(acc.mean + i, multiply_add(d, Y(fb), m));
      store(acc.m2 + i, multiply_add(d * d, Y(na_fb), load(acc.m2 + i) + bs));
    }
  };
  index_t j = 0;
  if constexpr (!std::is_void_v<Batch>) {
    // (Named through Batch: batch_for<double> alone would be checked, and is void, under nvcc.)
    using X = std::conditional_t<std::is_void_v<Batch>, double, batch_for<double>>;
    constexpr index_t W = Batch::size;
    for (; j + W <= n; j += W) {
      X x0, x1;
      to_doubles(Batch(src.template load<Batch>(j)), x0, x1);
      update(x0, first + j);
      if constexpr (double_parts<Batch> == 2) update(x1, first + j + W / 2);
    }
    if (j < n) {  // the tail through the same SIMD code, then lane by lane
      alignas(64) typename Batch::value_type values[W];
      Batch(src.template load_tail<Batch>(j, n - j)).store_aligned(values);
      for (index_t l = 0; j + l < n; ++l) update(static_cast<double>(values[l]), first + j + l);
    }
  } else {
    for (; j < n; ++j) update(static_cast<double>(src.get(j)), first + j);
  }
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
