// The data cache sizes of the host CPU, for cache blocking (the GEMM's panel sizes).
//
// Linux: sysconf (glibc reads CPUID on x86), else sysfs (/sys/devices/system/cpu/cpu0/cache, which
// also covers ARM, where sysconf reports 0). Elsewhere, or when neither answers: typical sizes of
// current cores (32 KiB, 1 MiB, 8 MiB). Queried once per process.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace meld::detail {

struct cache_sizes {
  std::size_t l1 = 32 << 10;  // data cache of one core
  std::size_t l2 = 1 << 20;   // of one core (or shared by a few, on some ARM parts)
  std::size_t l3 = 8 << 20;   // the whole last-level cache (0 when there is none)
};

#if defined(__linux__)
// The size in bytes of the data or unified cache at `level`, from sysfs; 0 when unknown.
inline std::size_t sysfs_cache_size(int level) {
  for (int index = 0; index < 8; ++index) {
    char path[96];
    auto read = [&](const char* leaf, char* out, int n) {
      std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/%s", index,
                    leaf);
      std::FILE* f = std::fopen(path, "r");
      if (!f) return false;
      const bool ok = std::fgets(out, n, f) != nullptr;
      std::fclose(f);
      return ok;
    };
    char text[32];
    if (!read("level", text, sizeof(text))) return 0;  // no more caches
    if (std::atoi(text) != level) continue;
    if (!read("type", text, sizeof(text)) || text[0] == 'I') continue;  // instruction cache
    if (!read("size", text, sizeof(text))) continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (value <= 0) continue;
    const std::size_t unit = (*end == 'K') ? 1024 : (*end == 'M') ? (1 << 20) : 1;
    return static_cast<std::size_t>(value) * unit;
  }
  return 0;
}
#endif

inline cache_sizes query_cache_sizes() {
  cache_sizes c;
#if defined(__linux__)
  auto pick = [](long from_sysconf, int level, std::size_t fallback) {
    if (from_sysconf > 0) return static_cast<std::size_t>(from_sysconf);
    const std::size_t from_sysfs = sysfs_cache_size(level);
    return from_sysfs > 0 ? from_sysfs : fallback;
  };
  long l1 = 0, l2 = 0, l3 = 0;
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  c.l1 = pick(l1, 1, c.l1);
  c.l2 = pick(l2, 2, c.l2);
  c.l3 = pick(l3, 3, c.l3);
#endif
  return c;
}

inline const cache_sizes& host_cache_sizes() {
  static const cache_sizes sizes = query_cache_sizes();
  return sizes;
}

}  // namespace meld::detail
