// The loops. run_rows walks a range of an iteration plan row by row; it is shared by every
// expression (compiled once, not per expression). The per-expression part is a row function that
// runs one SIMD kernel over a contiguous row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "../../core/gcc12_warnings.hpp"
#include "../plan.hpp"
#include "cursor.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// Called for each piece of a row: elements [j, j + n) of the row, with rows[k] pointing at
// element j of operand k, contiguous.
using row_fn = void (*)(void* ctx, char* const* rows, index_t j, index_t n);

// Elements per packed piece: rows of operands that are not contiguous are handled in pieces of
// at most this many elements, each packed into (or unpacked from) a small buffer.
inline constexpr index_t piece_elems = 512;

// Copies n elements of `elem` bytes between strided locations (strides in bytes). Called per
// piece of up to piece_elems elements, so not inlined: one copy of its loops instead of three.
void copy_elements(char* to, index_t to_stride, const char* from, index_t from_stride, index_t n,
                   index_t elem);

// Walks the linear positions [begin, end) of a plan, calling fn on contiguous pieces of rows.
// Operands contiguous along the row are passed in place (no copies at all when every operand is);
// a broadcast operand (stride 0) is replicated into a buffer, a strided one is gathered (read) or
// scattered back after fn (write). Cold (optimized for size, compiled once): its work per row is
// a few pointer updates around fn and copy_elements, which keep their optimization.
[[gnu::cold]] void run_rows(const plan_ref& p, index_t begin, index_t end, row_fn fn, void* ctx);

// Batch is an xsimd batch, or void for the scalar loop (mixed element types).
template <class Batch>
inline constexpr index_t batch_size = [] {
  if constexpr (std::is_void_v<Batch>)
    return index_t(1);
  else
    return index_t(Batch::size);
}();

// ---- elementwise --------------------------------------------------------------------------------

// The row function of dst = src: the cursors are copied into locals, so that the compiler keeps
// the row pointers in registers.
template <class Batch, class T, class C>
void assign_row(void* ctx, char* const* rows, index_t, index_t n) {
  dest_cursor<T> dst{reinterpret_cast<T*>(rows[0])};
  C src = *static_cast<const C*>(ctx);
  int k = 1;
  src.set_rows(rows, k);
  index_t j = 0;
  if constexpr (!std::is_void_v<Batch>) {
    constexpr index_t W = Batch::size;
    for (; j + W <= n; j += W) dst.template store<Batch>(j, src.template load<Batch>(j));
    if (j < n) dst.template store_tail<Batch>(j, n - j, src.template load_tail<Batch>(j, n - j));
  } else {
    for (; j < n; ++j) dst.put(j, src.get(j));
  }
}

// dst = src with non-temporal stores, for destinations far larger than the caches: each line is
// written without being read first and without evicting the operands. Elements before the first
// batch-aligned address and the tail go through partial batches (the same SIMD code, so every
// element gets the same value as with assign_row).
template <class Batch, class T, class C>
void assign_row_stream(void* ctx, char* const* rows, index_t, index_t n) {
  dest_cursor<T> dst{reinterpret_cast<T*>(rows[0])};
  C src = *static_cast<const C*>(ctx);
  int k = 1;
  src.set_rows(rows, k);
  constexpr index_t W = Batch::size;
  constexpr auto bytes = static_cast<std::uintptr_t>(W) * sizeof(T);
  const auto misaligned = reinterpret_cast<std::uintptr_t>(dst.row) % bytes;
  index_t j = std::min(n, static_cast<index_t>((bytes - misaligned) % bytes / sizeof(T)));
  if (j > 0) dst.template store_tail<Batch>(0, j, src.template load_tail<Batch>(0, j));
  for (; j + W <= n; j += W) dst.template store_stream<Batch>(j, src.template load<Batch>(j));
  if (j < n) dst.template store_tail<Batch>(j, n - j, src.template load_tail<Batch>(j, n - j));
  stream_fence();
}

// Writes the value at ctx into each element of a row.
template <class T>
void fill_row(void* ctx, char* const* rows, index_t, index_t n) {
  std::fill_n(reinterpret_cast<T*>(rows[0]), n, *static_cast<const T*>(ctx));
}

