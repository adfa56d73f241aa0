// Devices of a backend: every tensor lives on one device of its backend (the CPU backends have
// one; sim and cuda several). New tensors go to the current device of the calling thread.
#pragma once

#include "backend.hpp"

namespace meld {

/// \addtogroup backends
/// @{

/// Makes `device` the current device of Backend for this thread within a scope:
///   meld::device_guard<meld::sim<>> on(1);   // tensors created here live on sim device 1
template <class Backend>
class device_guard {
 public:
  /// Makes device current; the previous one is restored by the destructor.
  explicit device_guard(int device) : saved_(memory<Backend>::current_device()) {
    memory<Backend>::set_current_device(device);
  }
  ~device_guard() { memory<Backend>::set_current_device(saved_); }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int saved_;
};

/// The number of devices of a backend that this process can use.
template <class Backend>
int device_count() {
  return memory<Backend>::device_count();
}

/// @}

}  // namespace meld
