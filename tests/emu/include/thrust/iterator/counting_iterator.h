// The emulated device's thrust::counting_iterator: the values start, start + 1, ...
#pragma once

#include <cstddef>

namespace thrust {

template <class T>
class counting_iterator {
 public:
  using value_type = T;
  explicit counting_iterator(T start = T()) : value_(start) {}
  T operator[](std::ptrdiff_t i) const { return static_cast<T>(value_ + static_cast<T>(i)); }
  T operator*() const { return value_; }
  counting_iterator operator+(std::ptrdiff_t i) const {
    return counting_iterator(static_cast<T>(value_ + static_cast<T>(i)));
  }

 private:
  T value_;
};

}  // namespace thrust