// ---- reductions ---------------------------------------------------------------------------------

// Elements per superblock: the unit of parallel work. Superblock boundaries depend only on the
// element count, so a reduction gives the same bits for any thread count.
inline constexpr index_t reduce_superblock = index_t(1) << 15;

// Pairwise combination of a stream of values: a binary counter of partial results, so that value
// i meets others in a balanced tree (error O(log n) instead of O(n)).
template <class R, class A>
struct pairwise_stack {
  A values[64];
  int levels[64];
  int top = 0;

  void push(A v) {
    int level = 0;
    while (top > 0 && levels[top - 1] == level) {
      v = R{}(values[--top], v);
      ++level;
    }
    values[top] = v;
    levels[top++] = level;
  }
  A result(A empty) const {
    if (top == 0) return empty;
    A r = values[top - 1];
    for (int i = top - 2; i >= 0; --i) r = R{}(values[i], r);
    return r;
  }
};

// Horizontal reduction of a batch in a fixed tree order: lane l meets lane l + width for width =
// lanes / 2, lanes / 4, ..., 1. For float and double on x86 the same order runs in registers
// (the upper half of the vector onto the lower one; a tree through a stack array stalls on
// store forwarding, which costs more than summing 1000 floats). Inlined: var's moments run it
// twice per row end (moments.hpp), where a call cost a third of var along rows of 3 at -O2.
template <class R, class A, class Batch>
MELD_INLINE A horizontal(const Batch& b) {
#if defined(__SSE2__)
  if constexpr (std::is_same_v<A, float> || std::is_same_v<A, double>) {
    using Arch = typename Batch::arch_type;
    constexpr bool is_float = std::is_same_v<A, float>;
    const R op{};
    auto halves_128 = [&](auto v) {  // 128 bits down to one lane
      using B = xsimd::batch<A, xsimd::sse2>;
      if constexpr (is_float) {
        const B two = op(B(v), B(_mm_movehl_ps(v, v)));
        return _mm_cvtss_f32(op(two, B(_mm_shuffle_ps(two, two, 1))));
      } else {
        return _mm_cvtsd_f64(op(B(v), B(_mm_unpackhi_pd(v, v))));
      }
    };
    [[maybe_unused]] auto halves_256 = [&](auto v) {
      using B = xsimd::batch<A, xsimd::sse2>;
      if constexpr (is_float)
        return halves_128(op(B(_mm256_castps256_ps128(v)), B(_mm256_extractf128_ps(v, 1))).data);
      else
        return halves_128(op(B(_mm256_castpd256_pd128(v)), B(_mm256_extractf128_pd(v, 1))).data);
    };
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
      using B = xsimd::batch<A, xsimd::avx>;
      const auto v = b.data;
      if constexpr (is_float) {
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        return halves_256(op(B(_mm512_castps512_ps256(v)), B(hi)).data);
      } else {
        return halves_256(op(B(_mm512_castpd512_pd256(v)), B(_mm512_extractf64x4_pd(v, 1))).data);
      }
    }
#endif
#if defined(__AVX__)
    if constexpr (std::is_base_of_v<xsimd::avx, Arch>) return halves_256(b.data);
#endif
    if constexpr (std::is_base_of_v<xsimd::sse2, Arch>) return halves_128(b.data);
  }
#endif
  alignas(64) A lanes[Batch::size];
  b.store_aligned(lanes);
  for (std::size_t width = Batch::size / 2; width >= 1; width /= 2)
    for (std::size_t l = 0; l < width; ++l) lanes[l] = R{}(lanes[l], lanes[l + width]);
  return lanes[0];
}

// Folds a stream of row segments with reducer R into accumulators of type A. Blocks of `block`
// elements are summed with four independent accumulators (each accumulator lane adds 16 elements
// of a block in order); the blocks' vectors are combined lane by lane in a balanced tree
// (pairwise_stack), and the lanes of the result in a fixed tree at the end (horizontal). So the
// error stays O(log n), and the horizontal step costs nothing per block.
template <class R, class A, class Batch>
struct block_reducer {
  static constexpr index_t W = batch_size<Batch>;
  static constexpr index_t block = std::max<index_t>(256, 64 * W);
  static_assert(reduce_superblock % block == 0);
  using acc_type = std::conditional_t<std::is_void_v<Batch>, A, Batch>;

