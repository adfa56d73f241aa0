// The inputs of CPU kernels, for one contiguous row: a leaf cursor is just the pointer to its row,
// a scalar cursor its value (see lower.hpp for the tree above them), and the destination.
//
// Rows are always contiguous: the shared driver in loops.hpp replicates broadcast operands and
// packs strided ones into small buffers (as numpy's buffered ufunc loops do), so each expression
// compiles to exactly one SIMD kernel.
//
// Every input cursor offers, for its current row:
//   get(j)                  the scalar value at index j
//   load<Batch>(j)          a SIMD batch of the values at j .. j + Batch::size
//   load_tail<Batch>(j, n)  the n < Batch::size values at j .., zero-padded
//   set_rows(rows, k)       take the row pointer rows[k] (leaves; k advances) or nothing (scalars)
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../core/bfloat16.hpp"
#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "../../core/half.hpp"
#include "simd.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// ---- partial batches ----------------------------------------------------------------------------

#if defined(__AVX2__)
// The AVX2 mask of the first `lanes` lanes of `Bytes`-byte elements (the sign bit of each lane).
template <int Bytes>
MELD_INLINE __m256i avx_lane_mask(unsigned lanes) {
  if constexpr (Bytes == 4)
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  else
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(static_cast<long long>(lanes)),
                              _mm256_setr_epi64x(0, 1, 2, 3));
}
#endif

// The first `count` (0 < count < Batch::size) elements at p in the first lanes of a batch, zeros in
// the others; with AVX-512 or AVX2 one masked load, which never touches memory past the end.
// A row's tail goes through the same SIMD code as the rest, so that each element's value does not
// depend on where a row or a thread's chunk ends.
template <class Batch, class T>
MELD_INLINE Batch load_partial(const T* p, index_t count) {
  [[maybe_unused]] const auto lanes = static_cast<unsigned>(count);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>) {
    const auto mask = static_cast<std::uint16_t>((1u << lanes) - 1);
    if constexpr (std::is_same_v<T, float>)
      return Batch(_mm512_maskz_loadu_ps(mask, p));
    else if constexpr (std::is_same_v<T, double>)
      return Batch(_mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), p));
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
      return Batch(_mm512_maskz_loadu_epi32(mask, p));
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
      return Batch(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(mask), p));
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, typename Batch::arch_type>) {
    if constexpr (std::is_same_v<T, float>)
      return Batch(_mm256_maskload_ps(p, avx_lane_mask<4>(lanes)));
    else if constexpr (std::is_same_v<T, double>)
      return Batch(_mm256_maskload_pd(p, avx_lane_mask<8>(lanes)));
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
      return Batch(_mm256_maskload_epi32(reinterpret_cast<const int*>(p), avx_lane_mask<4>(lanes)));
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
      return Batch(
          _mm256_maskload_epi64(reinterpret_cast<const long long*>(p), avx_lane_mask<8>(lanes)));
  }
#endif
  alignas(64) T buffer[Batch::size] = {};
  for (index_t l = 0; l < count; ++l) buffer[l] = p[l];
  return Batch::load_aligned(buffer);
}

// Stores the first `count` (0 < count < Batch::size) lanes of v at p, and nothing else.
template <class Batch, class T>
MELD_INLINE void store_partial(T* p, index_t count, const Batch& v) {
  [[maybe_unused]] const auto lanes = static_cast<unsigned>(count);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>) {
    const auto mask = static_cast<std::uint16_t>((1u << lanes) - 1);
    if constexpr (std::is_same_v<T, float>)
      return _mm512_mask_storeu_ps(p, mask, v);
    else if constexpr (std::is_same_v<T, double>)
      return _mm512_mask_storeu_pd(p, static_cast<__mmask8>(mask), v);
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
      return _mm512_mask_storeu_epi32(p, mask, v);
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
      return _mm512_mask_storeu_epi64(p, static_cast<__mmask8>(mask), v);
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, typename Batch::arch_type>) {
    if constexpr (std::is_same_v<T, float>)
      return _mm256_maskstore_ps(p, avx_lane_mask<4>(lanes), v);
    else if constexpr (std::is_same_v<T, double>)
      return _mm256_maskstore_pd(p, avx_lane_mask<8>(lanes), v);
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 4)
      return _mm256_maskstore_epi32(reinterpret_cast<int*>(p), avx_lane_mask<4>(lanes), v);
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
      return _mm256_maskstore_epi64(reinterpret_cast<long long*>(p), avx_lane_mask<8>(lanes), v);
  }
