// The window loops (see backend/window.hpp) of backends whose kernels are host code (cpu<...>,
// sim<...>), on host pointers: each (sample, channel) plane or column row is one task of the
// thread pool, and the inner loops are plain copies (as strided meld views, each short window row
// became one trip through the generic row driver, which cost more than the convolution's matrix
// product). Those backends run them through their executor's host_kernel (host_window_ops).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <limits>
#include <type_traits>

#include "../core/bfloat16.hpp"
#include "../runtime/thread_pool.hpp"
#include "../tensor/tensor_view.hpp"
#include "host_im2col_permute.hpp"
#include "host_pool_2x2.hpp"
#include "window.hpp"

namespace meld {

namespace detail::host_loops {

// Runs body(i) for i in [0, count) on the thread pool when `work` (element operations in all)
// pays for waking it, else on this thread.
template <class F>
void parallel_items(index_t count, index_t work, F&& body) {
  const int threads = thread_pool::global().size();
  if (threads == 1 || count < 2 || work < (index_t(1) << 16) || thread_pool::in_task()) {
    for (index_t i = 0; i < count; ++i) body(i);
    return;
  }
  const index_t tasks = std::min<index_t>(count, index_t(threads) * 4);
  thread_pool::global().parallel_for(tasks, [&](index_t t) {
    for (index_t i = count * t / tasks; i < count * (t + 1) / tasks; ++i) body(i);
  });
}

// Copies of rows of one length n (a window row: a few to a few dozen elements), the length's work
// decided once for the many rows of a call. Without a library call per row: memmove's call and
// dispatch cost as much as copying 9 floats, and an element-by-element loop of fixed size stays
// scalar where g++'s straight-line vectorizer is off, as in meld's builds with g++ 12 (that was
// 18 % of a LeNet step on an AVX-512 EPYC). With AVX-512, 4-byte elements go as whole vectors and
// one masked load and store for the rest, the mask made once (a 9-float row in one load and one
// store, where blocks of 8 took two of each: im2col of LeNet's 20 -> 50 convolution 1.25 x
// faster); otherwise a row of n >= b elements is copied as blocks of b, the last one overlapping
// the one before where b does not divide n. Rows converted to another type C (im2col's bfloat16
// columns) go through convert.
template <class T, class C = T>
class row_span {
 public:
  explicit row_span(index_t n) : n_(n) {
#if defined(__AVX512F__)
    if constexpr (vectorized || rounds_to_bfloat16)
      tail_ = static_cast<__mmask16>((1u << (n % 16)) - 1);
#endif
  }

  MELD_INLINE void copy(const T* __restrict from, C* __restrict to) const {
    if constexpr (std::is_same_v<T, C>)
      copy_same(from, to);
    else
      convert(from, to);
  }

  // `rows` rows, one every `step` elements of from, to consecutive rows of `to`. Rows of 8 to 15
  // elements are stored as whole vectors but the last, the next row overwriting the tail (which
  // stays inside the rows: 16 <= 2 n): LeNet's 20 -> 50 convolution's im2col, rows of 9, 1.2 x
  // faster than with a masked store for each.
  MELD_INLINE void copy_rows(const T* __restrict from, index_t step, C* __restrict to,
                             index_t rows) const {
    if constexpr (stores_whole_rows) {
      if (n_ >= 8 && n_ < 16 && rows > 1) {
        for (index_t i = 0; i + 1 < rows; ++i) store_whole(from + i * step, to + i * n_);
        copy(from + (rows - 1) * step, to + (rows - 1) * n_);
        return;
      }
    }
    for (index_t i = 0; i < rows; ++i) copy(from + i * step, to + i * n_);
  }

 private:
  MELD_INLINE void copy_same(const T* __restrict from, T* __restrict to) const {
#if defined(__AVX512F__)
    if constexpr (vectorized) {
      index_t i = 0;
      for (; i + 16 <= n_; i += 16) _mm512_storeu_si512(to + i, _mm512_loadu_si512(from + i));
      if (tail_) _mm512_mask_storeu_epi32(to + i, tail_, _mm512_maskz_loadu_epi32(tail_, from + i));
      return;
    }
#endif
    constexpr index_t block = 64 / sizeof(T);
    if (n_ >= block) {
      index_t i = 0;
      for (; i + block <= n_; i += block) copy_block<block>(from + i, to + i);
      if (i < n_) copy_block<block>(from + n_ - block, to + n_ - block);
    } else if (n_ >= block / 2) {
      copy_block<block / 2>(from, to);
      copy_block<block / 2>(from + n_ - block / 2, to + n_ - block / 2);
    } else if (n_ >= block / 4) {
      copy_block<block / 4>(from, to);
      copy_block<block / 4>(from + n_ - block / 4, to + n_ - block / 4);
    } else {
      for (index_t i = 0; i < n_; ++i) to[i] = from[i];
    }
  }

