// The memory a tensor owns, shared by the views taken of it (and, for asynchronous backends, by the
// queued work that still reads or writes it: the memory is freed after the last of them).
#pragma once

#include <cstddef>
#include <limits>

#include "../backend/backend.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace meld {

// What a backend tracks per storage to order asynchronous work on it (nothing, for synchronous
// backends). Asynchronous backends specialize it (see backend/cpu/async.hpp).
template <class Backend>
struct access_tracking {
  struct type {};
};

template <class T, class Backend>
class storage {
 public:
  explicit storage(index_t n) : size_(n) {
    if (static_cast<std::size_t>(n) > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw allocation_error(detail::cat("meld: ", n, " elements do not fit in memory"));
    data_ = static_cast<T*>(memory<Backend>::allocate(static_cast<std::size_t>(n) * sizeof(T)));
  }
  ~storage() {
    const std::size_t bytes = static_cast<std::size_t>(size_) * sizeof(T);
    // Backends that order frees after queued work (CUDA) take the ordering state too.
    if constexpr (requires { memory<Backend>::deallocate(data_, bytes, access_); })
      memory<Backend>::deallocate(data_, bytes, access_);
    else
      memory<Backend>::deallocate(data_, bytes);
  }
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;

  T* data() const { return data_; }
  index_t size() const { return size_; }

  // Ordering state of asynchronous work on this memory (empty for synchronous backends).
  typename access_tracking<Backend>::type& access() const { return access_; }

 private:
  [[no_unique_address]] mutable typename access_tracking<Backend>::type access_;
  index_t size_ = 0;
  T* data_ = nullptr;
};

}  // namespace meld
