// Sliding 2-d windows over contiguous {batch, channels, height, width} data, the operations that
// convolution (im2col, col2im) and pooling are built from, as backend operations:
//
//   window_ops<B>::im2col(x, batch, p, g, col)          col {channels kh kw, batch oh ow} from x
//                                                       (of x's type, or bfloat16: rounded)
//   window_ops<B>::col2im_add(col, batch, p, g, dx)     adds the columns back into dx
//   window_ops<B>::max_pool(x, count, p, g, y, argmax)  the maximum of each window and where
//   window_ops<B>::max_unpool_add(grad, argmax, count, p, g, dx)
//   window_ops<B>::avg_pool(x, count, p, g, y)
//   window_ops<B>::avg_unpool_add(grad, count, p, g, dx)
//   window_ops<B>::avg_unpool(grad, count, p, g, dx)    writes every element of dx (0 where no
//                                                       window reaches): no zeroing pass first
//
// Operands are contiguous views of backend B (const views are read, the others written). These
// are data movement over short rows, not elementwise arithmetic, so each backend brings its own
// loops: CPU code for the CPU backends and sim (backend/cpu/window.hpp, run through the
// executor's host_kernel, so that they queue under async and see the simulated memory), CUDA
// kernels for cuda (backend/cuda/window.hpp).
#pragma once

#include <algorithm>
#include <string>

#include "../core/config.hpp"
#include "../core/error.hpp"

namespace meld {

// A pair of extents (height, width); one number means both: `3` or `{3, 5}`.
struct size2 {
  index_t h = 0, w = 0;
  size2(index_t both) : h(both), w(both) {}  // implicit on purpose: `.stride = 2`
  size2(index_t h_, index_t w_) : h(h_), w(w_) {}
};

namespace detail {

// Kernel, stride and padding of one convolution or pooling layer.
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

// The image geometry of one call: channels, input and output extents.
struct planes {
  index_t channels, h, w, out_h, out_w;
};

// Output positions [lo, hi) along one axis whose input index o * s + k - p lies in [0, n).
MELD_HD inline void valid_range(index_t out, index_t n, index_t s, index_t k, index_t p,
                                index_t& lo, index_t& hi) {
  const index_t off = k - p;  // input index = o * s + off
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = n - off > 0 ? (out < (n - off - 1) / s + 1 ? out : (n - off - 1) / s + 1) : 0;
  hi = hi > lo ? hi : lo;
}

}  // namespace detail

// Specialized by each backend (see above).
template <class Backend>
struct window_ops;

}  // namespace meld