  // A memcpy of a fixed size: one vector load and store.
  template <index_t Block>
  MELD_INLINE static void copy_block(const T* __restrict from, T* __restrict to) {
    std::memcpy(to, from, Block * sizeof(T));
  }

  // The elements converted to C: float rounded to bfloat16 16 at a time where the CPU has
  // vcvtneps2bf16 (to nearest, ties to even, as bfloat16(float)), else one by one.
  // (One branch or the other, not an early return: nvcc warns of a loop it cannot reach.)
  MELD_INLINE void convert(const T* __restrict from, C* __restrict to) const {
    if constexpr (converts_in_vectors) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
      index_t i = 0;
      for (; i + 16 <= n_; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(from + i)));
      if (tail_)
        _mm256_mask_storeu_epi16(
            to + i, tail_, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail_, from + i)));
#endif
    } else {
      for (index_t i = 0; i < n_; ++i) to[i] = C(from[i]);
    }
  }

  static constexpr bool vectorized = std::is_same_v<T, C> && sizeof(T) == 4;
  static constexpr bool rounds_to_bfloat16 =
      std::is_same_v<T, float> && std::is_same_v<C, bfloat16>;
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  static constexpr bool converts_in_vectors = rounds_to_bfloat16;
  static constexpr bool stores_whole_rows = vectorized || rounds_to_bfloat16;
#elif defined(__AVX512F__)
  static constexpr bool converts_in_vectors = false;
  static constexpr bool stores_whole_rows = vectorized;
#else
  static constexpr bool converts_in_vectors = false;
  static constexpr bool stores_whole_rows = false;
#endif

  // One row of fewer than 16 elements (the mask) written as a whole vector of 16: the elements
  // past the row are garbage, for copy_rows' next row to overwrite.
  MELD_INLINE void store_whole([[maybe_unused]] const T* __restrict from,
                               [[maybe_unused]] C* __restrict to) const {
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if constexpr (rounds_to_bfloat16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail_, from)));
      return;
    }
#endif
#if defined(__AVX512F__)
    if constexpr (vectorized) _mm512_storeu_si512(to, _mm512_maskz_loadu_epi32(tail_, from));
#endif
  }
  index_t n_;
#if defined(__AVX512F__)
  __mmask16 tail_ = 0;
#endif
};

// Zeros n elements (where windows reach the padding). Most calls have none to zero: they return
// before the loop, which the compiler makes a call to memset.
template <class T>
MELD_INLINE void zero_row(T* to, index_t n) {
  if (n <= 0) return;
  for (index_t i = 0; i < n; ++i) to[i] = T(0);
}

