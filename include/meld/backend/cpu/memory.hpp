// Host memory for tensors: cache-line aligned; large buffers are aligned to 2 MiB and advised to
// use transparent huge pages, which makes first touch of fresh memory about 4x cheaper on Linux
// (see shared/MACHINE-FACTS.md: 3.1 us vs 0.67 us per 4 KiB).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../backend.hpp"
#include "cpu.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace meld {

namespace detail {

inline constexpr std::size_t huge_page = std::size_t(2) << 20;

inline void* cpu_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t align = bytes >= 2 * huge_page ? huge_page : cache_line;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  if (rounded < bytes)
    throw allocation_error(detail::cat("meld: cannot allocate ", bytes, " bytes"));
  void* p = std::aligned_alloc(align, rounded);
  if (!p)
    throw allocation_error(detail::cat("meld: cannot allocate ", bytes, " bytes of host memory (",
                                       static_cast<double>(bytes) / (1 << 30), " GiB)"));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == huge_page) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace detail

// Host memory is one device, 0.
template <class Policy>
struct memory<cpu<Policy>> {
  static void* allocate(std::size_t bytes) { return detail::cpu_allocate(bytes); }
  template <class Access>
  static void deallocate(void* p, std::size_t, Access&) noexcept {
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
