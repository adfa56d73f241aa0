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

#if MELD_RUNTIME_DEFINITIONS
#include <mutex>
#include <vector>
#endif

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

#if MELD_RUNTIME_DEFINITIONS
struct large_block_cache::state {
  struct block {
    void* data;
    std::size_t bytes;
  };
  mutable std::mutex mutex;
  std::vector<block> blocks;  // oldest first
  std::size_t cached = 0;
};

MELD_RUNTIME large_block_cache::large_block_cache() : state_(std::make_unique<state>()) {}

MELD_RUNTIME std::size_t large_block_cache::cached_bytes() const {
  std::lock_guard lock(state_->mutex);
  return state_->cached;
}

MELD_RUNTIME large_block_cache& large_block_cache::global() {
  static large_block_cache* cache = new large_block_cache;
  return *cache;
}

MELD_RUNTIME void* large_block_cache::take(std::size_t rounded) {
  state& s = *state_;
  std::lock_guard lock(s.mutex);
  for (std::size_t i = s.blocks.size(); i-- > 0;)
    if (s.blocks[i].bytes == rounded) {
      void* p = s.blocks[i].data;
      s.blocks.erase(s.blocks.begin() + static_cast<std::ptrdiff_t>(i));
      s.cached -= rounded;
      return p;
    }
  return nullptr;
}

MELD_RUNTIME void large_block_cache::give(void* p, [[maybe_unused]] std::size_t rounded) noexcept {
#if MELD_ASAN_BUILD
  std::free(p);
#else
  state& s = *state_;
  std::lock_guard lock(s.mutex);
  try {
    s.blocks.push_back({p, rounded});
  } catch (...) {  // no memory for the entry: free the block instead
    std::free(p);
    return;
  }
  s.cached += rounded;
  std::size_t drop = 0;
  while (s.cached > capacity) s.cached -= s.blocks[drop++].bytes;
  for (std::size_t i = 0; i < drop; ++i) std::free(s.blocks[i].data);
  s.blocks.erase(s.blocks.begin(), s.blocks.begin() + static_cast<std::ptrdiff_t>(drop));
#endif
}

MELD_RUNTIME void large_block_cache::release() noexcept {
  state& s = *state_;
  std::lock_guard lock(s.mutex);
  for (const auto& b : s.blocks) std::free(b.data);
  s.blocks.clear();
  s.cached = 0;
}
#endif

// `bytes` rounded up to the alignment host_allocate gives it.
MELD_RUNTIME std::size_t host_rounded_size(std::size_t bytes)
#if MELD_RUNTIME_DEFINITIONS
{
  const std::size_t align = bytes >= large_block ? huge_page : cache_line;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  if (rounded < bytes)
    throw allocation_error(detail::cat("meld: cannot allocate ", bytes, " bytes"));
  return rounded;
}
#else
    ;
#endif

MELD_RUNTIME void* host_allocate(std::size_t bytes)
#if MELD_RUNTIME_DEFINITIONS
{
  if (bytes == 0) return nullptr;
  const std::size_t align = bytes >= large_block ? huge_page : cache_line;
  const std::size_t rounded = host_rounded_size(bytes);
  if (align == huge_page)
    if (void* cached = large_block_cache::global().take(rounded)) return cached;
  void* p = std::aligned_alloc(align, rounded);
  if (!p)
    throw allocation_error(detail::cat("meld: cannot allocate ", bytes, " bytes of host memory (",
                                       static_cast<double>(bytes) / (1 << 30), " GiB)"));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == huge_page) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}
#else
    ;
#endif

}  // namespace detail

}  // namespace meld