// im2col: from `batch` samples of x (contiguous {batch, channels, h, w}), the matrix
// col {channels kh kw, batch out_h out_w} (row-major, zero where a window reaches the padding),
// its elements converted to C (a bfloat16 product's columns: half the bytes to write and to read).
// A convolution is then weight {out, channels kh kw} x col.
template <class T, class C>
void im2col(const T* x, index_t batch, const planes& p, const window2d& g, C* col) {
  const index_t kk = g.kernel.h * g.kernel.w, l = p.out_h * p.out_w, cols = batch * l;
#if defined(__AVX512BW__)
  if constexpr (std::is_same_v<T, float> &&
                (std::is_same_v<C, float> || std::is_same_v<C, bfloat16>)) {
    const permuted_windows<C> permuted(p, g);
    if (permuted.usable()) {  // stride 1, no padding (host_im2col_permute.hpp)
      const index_t per_task = permuted.samples_per_task();
      const index_t blocks = (batch + per_task - 1) / per_task;
      parallel_items(p.channels * blocks, p.channels * kk * cols, [&](index_t i) {
        const index_t c = i / blocks, n0 = i % blocks * per_task;
        permuted.channel(x, n0, std::min(per_task, batch - n0), c, col, cols);
      });
      return;
    }
  }
#endif
  parallel_items(p.channels * kk, p.channels * kk * cols, [&](index_t r) {
    const index_t c = r / kk, kh = (r % kk) / g.kernel.w, kw = r % g.kernel.w;
    // The output rows and columns whose windows, at this kernel offset, fall inside the image,
    // found once per row of col; where every column's does, with stride 1, the loop over the
    // rows only copies (checking the bounds for each 9-element row made LeNet's 20 -> 50
    // convolution's im2col take 1.3 x as long).
    index_t oh0, oh1, ow0, ow1;
    valid_range(p.out_h, p.h, g.stride.h, kh, g.padding.h, oh0, oh1);
    valid_range(p.out_w, p.w, g.stride.w, kw, g.padding.w, ow0, ow1);
    const bool dense = g.stride.w == 1 && ow0 == 0 && ow1 == p.out_w;
    const row_span<T, C> inside(ow1 - ow0);
    // Where output row oh0's window row starts in the plane, an offset (at column ow the input is
    // at first + ow * stride, inside the plane for ow in [ow0, ow1)); the step to the next row.
    const index_t first = (oh0 * g.stride.h + kh - g.padding.h) * p.w + kw - g.padding.w;
    const index_t step = g.stride.h * p.w;
    for (index_t n = 0; n < batch; ++n) {
      C* out = col + r * cols + n * l;
      const T* plane = x + (n * p.channels + c) * p.h * p.w;
      zero_row(out, oh0 * p.out_w);  // windows above the image (in the padding)
      index_t base = first;
      if (dense) {
        if (oh1 > oh0) inside.copy_rows(plane + base, step, out + oh0 * p.out_w, oh1 - oh0);
      } else {
        for (index_t oh = oh0; oh < oh1; ++oh, base += step) {
          C* row = out + oh * p.out_w;
          zero_row(row, ow0);
          if (g.stride.w == 1)
            inside.copy(plane + (base + ow0), row + ow0);
          else
            for (index_t ow = ow0; ow < ow1; ++ow) row[ow] = C(plane[base + ow * g.stride.w]);
          zero_row(row + ow1, p.out_w - ow1);
        }
      }
      zero_row(out + oh1 * p.out_w, (p.out_h - oh1) * p.out_w);  // and below it
    }
  });
}

#if defined(__AVX512F__)
// col2im_add of one plane for stride 1 and rows of at most 16 floats, as LeNet's 20 -> 50
// convolution's 13 x 13 input: each row of the plane is held in one register while every kernel
// offset whose windows reach it adds its column row, shifted into place by a masked load (lanes
// outside the image neither read nor written), then stored once. The loop of col2im_add below
// loads, adds and stores every element once per kernel offset. The same additions in the same
// order (kernel row, then kernel column, ascending): the same bits.
inline void col2im_add_short_rows(const float* col, index_t cols, const planes& p,
                                  const window2d& g, index_t n, index_t c, float* plane) {
  const index_t l = p.out_h * p.out_w;
  const auto row_mask = static_cast<__mmask16>((1u << p.w) - 1);
  const std::uint32_t out_mask = (1u << p.out_w) - 1;
  for (index_t ih = 0; ih < p.h; ++ih) {
    __m512 acc = _mm512_maskz_loadu_ps(row_mask, plane + ih * p.w);
    for (index_t kh = 0; kh < g.kernel.h; ++kh) {
      const index_t oh = ih + g.padding.h - kh;
      if (oh < 0 || oh >= p.out_h) continue;
      const float* src = col + (c * g.kernel.h + kh) * g.kernel.w * cols + n * l + oh * p.out_w;
      for (index_t kw = 0; kw < g.kernel.w; ++kw, src += cols) {
        // Output column ow's window reads input column ow + shift at this kernel offset.
        const index_t shift = kw - g.padding.w;
        const auto m = static_cast<__mmask16>(
            (shift >= 0 ? out_mask << shift : out_mask >> -shift) & row_mask);
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, src - shift));
      }
    }
    _mm512_mask_storeu_ps(plane + ih * p.w, row_mask, acc);
  }
}
#endif

