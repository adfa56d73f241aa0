// The memory a tensor owns, shared by the views taken of it (and, for asynchronous backends, by the
// queued work that still reads or writes it: the memory is freed after the last of them).
#pragma once

#include <cstddef>
#include <limits>
#include <memory>

#include "../backend/backend.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace meld {

/// Tag of storages that view memory owned by the caller (meld::borrow).
struct borrowed_memory_t {};

template <class T, class Backend>
class storage {
 public:
  // n elements on the current device of the backend.
  explicit storage(index_t n) : size_(n), device_(memory<Backend>::current_device()) {
    if (static_cast<std::size_t>(n) > std::numeric_limits<std::size_t>::max() / sizeof(T))
      detail::raise<allocation_error>("meld: ", n, " elements do not fit in memory");
    data_ = static_cast<T*>(memory<Backend>::allocate(static_cast<std::size_t>(n) * sizeof(T)));
  }
  // Memory that the caller owns and keeps alive (meld::borrow): never freed here.
  storage(T* borrowed, index_t n, borrowed_memory_t)
      : size_(n), device_(memory<Backend>::current_device()), data_(borrowed), owned_(false) {}
  // The ordering state goes along, so that backends can free after queued work (CUDA).
  ~storage() {
    if (owned_)
      memory<Backend>::deallocate(data_, static_cast<std::size_t>(size_) * sizeof(T), access_);
  }
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;

  // In the backend's memory: only its executor may dereference it (tensor_base.hpp).
  T* data() const { return data_; }
  index_t size() const { return size_; }
  int device() const { return device_; }

  // Ordering state of asynchronous work on this memory (empty for synchronous backends).
  typename access_tracking<Backend>::type& access() const { return access_; }

 private:
  [[no_unique_address]] mutable typename access_tracking<Backend>::type access_;
  index_t size_ = 0;
  int device_ = 0;
  T* data_ = nullptr;
  bool owned_ = true;
};

namespace detail {
// A new storage of n elements. Where queued work borrows storages (the access record can delete
// its owner after that work: cpu<async>, sim<async>), the storage's deleter hands it to the
// record instead of deleting it at once.
template <class Storage>
std::shared_ptr<Storage> make_storage(index_t n) {
  if constexpr (requires(Storage * s) { s->access().delete_after_work(s); })
    return std::shared_ptr<Storage>(new Storage(n),
                                    [](Storage* s) { s->access().delete_after_work(s); });
  else
    return std::make_shared<Storage>(n);
}

// A storage over memory the caller owns (not freed with the storage); deleted after queued work
// on it, as make_storage's are.
template <class Storage, class T>
std::shared_ptr<Storage> make_borrowed_storage(T* data, index_t n) {
  if constexpr (requires(Storage * s) { s->access().delete_after_work(s); })
    return std::shared_ptr<Storage>(new Storage(data, n, borrowed_memory_t{}),
                                    [](Storage* s) { s->access().delete_after_work(s); });
  else
    return std::make_shared<Storage>(data, n, borrowed_memory_t{});
}
}  // namespace detail

}  // namespace meld
