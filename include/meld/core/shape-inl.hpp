// The definitions of shape.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by shape.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "shape.hpp"

namespace meld {

MELD_NOINLINE MELD_RUNTIME dims::dims(std::initializer_list<index_t> values) {
  assign(values.begin(), values.end());
}

[[gnu::cold]] MELD_RUNTIME void dims::append_text(std::string& out, const void* d) {
  out += static_cast<const dims*>(d)->str();
}

[[gnu::cold]] MELD_NOINLINE MELD_RUNTIME std::string dims::str() const {
  std::string s = "{";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(v_[i]);
  }
  s += '}';
  return s;
}

MELD_NOINLINE MELD_RUNTIME index_t checked_size(const shape_t& shape, const char* what) {
  index_t n = 1;
  bool zero = false;
  for (index_t d : shape) {
    if (d < 0) detail::raise<shape_error>(what, ": negative extent in shape ", shape);
    if (d == 0)
      zero = true;
    else
      n = detail::checked_mul(n, d, what, "the element count of shape ", shape);
  }
  return zero ? 0 : n;
}

MELD_RUNTIME strides_t row_major_strides(const shape_t& shape) {
  strides_t s = dims::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i)
    s[i] = detail::checked_mul(s[i + 1], std::max<index_t>(shape[i + 1], 1), "row_major_strides",
                               "the strides of shape ", shape);
  return s;
}

}  // namespace meld