// col2im: adds col {channels kh kw, batch out_h out_w} back into dx (contiguous {batch, channels,
// h, w}); windows that overlap add up. Each (sample, channel) plane is one task.
template <class T>
void col2im_add(const T* col, index_t batch, const planes& p, const window2d& g, T* dx) {
  const index_t kk = g.kernel.h * g.kernel.w, l = p.out_h * p.out_w, cols = batch * l;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (g.stride.h == 1 && g.stride.w == 1 && p.w <= 16 && p.out_w <= 16) {
      parallel_items(batch * p.channels, batch * p.channels * kk * l, [&](index_t i) {
        col2im_add_short_rows(col, cols, p, g, i / p.channels, i % p.channels, dx + i * p.h * p.w);
      });
      return;
    }
  }
#endif
  parallel_items(batch * p.channels, batch * p.channels * kk * l, [&](index_t i) {
    const index_t n = i / p.channels, c = i % p.channels;
    T* __restrict plane = dx + i * p.h * p.w;
    const index_t step = g.stride.h * p.w;
    for (index_t kh = 0; kh < g.kernel.h; ++kh) {
      index_t oh0, oh1;
      valid_range(p.out_h, p.h, g.stride.h, kh, g.padding.h, oh0, oh1);
      for (index_t kw = 0; kw < g.kernel.w; ++kw) {
        const T* __restrict src = col + ((c * g.kernel.h + kh) * g.kernel.w + kw) * cols + n * l;
        index_t ow0, ow1;
        valid_range(p.out_w, p.w, g.stride.w, kw, g.padding.w, ow0, ow1);
        // As im2col's: the plane offset of output row oh0's window row, at column 0. (Masked
        // vector adds of the short rows were slower than the loop: each row's load waits for the
        // store of the kernel offset before, which overlaps it.)
        index_t base = (oh0 * g.stride.h + kh - g.padding.h) * p.w + kw - g.padding.w;
        for (index_t oh = oh0; oh < oh1; ++oh, base += step)
          for (index_t ow = ow0; ow < ow1; ++ow)
            plane[base + ow * g.stride.w] += src[oh * p.out_w + ow];
      }
    }
  });
}

// The pooling loops below walk each output row once per kernel offset (kh, kw), so that the
// innermost loop runs along the row (and vectorizes for stride 1) instead of over a 2x2 window.

// Max pooling of every plane: y[o] = the largest input of window o (padding never wins; NaN
// propagates), argmax[o] = its position in the plane (the first one on ties).
template <class T>
void max_pool_planes(const T* x, index_t count, const planes& p, const window2d& g, T* y,
                     std::int32_t* argmax) {
  const index_t l = p.out_h * p.out_w;
  parallel_items(count, count * l * g.kernel.h * g.kernel.w, [&](index_t i) {
    const T* plane = x + i * p.h * p.w;
    for (index_t oh = 0; oh < p.out_h; ++oh) {
      T* best = y + i * l + oh * p.out_w;
      std::int32_t* at = argmax + i * l + oh * p.out_w;
      std::fill(best, best + p.out_w, -std::numeric_limits<T>::infinity());
      std::fill(at, at + p.out_w, -1);
      for (index_t kh = 0; kh < g.kernel.h; ++kh) {
        const index_t ih = oh * g.stride.h + kh - g.padding.h;
        if (ih < 0 || ih >= p.h) continue;
        for (index_t kw = 0; kw < g.kernel.w; ++kw) {
          index_t ow0, ow1;
          valid_range(p.out_w, p.w, g.stride.w, kw, g.padding.w, ow0, ow1);
          const index_t base = ih * p.w + kw - g.padding.w;
          for (index_t ow = ow0; ow < ow1; ++ow) {
            const index_t pos = base + ow * g.stride.w;
            const T v = plane[pos];
            if (at[ow] < 0 || v > best[ow] || (v != v && best[ow] == best[ow])) {
              best[ow] = v;
              at[ow] = static_cast<std::int32_t>(pos);
            }
          }
        }
      }
    }
  });
}

// Adds each output gradient into the input position its window's maximum came from.
template <class T>
void max_unpool_add(const T* g, const std::int32_t* argmax, index_t count, const planes& p, T* dx) {
  const index_t l = p.out_h * p.out_w;
  parallel_items(count, count * l, [&](index_t i) {
    T* plane = dx + i * p.h * p.w;
    for (index_t o = 0; o < l; ++o) plane[argmax[i * l + o]] += g[i * l + o];
  });
}

