// Sliding 2-d windows over contiguous {batch, channels, height, width} data: the geometry, and
// the gather / scatter loops that convolution (im2col, col2im) and pooling are built from.
//
// These are data movement over short rows (a window row is often 3-26 elements), not elementwise
// arithmetic: as strided meld views, each row became one trip through the generic row driver,
// which cost more than the convolution's matrix product. Here each (sample, channel) plane or
// column row is one task of the thread pool, and the inner loops are plain copies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "../../backend/cpu/thread_pool.hpp"
#include "../layer.hpp"

namespace meld::nn {

// A pair of extents (height, width); one number means both: `3` or `{3, 5}`.
struct size2 {
  index_t h = 0, w = 0;
  size2(index_t both) : h(both), w(both) {}  // implicit on purpose: `.stride = 2`
  size2(index_t h_, index_t w_) : h(h_), w(w_) {}
};

namespace detail {

struct window2d {
  size2 kernel, stride, padding;

  // Output extent along one axis, or a shape_error naming the layer.
  static index_t out_extent(const std::string& layer, const char* axis, index_t in, index_t k,
                            index_t s, index_t p) {
    const index_t span = in + 2 * p;
    if (span < k)
      throw shape_error(cat(layer, ": the input ", axis, " ", in, " plus padding 2 x ", p,
                            " is smaller than the kernel (", k, ")"));
    return (span - k) / s + 1;
  }
  index_t out_h(const std::string& layer, index_t h) const {
    return out_extent(layer, "height", h, kernel.h, stride.h, padding.h);
  }
  index_t out_w(const std::string& layer, index_t w) const {
    return out_extent(layer, "width", w, kernel.w, stride.w, padding.w);
  }

  void validate(const std::string& layer) const {
    if (kernel.h < 1 || kernel.w < 1 || stride.h < 1 || stride.w < 1 || padding.h < 0 ||
        padding.w < 0)
      throw std::invalid_argument(
          cat(layer, ": kernel and stride must be positive and padding non-negative"));
  }
};

// Checks that x is {batch, channels, height, width} (channels as given, unless negative).
inline void expect_image_batch(const std::string& layer, const shape_t& s, index_t channels) {
  if (s.size() != 4 || (channels >= 0 && s[1] != channels))
    throw shape_error(cat(layer, ": the input has shape ", s, ", expected {batch, ",
                          channels >= 0 ? std::to_string(channels) : std::string("channels"),
                          ", height, width}"));
}

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

// The image geometry of one convolution or pooling call.
struct planes {
  index_t channels, h, w, out_h, out_w;
};

// Output positions [lo, hi) along one axis whose input index o * s + k - p lies in [0, n).
inline void valid_range(index_t out, index_t n, index_t s, index_t k, index_t p, index_t& lo,
                        index_t& hi) {
  const index_t off = k - p;  // input index = o * s + off
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = n - off > 0 ? std::min(out, (n - off - 1) / s + 1) : 0;
  hi = std::max(hi, lo);
}

// im2col: from `batch` samples of x (contiguous {batch, channels, h, w}), the matrix
// col {channels kh kw, batch out_h out_w} (row-major, zero where a window reaches the padding).
// A convolution is then weight {out, channels kh kw} x col.
template <class T>
void im2col(const T* x, index_t batch, const planes& p, const window2d& g, T* col) {
  const index_t kk = g.kernel.h * g.kernel.w, l = p.out_h * p.out_w, cols = batch * l;
  parallel_items(p.channels * kk, p.channels * kk * cols, [&](index_t r) {
    const index_t c = r / kk, kh = (r % kk) / g.kernel.w, kw = r % g.kernel.w;
    index_t ow0, ow1;
    valid_range(p.out_w, p.w, g.stride.w, kw, g.padding.w, ow0, ow1);
    for (index_t n = 0; n < batch; ++n) {
      const T* plane = x + (n * p.channels + c) * p.h * p.w;
      T* out = col + r * cols + n * l;
      for (index_t oh = 0; oh < p.out_h; ++oh, out += p.out_w) {
        const index_t ih = oh * g.stride.h + kh - g.padding.h;
        if (ih < 0 || ih >= p.h) {
          std::fill(out, out + p.out_w, T(0));
          continue;
        }
        // Input index of output column ow: base + ow * stride (in the plane for ow in [ow0, ow1)).
        const index_t base = ih * p.w + kw - g.padding.w;
        std::fill(out, out + ow0, T(0));
        if (g.stride.w == 1)
          std::copy(plane + base + ow0, plane + base + ow1, out + ow0);
        else
          for (index_t ow = ow0; ow < ow1; ++ow) out[ow] = plane[base + ow * g.stride.w];
        std::fill(out + ow1, out + p.out_w, T(0));
      }
    }
  });
}

// col2im: adds col {channels kh kw, batch out_h out_w} back into dx (contiguous {batch, channels,
// h, w}); windows that overlap add up. Each (sample, channel) plane is one task.
template <class T>
void col2im_add(const T* col, index_t batch, const planes& p, const window2d& g, T* dx) {
  const index_t kk = g.kernel.h * g.kernel.w, l = p.out_h * p.out_w, cols = batch * l;
  parallel_items(batch * p.channels, batch * p.channels * kk * l, [&](index_t i) {
    const index_t n = i / p.channels, c = i % p.channels;
    T* __restrict plane = dx + i * p.h * p.w;
    for (index_t kh = 0; kh < g.kernel.h; ++kh)
      for (index_t kw = 0; kw < g.kernel.w; ++kw) {
        const T* __restrict src = col + ((c * g.kernel.h + kh) * g.kernel.w + kw) * cols + n * l;
        index_t ow0, ow1;
        valid_range(p.out_w, p.w, g.stride.w, kw, g.padding.w, ow0, ow1);
        for (index_t oh = 0; oh < p.out_h; ++oh) {
          const index_t ih = oh * g.stride.h + kh - g.padding.h;
          if (ih < 0 || ih >= p.h) continue;
          const index_t base = ih * p.w + kw - g.padding.w;
          const T* s = src + oh * p.out_w;
          for (index_t ow = ow0; ow < ow1; ++ow) plane[base + ow * g.stride.w] += s[ow];
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

// Spreads each output gradient, divided by the kernel size, over its window's input positions.
template <class T>
void avg_unpool_add(const T* g, index_t count, const planes& p, const window2d& win, T* dx) {
  const index_t l = p.out_h * p.out_w;
  const T scale = T(1) / static_cast<T>(win.kernel.h * win.kernel.w);
  parallel_items(count, count * l * win.kernel.h * win.kernel.w, [&](index_t i) {
    T* __restrict plane = dx + i * p.h * p.w;
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

}  // namespace detail
}  // namespace meld::nn
