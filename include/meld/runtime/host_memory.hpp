// Host memory: cache-line aligned; large buffers are aligned to 2 MiB and advised to use
// transparent huge pages, which makes first touch of fresh memory about 4x cheaper on Linux
// (0.67 us instead of 3.1 us per 4 KiB, measured on the x86-64 VMs meld is benchmarked on).
//
// Freed large buffers (4 MiB and more) are kept for reuse by the next allocation of the same size
// (large_block_cache): malloc returns them to the kernel, so a training step that allocates its
// activations afresh would otherwise page-fault and zero them every step (7 % of a LeNet step).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "../core/config.hpp"

#include "../core/error.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

// Whether AddressSanitizer instruments this build (g++ defines the first, clang++ the second).
#if defined(__SANITIZE_ADDRESS__)
#define MELD_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MELD_ASAN_BUILD 1
#endif
#endif
#ifndef MELD_ASAN_BUILD
#define MELD_ASAN_BUILD 0
#endif

namespace meld {

namespace detail {

inline constexpr std::size_t huge_page = std::size_t(2) << 20;

// Blocks of at least this many bytes are aligned to huge pages and cached when freed.
inline constexpr std::size_t large_block = 2 * huge_page;

/// A process-wide cache of freed large host blocks, keyed by their size rounded up to huge pages:
/// a block of that size is handed out again instead of being returned to the kernel. At most
/// `capacity` bytes stay cached (the least recently freed go first). Blocks are not cleared: the
/// tensors that need zeros fill them. Under AddressSanitizer nothing is cached, so that a use
/// after free stays detectable.
class large_block_cache {
 public:
  /// Bytes the cache holds at most.
  static constexpr std::size_t capacity = std::size_t(1) << 30;

  /// The cache (never destroyed: tensors with static storage may be freed after it would be).
  static large_block_cache& global();

  /// A cached block of exactly `rounded` bytes, or nullptr.
  void* take(std::size_t rounded);

  /// Keeps a freed block of `rounded` bytes, freeing older ones beyond the capacity.
  void give(void* p, [[maybe_unused]] std::size_t rounded) noexcept;

  /// Frees every cached block (to give the memory back, e.g. between phases of a program).
  void release() noexcept;

  /// Bytes now cached.
  std::size_t cached_bytes() const;

 private:
  large_block_cache();
  struct state;  // the blocks and their lock, defined with the runtime
  std::unique_ptr<state> state_;
};

// `bytes` rounded up to the alignment host_allocate gives it.
std::size_t host_rounded_size(std::size_t bytes);

void* host_allocate(std::size_t bytes);

}  // namespace detail

}  // namespace meld

#if MELD_RUNTIME_DEFINITIONS
#include "host_memory-inl.hpp"
#endif
