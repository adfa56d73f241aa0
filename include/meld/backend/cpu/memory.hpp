// The CPU backend's memory: host memory (runtime/host_memory.hpp), one device.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <stdexcept>

#include "../../core/error.hpp"
#include "../../runtime/host_memory.hpp"
#include "../backend.hpp"
#include "cpu.hpp"

namespace meld {

// Host memory is one device, 0.
template <class Policy>
struct memory<cpu<Policy>> {
  static void* allocate(std::size_t bytes) { return detail::host_allocate(bytes); }
  template <class Access>
  static void deallocate(void* p, std::size_t bytes, Access&) noexcept {
    if (p && bytes >= detail::large_block)
      detail::large_block_cache::global().give(p, detail::host_rounded_size(bytes));
    else
      std::free(p);
  }
  static int device_count() { return 1; }
  static int current_device() { return 0; }
  static void set_current_device(int device) {
    if (device != 0)
      throw std::invalid_argument(
          detail::cat("meld::cpu: device ", device, " does not exist (the host is device 0)"));
  }
};

}  // namespace meld
