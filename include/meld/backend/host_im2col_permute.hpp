// im2col of stride-1, unpadded windows as vector permutes (AVX-512), for host_window.hpp's im2col.
//
// Without padding, at stride 1, every column row's segment for one sample is the same gather from
// the sample's plane, shifted: at kernel offset (kh, kw), output j = oh out_w + ow reads plane
// element kh w + kw + oh w + ow. The loop of row copies moves one window row (out_w elements:
// 9 in LeNet's 20 -> 50 convolution) per store, rounding each to bfloat16 on the way. Here the
// plane is converted to the column type once for its kh kw offsets, into a buffer, and each
// vector of consecutive outputs (16 floats, 32 bfloat16) is one two-source permute (vpermt2d,
// vpermt2w) of two vectors loaded from it. The permute's indices depend on where the vector
// starts in the segment, not on the kernel offset, so they are made once per call. The same
// values as the row copies: the same rounding (to nearest, ties to even) of the same elements.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "../core/bfloat16.hpp"
#include "window.hpp"

namespace meld::detail::host_loops {

#if defined(__AVX512BW__)
template <class C>
class permuted_windows {
  static_assert(std::is_same_v<C, float> || std::is_same_v<C, bfloat16>);

 public:
  static constexpr index_t lanes = 64 / index_t(sizeof(C));
  // The most vectors of outputs per segment, and plane elements held converted (a 64 x 64 plane of
  // floats: 16 KiB, in L1 beside the indices).
  static constexpr index_t max_vectors = 64, max_plane = 4096;

  // The indices for planes of p's extents under window g, if g and p can go this way (usable()):
  // stride 1, no padding, output rows of fewer than 16 elements (longer rows the row copies store
  // as whole vectors, faster: permutes of LeNet's first convolution, rows of 26, took 1.45 x the
  // row copies' time in float, 1.05 x in bfloat16), the plane and the segment within the
  // buffers, and each vector's outputs within two vectors of the plane.
  permuted_windows(const planes& p, const window2d& g) : p_(p), g_(g) {
    const index_t l = p.out_h * p.out_w;
    if (g.stride.h != 1 || g.stride.w != 1 || g.padding.h != 0 || g.padding.w != 0 ||
        p.out_w >= 16 || p.h * p.w > max_plane || l < 1 || l > max_vectors * lanes)
      return;
    // Full vectors from the segment's start; a last one ending at the segment's end, overlapping
    // the one before (rewriting its values) rather than a masked store. A segment shorter than a
    // vector is one vector, stored masked.
    vectors_ = (l + lanes - 1) / lanes;
    tail_ = l < lanes ? l : 0;
    using index_type = std::conditional_t<sizeof(C) == 4, std::uint32_t, std::uint16_t>;
    alignas(64) index_type lane_index[lanes];
    for (index_t v = 0; v < vectors_; ++v) {
      const index_t j0 = l < lanes ? 0 : std::min(v * lanes, l - lanes);
      at_[v] = j0;
      start_[v] = plane_offset(j0);
      for (index_t t = 0; t < lanes; ++t) {
        const index_t rel = j0 + t < l ? plane_offset(j0 + t) - start_[v] : 0;
        if (rel >= 2 * lanes) return;  // the outputs span more than two vectors of the plane
        lane_index[t] = index_type(rel);
      }
      index_[v] = _mm512_load_si512(lane_index);
    }
    usable_ = true;
  }

  bool usable() const { return usable_; }

  // Samples held converted at once: as many planes as fit the buffer.
  index_t samples_per_task() const { return std::max<index_t>(1, max_plane / (p_.h * p_.w)); }

  // The columns of channel c of samples [n0, n0 + count) (count <= samples_per_task()) of x
  // (contiguous {batch, channels, h, w}) into col {channels kh kw, cols}: in each of the
  // channel's kh kw column rows, the samples' segments, one after the other (written in order,
  // as the row copies do: a sequential stream per column row).
  void channel(const float* x, index_t n0, index_t count, index_t c, C* col, index_t cols) const {
    alignas(64) C buffer[max_plane + 2 * lanes];
    const index_t size = p_.h * p_.w, l = p_.out_h * p_.out_w;
    for (index_t i = 0; i < count; ++i)
      convert(x + ((n0 + i) * p_.channels + c) * size, size, buffer + i * size);
    // Loads reach up to two vectors past the last output's window: zeros, never stored.
    std::memset(static_cast<void*>(buffer + count * size), 0, 2 * lanes * sizeof(C));
    const __mmask64 tail = (std::uint64_t(1) << tail_) - 1;
    for (index_t kh = 0; kh < g_.kernel.h; ++kh)
      for (index_t kw = 0; kw < g_.kernel.w; ++kw) {
        C* row = col + ((c * g_.kernel.h + kh) * g_.kernel.w + kw) * cols + n0 * l;
        for (index_t i = 0; i < count; ++i) {
          const C* from = buffer + i * size + kh * p_.w + kw;
          C* to = row + i * l;
          for (index_t v = 0; v < vectors_; ++v) {
            const C* s = from + start_[v];
            const __m512i lo = _mm512_loadu_si512(s), hi = _mm512_loadu_si512(s + lanes);
            if constexpr (sizeof(C) == 4) {
              const __m512i r = _mm512_permutex2var_epi32(lo, index_[v], hi);
              if (tail_)
                _mm512_mask_storeu_epi32(to, __mmask16(tail), r);
              else
                _mm512_storeu_si512(to + at_[v], r);
            } else {
              const __m512i r = _mm512_permutex2var_epi16(lo, index_[v], hi);
              if (tail_)
                _mm512_mask_storeu_epi16(to, __mmask32(tail), r);
              else
                _mm512_storeu_si512(to + at_[v], r);
            }
          }
        }
      }
  }

 private:
  // Where output j of a segment reads the plane at kernel offset (0, 0).
  index_t plane_offset(index_t j) const { return j / p_.out_w * p_.w + j % p_.out_w; }

  // The plane as C: copied, or rounded to bfloat16 (vcvtneps2bf16 where the CPU has it).
  static void convert(const float* from, index_t n, C* to) {
    if constexpr (std::is_same_v<C, float>) {
      std::memcpy(to, from, std::size_t(n) * sizeof(float));
    } else {
      index_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
      for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(from + i)));
#endif
      for (; i < n; ++i) to[i] = bfloat16(from[i]);
    }
  }

  planes p_;
  window2d g_;
  bool usable_ = false;
  index_t vectors_ = 0, tail_ = 0;
  // Each vector's first output in the segment, and where it reads the plane at offset (0, 0).
  index_t at_[max_vectors] = {}, start_[max_vectors] = {};
  __m512i index_[max_vectors];
};
#endif

}  // namespace meld::detail::host_loops
