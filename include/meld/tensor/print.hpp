// Printing tensors and views as numpy and PyTorch do: meld::to_string(t, options) and
// std::ostream << t. A header line names the element type, the backend and the shape; the
// elements follow in nested brackets, aligned to one width, wrapped at a line width, and
// summarized with "..." when there are many. Device tensors are copied to the host once.
//
// Kept out of <meld/essentials.hpp> (tensor.hpp does not include it): <meld/meld.hpp> includes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "../backend/policy.hpp"
#include "convert.hpp"
#include "tensor.hpp"
#include "tensor_view.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// How meld::to_string and operator<< lay out a tensor. The defaults are PyTorch's.
struct print_options {
  int precision = 4;         ///< digits after the decimal point of floating elements
  int line_width = 80;       ///< characters per line before a row of elements wraps
  index_t threshold = 1000;  ///< more elements than this are summarized with "..."
  index_t edge_items = 3;    ///< elements kept at each end of each axis when summarized
  bool header = true;        ///< the first line: element type, backend and shape
};

namespace detail {

template <class X>
inline constexpr bool is_tensor_or_view = false;
template <class T, class B>
inline constexpr bool is_tensor_or_view<tensor<T, B>> = true;
template <class T, class B>
inline constexpr bool is_tensor_or_view<tensor_view<T, B>> = true;

/// "cpu<sync>", "sim<async>", ...: a backend's name with its policy.
template <class B>
std::string backend_label() {
  return std::string(B::name) + (std::is_same_v<typename B::policy, async> ? "<async>" : "<sync>");
}

// How floating elements are written: as integers with a trailing point ("3."), in fixed
// notation, or in scientific notation, chosen from the magnitudes of the finite elements shown
// (PyTorch's rule: scientific when the largest is at least 1e8, the smallest nonzero below 1e-4,
// or their ratio above 1000).
struct float_style {
  enum kind_t { integral, fixed, scientific } kind = fixed;
  int precision = 4;
};

template <class T>
float_style choose_float_style(const std::vector<T>& shown, int precision) {
  float_style style{float_style::integral, precision};
  double lo = 0, hi = 0;
  bool any = false;
  for (T v : shown) {
    if (!std::isfinite(v)) continue;
    if (v != std::nearbyint(v)) style.kind = float_style::fixed;
    const double a = std::fabs(static_cast<double>(v));
    if (a == 0) continue;
    lo = any ? std::min(lo, a) : a;
    hi = any ? std::max(hi, a) : a;
    any = true;
  }
  if (any && (hi >= 1e8 || lo < 1e-4 || hi / lo > 1000)) {
    // Integers print exactly in fixed notation up to 1e8; beyond, and for mixed magnitudes,
    // scientific notation keeps every element readable.
    if (style.kind != float_style::integral || hi >= 1e8) style.kind = float_style::scientific;
  }
  return style;
}

template <class T>
std::string format_element(T v, const float_style& style) {
  if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    const double d = static_cast<double>(v);
    switch (style.kind) {
      case float_style::integral:
        std::snprintf(buf, sizeof buf, "%.0f.", d);
        break;
      case float_style::fixed:
        std::snprintf(buf, sizeof buf, "%.*f", style.precision, d);
        break;
      case float_style::scientific:
        std::snprintf(buf, sizeof buf, "%.*e", style.precision, d);
        break;
    }
    return buf;
  }
}

// The indices shown along an axis of extent n: all of them, or the first and last edge items
// with -1 standing for the "..." between them.
inline std::vector<index_t> shown_indices(index_t n, bool summarize, index_t edge) {
  std::vector<index_t> out;
  if (summarize && n > 2 * edge) {
    for (index_t i = 0; i < edge; ++i) out.push_back(i);
    out.push_back(-1);
    for (index_t i = n - edge; i < n; ++i) out.push_back(i);
  } else {
    for (index_t i = 0; i < n; ++i) out.push_back(i);
  }
  return out;
}

// Writes the elements of a contiguous host tensor in nested brackets.
template <class T>
class element_printer {
 public:
  element_printer(const tensor<T, cpu<>>& t, const print_options& opt)
      : data_(t.data()), shape_(t.shape()), opt_(opt) {
    summarize_ = opt.threshold >= 0 && t.size() > opt.threshold;
    strides_ = row_major_strides(shape_);
    std::vector<T> shown;
    collect(0, 0, shown);
    if constexpr (std::is_floating_point_v<T>) style_ = choose_float_style(shown, opt.precision);
    for (T v : shown) width_ = std::max(width_, format_element(v, style_).size());
  }

  void write(std::string& out) const {
    if (shape_.size() == 0) {
      out += format_element(data_[0], style_);
      return;
    }
    std::size_t column = 0;
    write_axis(out, 0, 0, column);
  }