#endif
  alignas(64) T buffer[Batch::size];
  v.store_aligned(buffer);
  for (index_t l = 0; l < count; ++l) p[l] = buffer[l];
}

// Whether batches of Batch can be written with non-temporal (streaming) stores: x86 with SSE2,
// AVX or AVX-512 registers and numeric elements.
template <class Batch>
inline constexpr bool can_stream = [] {
  using A = typename Batch::arch_type;
  using T = typename Batch::value_type;
  if constexpr (!std::is_arithmetic_v<T> || sizeof(T) < 4) {
    return false;
  } else {
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>) return true;
#endif
#if defined(__AVX__)
    if constexpr (std::is_base_of_v<xsimd::avx, A>) return true;
#endif
#if defined(__SSE2__)
    if constexpr (std::is_base_of_v<xsimd::sse2, A>) return true;
#endif
    return false;
  }
}();

// Writes v to p (aligned to the batch's size) with a non-temporal store: the line goes to memory
// without being read first (no read-for-ownership) and without filling the caches. Needs
// can_stream<Batch> and an sfence (stream_fence) before other threads read the data.
template <class Batch, class T>
MELD_INLINE void store_stream(T* p, const Batch& v) {
  using A = typename Batch::arch_type;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
    if constexpr (std::is_same_v<T, float>)
      return _mm512_stream_ps(p, v);
    else if constexpr (std::is_same_v<T, double>)
      return _mm512_stream_pd(p, v);
    else
      return _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
  }
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, A>) {
    if constexpr (std::is_same_v<T, float>)
      return _mm256_stream_ps(p, v);
    else if constexpr (std::is_same_v<T, double>)
      return _mm256_stream_pd(p, v);
    else
      return _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  }
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A>) {
    if constexpr (std::is_same_v<T, float>)
      return _mm_stream_ps(p, v);
    else if constexpr (std::is_same_v<T, double>)
      return _mm_stream_pd(p, v);
    else
      return _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
  }
#endif
  v.store_aligned(p);
}

// Orders this thread's non-temporal stores before its later stores (the pool's completion flag).
MELD_INLINE void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// ---- 16-bit floating rows (bfloat16, half): widened to float on load, rounded on store ----------

template <class T>
inline constexpr bool is_float16 = std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

// The `Batch::size` (float lanes) bfloat16 values at p, as floats: each value's 16 bits become the
// upper half of a float, which is exact.
template <class Batch>
MELD_INLINE Batch widen(const bfloat16* p) {
  [[maybe_unused]] const auto* q = reinterpret_cast<const std::uint16_t*>(p);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>)
    return Batch(_mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))), 16)));
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, typename Batch::arch_type>)
    return Batch(_mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), 16)));
#endif
  alignas(64) float buffer[Batch::size];
  for (std::size_t l = 0; l < Batch::size; ++l) buffer[l] = p[l];
  return Batch::load_aligned(buffer);
}

// The float bits u rounded to bfloat16 in each word's high 16 bits (to nearest, ties to even; a
// NaN made quiet), the low 16 bits left over: what narrow stores and round_lanes widens back.
#if defined(__AVX512F__)
MELD_INLINE __m512i bfloat16_rounded_words(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000));
}
#endif
#if defined(__AVX2__)
MELD_INLINE __m256i bfloat16_rounded_words(__m256i u) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  // |u| > infinity's bits, compared as signed: both sides are below 2^31
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}
#endif

