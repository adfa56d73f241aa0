// The emulated device's thrust::transform_iterator: f applied to the values of another iterator.
#pragma once

#include <cstddef>
#include <utility>

namespace thrust {

template <class F, class It>
class transform_iterator {
 public:
  transform_iterator(It it, F f) : it_(it), f_(f) {}
  auto operator[](std::ptrdiff_t i) const { return f_(it_[i]); }
  auto operator*() const { return f_(*it_); }
  transform_iterator operator+(std::ptrdiff_t i) const { return {it_ + i, f_}; }

 private:
  It it_;
  F f_;
};

template <class It, class F>
transform_iterator<F, It> make_transform_iterator(It it, F f) {
  return {it, f};
}

}  // namespace thrust
