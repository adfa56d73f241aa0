// meld::future<T>: the result of an asynchronous scalar reduction. get() (or converting to T)
// waits for it, so that `float s = meld::sum(x);` compiles and works under every policy.
#pragma once

#include <memory>
#include <utility>

namespace meld {

/// \addtogroup execution
/// @{

namespace detail {
// What a backend provides for a future: the value once ready, and how to wait for it.
template <class T>
struct future_state {
  virtual ~future_state() = default;
  virtual void wait() = 0;  // rethrows an error raised while computing the value
  virtual bool ready() = 0;
  T value{};
};
}  // namespace detail

/// The result of a reduction on an asynchronous backend: the value once the queued work has run.
/// Converts to T implicitly (float s = meld::sum(x)), which waits.
template <class T>
class future {
 public:
  /// A future over the shared state that the queued work fills in.
  explicit future(std::shared_ptr<detail::future_state<T>> s) : state_(std::move(s)) {}

  /// Waits for the value and returns it; rethrows an error raised while computing it.
  T get() const {
    state_->wait();
    return state_->value;
  }
  /// Same as get(): waits.
  operator T() const { return get(); }  // NOLINT: implicit on purpose (see above)
  /// Waits for the value without reading it; rethrows an error raised while computing it.
  void wait() const { state_->wait(); }
  /// Whether the value is computed (get() would not wait).
  bool ready() const { return state_->ready(); }

 private:
  std::shared_ptr<detail::future_state<T>> state_;
};

/// @}

}  // namespace meld
