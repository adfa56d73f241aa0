// Sliding 2-d windows over {batch, channels, height, width} tensors, as strided views: what
// convolution (im2col / col2im) and pooling are built from. No loops by hand: each window
// offset is one view, and copying or accumulating it is one meld assignment.
#pragma once

#include <string>

#include "../../tensor/tensor.hpp"
#include "../layer.hpp"

namespace meld::nn {

// A pair of extents (height, width); one number means both: `3` or `{3, 5}`.
struct size2 {
  index_t h = 0, w = 0;
  size2(index_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose
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
  bool padded() const { return padding.h > 0 || padding.w > 0; }

  void validate(const std::string& layer) const {
    if (kernel.h < 1 || kernel.w < 1 || stride.h < 1 || stride.w < 1 || padding.h < 0 ||
        padding.w < 0)
      throw std::invalid_argument(cat(layer,
                                      ": kernel and stride must be positive and padding "
                                      "non-negative"));
  }
};

// Checks that x is {batch, channels, height, width} (channels as given, unless negative).
inline void expect_image_batch(const std::string& layer, const shape_t& s, index_t channels) {
  if (s.size() != 4 || (channels >= 0 && s[1] != channels))
    throw shape_error(cat(layer, ": the input has shape ", s, ", expected {batch, ",
                          channels >= 0 ? std::to_string(channels) : std::string("channels"),
                          ", height, width}"));
}

// x padded on both sides of height and width with `fill` (a new tensor), or x itself.
template <class T, class B>
tensor_view<const T, B> pad2d(const tensor_view<const T, B>& x, const size2& padding, T fill) {
  if (padding.h == 0 && padding.w == 0) return x;
  const shape_t& s = x.shape();
  tensor<T, B> p({s[0], s[1], s[2] + 2 * padding.h, s[3] + 2 * padding.w}, uninitialized);
  p.fill(fill);
  p.slice(all, all, range(padding.h, padding.h + s[2]), range(padding.w, padding.w + s[3])) = x;
  return std::move(p).release();
}

// The interior of a padded tensor, copied into a tensor of the unpadded shape.
template <class T, class B>
tensor<T, B> crop2d(tensor<T, B>&& padded, const size2& padding, const shape_t& shape) {
  if (padding.h == 0 && padding.w == 0) return std::move(padded);
  return tensor<T, B>(padded.slice(all, all, range(padding.h, padding.h + shape[2]),
                                   range(padding.w, padding.w + shape[3])));
}

// The window at kernel offset (i, j) of a padded input xp: a view of shape {batch, channels,
// out_h, out_w} whose element (n, c, y, x) is xp(n, c, i + stride_h y, j + stride_w x).
template <class View>
auto window_view(const View& xp, const window2d& g, index_t i, index_t j, index_t out_h,
                 index_t out_w) {
  return xp.slice(all, all, range(i, i + g.stride.h * (out_h - 1) + 1, g.stride.h),
                  range(j, j + g.stride.w * (out_w - 1) + 1, g.stride.w));
}

// im2col: col {channels, kh, kw, batch, out_h, out_w} from a padded input {batch, channels, ...}.
// Read as a matrix {channels kh kw, batch out_h out_w}, a convolution is weight {out, c kh kw}
// times col.
template <class T, class B, class View>
void im2col(const View& xp, tensor<T, B>& col, const window2d& g, index_t out_h, index_t out_w) {
  const shape_t& s = xp.shape();
  const shape_t shape{s[1], g.kernel.h, g.kernel.w, s[0], out_h, out_w};
  if (!(col.shape() == shape)) col = tensor<T, B>(shape, uninitialized);
  for (index_t i = 0; i < g.kernel.h; ++i)
    for (index_t j = 0; j < g.kernel.w; ++j)
      col.slice(all, i, j) = window_view(xp, g, i, j, out_h, out_w).permute({1, 0, 2, 3});
}

// col2im: adds col {channels, kh, kw, batch, out_h, out_w} into the padded gradient dxp
// {batch, channels, ...} (windows that overlap add up).
template <class T, class B, class View>
void col2im_add(const tensor_view<const T, B>& col, const View& dxp, const window2d& g,
                index_t out_h, index_t out_w) {
  for (index_t i = 0; i < g.kernel.h; ++i)
    for (index_t j = 0; j < g.kernel.w; ++j)
      window_view(dxp, g, i, j, out_h, out_w) += col.slice(all, i, j).permute({1, 0, 2, 3});
}

}  // namespace detail
}  // namespace meld::nn