// Stores the float lanes of v at p rounded to bfloat16 (to nearest, ties to even; NaN stays a
// quiet NaN), as bfloat16's conversion does one value at a time.
template <class Batch>
MELD_INLINE void narrow(bfloat16* p, const Batch& v) {
  [[maybe_unused]] auto* q = reinterpret_cast<std::uint16_t*>(p);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>) {
    const __m512i u = _mm512_castps_si512(v);
#if defined(__AVX512BF16__)
    // vcvtneps2bf16 rounds as bfloat16(float) does, NaN included, but reads subnormal floats as
    // zeros: a vector holding one takes the integer path below.
    const __mmask16 subnormal =
        _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)), u,
                                    _mm512_set1_epi32(0x007fffff));
    if (subnormal == 0)
      return _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), (__m256i)_mm512_cvtneps_pbh(v));
#endif
    const __m512i r = _mm512_srli_epi32(bfloat16_rounded_words(u), 16);
    return _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm512_cvtepi32_epi16(r));
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, typename Batch::arch_type>) {
    const __m256i r = _mm256_srli_epi32(bfloat16_rounded_words(_mm256_castps_si256(v)), 16);
    // 32 -> 16 bits: packus works within 128-bit halves; the permute puts both halves' results
    // in the low half (the values are below 2^16, so the unsigned saturation never bites).
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm256_castsi256_si128(packed));
  }
#endif
  alignas(64) float buffer[Batch::size];
  v.store_aligned(buffer);
  for (std::size_t l = 0; l < Batch::size; ++l) p[l] = bfloat16(buffer[l]);
}

// The `Batch::size` half values at p, as floats (exact; F16C or AVX-512 where the target has them).
template <class Batch>
MELD_INLINE Batch widen(const half* p) {
  [[maybe_unused]] const auto* q = reinterpret_cast<const std::uint16_t*>(p);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>)
    return Batch(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))));
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, typename Batch::arch_type>)
    return Batch(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
#endif
  alignas(64) float buffer[Batch::size];
  for (std::size_t l = 0; l < Batch::size; ++l) buffer[l] = p[l];
  return Batch::load_aligned(buffer);
}

// Stores the float lanes of v at p rounded to half (to nearest, ties to even), as half's
// conversion does one value at a time.
template <class Batch>
MELD_INLINE void narrow(half* p, const Batch& v) {
  [[maybe_unused]] auto* q = reinterpret_cast<std::uint16_t*>(p);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>)
    return _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                               _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, typename Batch::arch_type>)
    return _mm_storeu_si128(reinterpret_cast<__m128i*>(q),
                            _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  alignas(64) float buffer[Batch::size];
  v.store_aligned(buffer);
  for (std::size_t l = 0; l < Batch::size; ++l) p[l] = half(buffer[l]);
}

}  // namespace meld::detail::cpu_eval

namespace meld::detail {

// cast<bfloat16|half> on a batch of floats (expr/functors.hpp): each lane rounded as it would be
// stored, and widened back, in registers (through memory, narrow then widen took 4x a float copy's
// time in cache). bfloat16: to nearest, ties to even, on the bits (NaN stays a quiet NaN), as
// bfloat16_rounded_words; half: the conversion instructions narrow and widen use.
template <class To, class Batch>
MELD_INLINE Batch round_lanes(const Batch& v) {
  [[maybe_unused]] constexpr bool is_bf16 = std::is_same_v<To, bfloat16>;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename Batch::arch_type>) {
    if constexpr (is_bf16) {
      const __m512i r = cpu_eval::bfloat16_rounded_words(_mm512_castps_si512(v));
      return Batch(_mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(~0xffff))));
    } else {
      return Batch(
          _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
  }
#endif
#if defined(__AVX2__)
  if constexpr (is_bf16 && std::is_base_of_v<xsimd::avx2, typename Batch::arch_type>) {
    const __m256i r = cpu_eval::bfloat16_rounded_words(_mm256_castps_si256(v));
    return Batch(_mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(~0xffff))));
  }
#endif
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (!is_bf16 && std::is_base_of_v<xsimd::avx, typename Batch::arch_type>)
    return Batch(
        _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
  alignas(64) To rounded[Batch::size];
  cpu_eval::narrow<Batch>(rounded, v);
  return cpu_eval::widen<Batch>(rounded);
}

}  // namespace meld::detail

