// Whether operations on variables record the graph: on by default, off inside a no_grad scope
// (evaluation, optimizer updates, finite differences), per thread, as data_parallel's workers each
// run their own forward.
#pragma once

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {
inline bool& grad_enabled_flag() {
  thread_local bool enabled = true;
  return enabled;
}
}  // namespace detail

/// Whether operations on variables record what backward needs (on this thread).
inline bool is_grad_enabled() {
  return detail::grad_enabled_flag();
}

/// A scope in which operations on variables record nothing: their results require no gradient.
/// Restores the previous mode when it ends (scopes nest).
class no_grad {
 public:
  no_grad() : saved_(detail::grad_enabled_flag()) { detail::grad_enabled_flag() = false; }
  ~no_grad() { detail::grad_enabled_flag() = saved_; }
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

 private:
  bool saved_;
};

/// A scope in which recording is on again (inside a no_grad scope).
class enable_grad {
 public:
  enable_grad() : saved_(detail::grad_enabled_flag()) { detail::grad_enabled_flag() = true; }
  ~enable_grad() { detail::grad_enabled_flag() = saved_; }
  enable_grad(const enable_grad&) = delete;
  enable_grad& operator=(const enable_grad&) = delete;

 private:
  bool saved_;
};

/// @}

}  // namespace meld::autograd