// Average pooling of every plane (zero padding counts: divides by the full kernel size).
template <class T>
void avg_pool_planes(const T* x, index_t count, const planes& p, const window2d& g, T* y) {
  const index_t l = p.out_h * p.out_w;
  const T scale = T(1) / static_cast<T>(g.kernel.h * g.kernel.w);
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (is_pool_2x2(g) && p.out_w >= pool_2x2_rows::min_outputs) {
      parallel_items(count, count * l * 4, [&](index_t i) {
        for (index_t oh = 0; oh < p.out_h; ++oh) {
          const float* r0 = x + i * p.h * p.w + 2 * oh * p.w;
          pool_2x2_rows::average(r0, r0 + p.w, p.out_w, y + i * l + oh * p.out_w);
        }
      });
      return;
    }
  }
#endif
  if (is_pool_2x2(g)) {
    // The general loop's operations in its order (0 + the row above's pair, then the row
    // below's), so that the result is the same to the bit, in one pass over each output row.
    parallel_items(count, count * l * 4, [&](index_t i) {
      for (index_t oh = 0; oh < p.out_h; ++oh) {
        const T* __restrict r0 = x + i * p.h * p.w + 2 * oh * p.w;
        const T* __restrict r1 = r0 + p.w;
        T* __restrict out = y + i * l + oh * p.out_w;
        for (index_t ow = 0; ow < p.out_w; ++ow)
          out[ow] = (((T(0) + r0[2 * ow]) + r0[2 * ow + 1]) + r1[2 * ow] + r1[2 * ow + 1]) * scale;
      }
    });
    return;
  }
  parallel_items(count, count * l * g.kernel.h * g.kernel.w, [&](index_t i) {
    const T* __restrict plane = x + i * p.h * p.w;
    for (index_t oh = 0; oh < p.out_h; ++oh) {
      T* __restrict out = y + i * l + oh * p.out_w;
      std::fill(out, out + p.out_w, T(0));
      for (index_t kh = 0; kh < g.kernel.h; ++kh) {
        const index_t ih = oh * g.stride.h + kh - g.padding.h;
        if (ih < 0 || ih >= p.h) continue;
        for (index_t kw = 0; kw < g.kernel.w; ++kw) {
          index_t ow0, ow1;
          valid_range(p.out_w, p.w, g.stride.w, kw, g.padding.w, ow0, ow1);
          const index_t base = ih * p.w + kw - g.padding.w;
          for (index_t ow = ow0; ow < ow1; ++ow) out[ow] += plane[base + ow * g.stride.w];
        }
      }
      for (index_t ow = 0; ow < p.out_w; ++ow) out[ow] *= scale;
    }
  });
}

// Spreads each output gradient, divided by the kernel size, over its window's input positions:
// adding into dx, or with Add false writing every element of dx (the bits of adding into zeros;
// where the windows tile the plane, no pass zeroing it first).
template <bool Add, class T>
void avg_unpool(const T* g, index_t count, const planes& p, const window2d& win, T* dx) {
  const index_t l = p.out_h * p.out_w;
  const T scale = T(1) / static_cast<T>(win.kernel.h * win.kernel.w);
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (is_pool_2x2(win) && p.out_w >= pool_2x2_rows::min_outputs) {
      parallel_items(count, count * l * 4, [&](index_t i) {
        float* plane = dx + i * p.h * p.w;
        for (index_t oh = 0; oh < p.out_h; ++oh) {
          float* r0 = plane + 2 * oh * p.w;
          pool_2x2_rows::spread<Add>(g + i * l + oh * p.out_w, p.out_w, r0, r0 + p.w);
          if constexpr (!Add) {  // an odd width's last column, which no window reaches
            std::fill(r0 + 2 * p.out_w, r0 + p.w, 0.f);
            std::fill(r0 + p.w + 2 * p.out_w, r0 + 2 * p.w, 0.f);
          }
        }
        if constexpr (!Add) std::fill(plane + 2 * p.out_h * p.w, plane + p.h * p.w, 0.f);
      });
      return;
    }
  }