 private:
  void collect(int axis, index_t offset, std::vector<T>& shown) const {
    if (axis == shape_.size()) {
      shown.push_back(data_[offset]);
      return;
    }
    for (index_t i : shown_indices(shape_[axis], summarize_, opt_.edge_items))
      if (i >= 0) collect(axis + 1, offset + i * strides_[axis], shown);
  }

  void pad(std::string& out, const std::string& s) const {
    if (s.size() < width_) out.append(width_ - s.size(), ' ');
    out += s;
  }

  // column: characters written on the current line (for wrapping the last axis).
  void write_axis(std::string& out, int axis, index_t offset, std::size_t& column) const {
    const int rank = shape_.size();
    out += '[';
    ++column;
    const std::vector<index_t> idx = shown_indices(shape_[axis], summarize_, opt_.edge_items);
    const std::size_t indent = static_cast<std::size_t>(axis) + 1;
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const bool last = k + 1 == idx.size();
      if (axis == rank - 1) {
        // A token is an element padded to the common width, or "..."; then "," or, last, "]".
        const std::size_t token = idx[k] < 0 ? std::max<std::size_t>(width_, 3) : width_;
        if (k > 0 && column + 1 + token + 1 > static_cast<std::size_t>(opt_.line_width)) {
          out += '\n';
          out.append(indent, ' ');
          column = indent;
        } else if (k > 0) {
          out += ' ';
          ++column;
        }
        if (idx[k] < 0)
          pad(out, "...");
        else
          pad(out, format_element(data_[offset + idx[k] * strides_[axis]], style_));
        column += token;
        if (!last) {
          out += ',';
          ++column;
        }
      } else {
        if (k > 0) {
          // numpy's layout: one line per row, one blank line per axis beyond the last two.
          out.append(static_cast<std::size_t>(rank - axis - 2), '\n');
          out += '\n';
          out.append(indent, ' ');
          column = indent;
        }
        if (idx[k] < 0) {
          out += "...";
          column += 3;
        } else {
          write_axis(out, axis + 1, offset + idx[k] * strides_[axis], column);
        }
        if (!last) {
          out += ',';
          ++column;
        }
      }
    }
    out += ']';
    ++column;
  }

  const T* data_;
  shape_t shape_;
  strides_t strides_;
  print_options opt_;
  bool summarize_ = false;
  float_style style_;
  std::size_t width_ = 0;
};

}  // namespace detail

/// The text of a tensor or view of any backend, as numpy and PyTorch lay it out:
///
///     tensor<float32, cpu<sync>> shape {2, 3}
///     [[ 1.0000,  2.5000, -3.0000],
///      [ 4.0000,  5.0000,  6.0000]]
///
/// Floating elements are fixed-point with options.precision digits, integers ending in "." when
/// every element is integral, scientific when magnitudes span more than 1000x (or reach 1e8);
/// nan, inf and -inf are written so. Tensors of more than options.threshold elements show
/// options.edge_items elements at each end of each axis and "..." between. Device tensors are
/// copied to the host once (a view is gathered on its device first).
template <class X>
requires detail::is_tensor_or_view<std::remove_cvref_t<X>> std::string to_string(
    const X& x, const print_options& options = {}) {
  using T = std::remove_const_t<value_t<X>>;
  using B = typename std::remove_cvref_t<X>::backend_type;
  if (options.precision < 0 || options.precision > 30 || options.line_width < 1 ||
      options.edge_items < 1)
    detail::raise<std::invalid_argument>(
        "meld::to_string: print_options need precision in [0, 30] (got ", options.precision,
        "), line_width >= 1 (got ", options.line_width, ") and edge_items >= 1 (got ",
        options.edge_items, ")");
  std::string out;
  if (options.header) {
    out += detail::is_tensor<std::remove_cvref_t<X>> ? "tensor<" : "tensor_view<";
    out += type_name<T>();
    out += ", ";
    out += detail::backend_label<B>();
    out += "> shape ";
    out += x.shape().str();
    out += '\n';
  }
  if (x.size() == 0) {
    out += "[]";  // as numpy prints an empty array of any shape
    return out;
  }
  const tensor<T, cpu<>> host = detail::host_elements(x);
  detail::element_printer<T>(host, options).write(out);
  return out;
}

/// Writes meld::to_string(t) (default print_options) to the stream.
template <class T, class B>
std::ostream& operator<<(std::ostream& os, const tensor<T, B>& t) {
  return os << to_string(t);
}

/// Writes meld::to_string(v) (default print_options) to the stream.
template <class T, class B>
std::ostream& operator<<(std::ostream& os, const tensor_view<T, B>& v) {
  return os << to_string(v);
}

/// @}

}  // namespace meld