  acc_type acc[4];
  index_t filled = 0;
  pairwise_stack<R, acc_type> blocks;

  block_reducer() { reset(); }

  // Starts over (for the next output of an axis reduction).
  void clear() {
    reset();
    blocks.top = 0;
  }

  template <class C>
  MELD_INLINE void consume(const C& c, index_t j, index_t end) {
    while (j < end) {
      const index_t take = std::min(end - j, block - filled);
      accumulate(c, j, j + take);
      filled += take;
      j += take;
      if (filled == block) flush();
    }
  }

  A finish() {
    if (filled) flush();
    const acc_type total = blocks.result(acc_type(R::template identity<A>()));
    if constexpr (std::is_void_v<Batch>)
      return total;
    else
      return horizontal<R, A>(total);
  }

 private:
  void reset() {
    for (auto& a : acc) a = acc_type(R::template identity<A>());
    filled = 0;
  }

  // The accumulators live in locals during the loop: SIMD vector types may alias anything, so
  // members would be stored back to memory after every addition.
  template <class C>
  MELD_INLINE void accumulate(const C& c, index_t j, index_t e) {
    const R op{};
    acc_type a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    if constexpr (std::is_void_v<Batch>) {
      for (; j + 4 <= e; j += 4) {
        a0 = op(a0, static_cast<A>(c.get(j)));
        a1 = op(a1, static_cast<A>(c.get(j + 1)));
        a2 = op(a2, static_cast<A>(c.get(j + 2)));
        a3 = op(a3, static_cast<A>(c.get(j + 3)));
      }
      for (; j < e; ++j) a0 = op(a0, static_cast<A>(c.get(j)));
    } else {
      for (; j + 4 * W <= e; j += 4 * W) {
        a0 = op(a0, c.template load<Batch>(j));
        a1 = op(a1, c.template load<Batch>(j + W));
        a2 = op(a2, c.template load<Batch>(j + 2 * W));
        a3 = op(a3, c.template load<Batch>(j + 3 * W));
      }
      for (; j + W <= e; j += W) a0 = op(a0, c.template load<Batch>(j));
      if (j < e) {  // the tail through the same SIMD code, other lanes set to the identity
        alignas(64) A iota[W];
        for (index_t l = 0; l < W; ++l) iota[l] = static_cast<A>(l);
        const auto in_tail = Batch::load_aligned(iota) < Batch(static_cast<A>(e - j));
        a1 = op(a1, xsimd::select(in_tail, c.template load_tail<Batch>(j, e - j),
                                  Batch(R::template identity<A>())));
      }
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
  }

  void flush() {
    const R op{};
    blocks.push(op(op(acc[0], acc[1]), op(acc[2], acc[3])));
    reset();
  }
};

template <class R, class A, class Batch, class C>
struct reduce_state {
  C src;
  block_reducer<R, A, Batch> acc;
};

template <class R, class A, class Batch, class C>
void reduce_row(void* ctx, char* const* rows, index_t, index_t n) {
  auto& state = *static_cast<reduce_state<R, A, Batch, C>*>(ctx);
  C src = state.src;
  int k = 0;
  src.set_rows(rows, k);
  state.acc.consume(src, 0, n);
}

// The first position of the extreme value (per Arg::better) along a stream of rows.
template <class Arg, class C>
struct arg_state {
  using T = typename C::value_type;
  C src;
  T value{};
  index_t index = -1;
  index_t linear = 0;  // position of the next element
};

template <class Arg, class C>
void arg_row(void* ctx, char* const* rows, index_t, index_t n) {
  auto& state = *static_cast<arg_state<Arg, C>*>(ctx);
  C src = state.src;
  int k = 0;
  src.set_rows(rows, k);
  for (index_t j = 0; j < n; ++j, ++state.linear) {
    const auto v = src.get(j);
    if (state.index < 0 || Arg::better(v, state.value)) {
      state.value = v;
      state.index = state.linear;
    }
  }
}

}  // namespace meld::detail::cpu_eval

#if MELD_RUNTIME_DEFINITIONS
#include "loops-inl.hpp"
#endif

MELD_GCC12_WARNINGS_ON
