// The definitions of host_memory.hpp's runtime functions (MELD_RUNTIME in core/config.hpp):
// included by host_memory.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include <mutex>
#include <vector>

#include "host_memory.hpp"

namespace meld {
namespace detail {

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

MELD_RUNTIME std::size_t host_rounded_size(std::size_t bytes) {
  const std::size_t align = bytes >= large_block ? huge_page : cache_line;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  if (rounded < bytes)
    throw allocation_error(detail::cat("meld: cannot allocate ", bytes, " bytes"));
  return rounded;
}

MELD_RUNTIME void* host_allocate(std::size_t bytes) {
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

}  // namespace detail
}  // namespace meld