namespace meld::detail::cpu_eval {

// ---- leaves -------------------------------------------------------------------------------------

template <class T>
struct leaf_cursor {
  using value_type = T;
  static constexpr int leaf_count = 1;

  const T* row = nullptr;

  MELD_INLINE void set_rows(char* const* rows, int& k) {
    row = reinterpret_cast<const T*>(rows[k++]);
  }
  MELD_INLINE T get(index_t j) const { return row[j]; }
  template <class Batch>
  MELD_INLINE Batch load(index_t j) const {
    return Batch::load_unaligned(row + j);
  }
  template <class Batch>
  MELD_INLINE Batch load_tail(index_t j, index_t count) const {
    return load_partial<Batch>(row + j, count);
  }
};

// A bfloat16 or half leaf reads as float: the tree above it computes in float.
template <class T>
requires is_float16<T>
struct leaf_cursor<T> {
  using value_type = float;
  static constexpr int leaf_count = 1;

  const T* row = nullptr;

  MELD_INLINE void set_rows(char* const* rows, int& k) {
    row = reinterpret_cast<const T*>(rows[k++]);
  }
  MELD_INLINE float get(index_t j) const { return row[j]; }
  template <class Batch>
  MELD_INLINE Batch load(index_t j) const {
    return widen<Batch>(row + j);
  }
  template <class Batch>
  MELD_INLINE Batch load_tail(index_t j, index_t count) const {
    alignas(64) T buffer[Batch::size] = {};
    for (index_t l = 0; l < count; ++l) buffer[l] = row[j + l];
    return widen<Batch>(buffer);
  }
};

template <class T>
struct scalar_cursor {
  using value_type = T;
  static constexpr int leaf_count = 0;
  T value;

  MELD_INLINE void set_rows(char* const*, int&) {}
  MELD_INLINE T get(index_t) const { return value; }
  template <class Batch>
  MELD_INLINE Batch load(index_t) const {
    return Batch(value);
  }
  template <class Batch>
  MELD_INLINE Batch load_tail(index_t, index_t) const {
    return Batch(value);
  }
};

// ---- the destination ----------------------------------------------------------------------------

template <class T>
struct dest_cursor {
  T* row = nullptr;

  template <class V>
  MELD_INLINE void put(index_t j, const V& v) const {
    row[j] = static_cast<T>(v);
  }
  // Stores a batch of values, or of comparison results (stored as 1 / 0).
  template <class Batch, class V>
  MELD_INLINE void store(index_t j, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>)
      store<Batch>(j, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    else
      v.store_unaligned(row + j);
  }
  // Stores a batch at row + j, aligned to the batch's size, with a non-temporal store.
  template <class Batch, class V>
  MELD_INLINE void store_stream(index_t j, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>)
      store_stream<Batch>(j, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    else
      cpu_eval::store_stream<Batch>(row + j, v);
  }
  // Stores the first `count` lanes.
  template <class Batch, class V>
  MELD_INLINE void store_tail(index_t j, index_t count, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>) {
      store_tail<Batch>(j, count, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    } else {
      store_partial<Batch>(row + j, count, v);
    }
  }
};

// A bfloat16 or half destination takes float values (batches of float), rounded as they are
// stored.
template <class T>
requires is_float16<T>
struct dest_cursor<T> {
  T* row = nullptr;

  template <class V>
  MELD_INLINE void put(index_t j, const V& v) const {
    row[j] = T(static_cast<float>(v));
  }
  template <class Batch, class V>
  MELD_INLINE void store(index_t j, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>)
      store<Batch>(j, xsimd::select(v, Batch(1.f), Batch(0.f)));
    else
      narrow<Batch>(row + j, v);
  }
  template <class Batch, class V>
  MELD_INLINE void store_tail(index_t j, index_t count, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>) {
      store_tail<Batch>(j, count, xsimd::select(v, Batch(1.f), Batch(0.f)));
    } else {
      alignas(64) T buffer[Batch::size];
      narrow<Batch>(buffer, v);
      for (index_t l = 0; l < count; ++l) row[j + l] = buffer[l];
    }
  }
};

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