#endif
  if (is_pool_2x2(win)) {  // each input position receives one gradient at most
    parallel_items(count, count * l * 4, [&](index_t i) {
      if constexpr (!Add) std::fill(dx + i * p.h * p.w, dx + (i + 1) * p.h * p.w, T(0));
      for (index_t oh = 0; oh < p.out_h; ++oh) {
        const T* __restrict grad = g + i * l + oh * p.out_w;
        T* __restrict r0 = dx + i * p.h * p.w + 2 * oh * p.w;
        T* __restrict r1 = r0 + p.w;
        for (index_t ow = 0; ow < p.out_w; ++ow) {
          const T v = grad[ow] * scale;
          r0[2 * ow] += v;
          r0[2 * ow + 1] += v;
          r1[2 * ow] += v;
          r1[2 * ow + 1] += v;
        }
      }
    });
    return;
  }
  parallel_items(count, count * l * win.kernel.h * win.kernel.w, [&](index_t i) {
    T* __restrict plane = dx + i * p.h * p.w;
    if constexpr (!Add) std::fill(plane, plane + p.h * p.w, T(0));
    for (index_t oh = 0; oh < p.out_h; ++oh) {
      const T* __restrict grad = g + i * l + oh * p.out_w;
      for (index_t kh = 0; kh < win.kernel.h; ++kh) {
        const index_t ih = oh * win.stride.h + kh - win.padding.h;
        if (ih < 0 || ih >= p.h) continue;
        for (index_t kw = 0; kw < win.kernel.w; ++kw) {
          index_t ow0, ow1;
          valid_range(p.out_w, p.w, win.stride.w, kw, win.padding.w, ow0, ow1);
          const index_t base = ih * p.w + kw - win.padding.w;
          for (index_t ow = ow0; ow < ow1; ++ow)
            plane[base + ow * win.stride.w] += grad[ow] * scale;
        }
      }
    }
  });
}

}  // namespace detail::host_loops

namespace detail {

// window_ops for backends whose kernels are CPU code: the loops above as host kernels.
template <class B>
struct host_window_ops {
  template <class T>
  using in = tensor_view<const T, B>;
  template <class T>
  using out = tensor_view<T, B>;

  template <class T, class C>
  static void im2col(in<T> x, index_t batch, planes p, window2d g, out<C> col) {
    executor<B>::host_kernel(
        [=](const auto& x_, const auto& col_) {
          host_loops::im2col(x_.raw_data(), batch, p, g, col_.raw_data());
        },
        x, col);
  }
  template <class T>
  static void col2im_add(in<T> col, index_t batch, planes p, window2d g, out<T> dx) {
    executor<B>::host_kernel(
        [=](const auto& col_, const auto& dx_) {
          host_loops::col2im_add(col_.raw_data(), batch, p, g, dx_.raw_data());
        },
        col, dx);
  }
  template <class T>
  static void max_pool(in<T> x, index_t count, planes p, window2d g, out<T> y,
                       out<std::int32_t> argmax) {
    executor<B>::host_kernel(
        [=](const auto& x_, const auto& y_, const auto& argmax_) {
          host_loops::max_pool_planes(x_.raw_data(), count, p, g, y_.raw_data(),
                                      argmax_.raw_data());
        },
        x, y, argmax);
  }
  template <class T>
  static void max_unpool_add(in<T> grad, in<std::int32_t> argmax, index_t count, planes p, window2d,
                             out<T> dx) {
    executor<B>::host_kernel(
        [=](const auto& grad_, const auto& argmax_, const auto& dx_) {
          host_loops::max_unpool_add(grad_.raw_data(), argmax_.raw_data(), count, p,
                                     dx_.raw_data());
        },
        grad, argmax, dx);
  }
  template <class T>
  static void avg_pool(in<T> x, index_t count, planes p, window2d g, out<T> y) {
    executor<B>::host_kernel(
        [=](const auto& x_, const auto& y_) {
          host_loops::avg_pool_planes(x_.raw_data(), count, p, g, y_.raw_data());
        },
        x, y);
  }
  template <class T>
  static void avg_unpool_add(in<T> grad, index_t count, planes p, window2d g, out<T> dx) {
    executor<B>::host_kernel(
        [=](const auto& grad_, const auto& dx_) {
          host_loops::avg_unpool<true>(grad_.raw_data(), count, p, g, dx_.raw_data());
        },
        grad, dx);
  }
  template <class T>
  static void avg_unpool(in<T> grad, index_t count, planes p, window2d g, out<T> dx) {
    executor<B>::host_kernel(
        [=](const auto& grad_, const auto& dx_) {
          host_loops::avg_unpool<false>(grad_.raw_data(), count, p, g, dx_.raw_data());
        },
        grad, dx);
  }
};

}  // namespace detail
}  // namespace meld
