// Memory of the simulated devices. Each device reserves two ranges of address space of its
// capacity: the device range, which is never accessible (PROT_NONE: the pointers that tensors hold
// point there, so a host dereference faults), and the host range, which holds the data at the same
// offset (what the sim executor and the copy functions translate to). Blocks are handed out best
// fit with 256-byte alignment (as cudaMalloc's) and kept for reuse when freed, as a GPU's
// stream-ordered pool keeps them; exhausting a device is an allocation_error naming it.
#pragma once

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "../../core/error.hpp"
#include "../backend.hpp"
#include "sim.hpp"

namespace meld {

namespace detail {

// A size from the environment: bytes, or with a K, M, G or T suffix (powers of 1024).
inline std::size_t sim_size_setting(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  double scale = 1;
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      scale = 1024.0;
      break;
    case 'M':
    case 'm':
      scale = 1024.0 * 1024;
      break;
    case 'G':
    case 'g':
      scale = 1024.0 * 1024 * 1024;
      break;
    case 'T':
    case 't':
      scale = 1024.0 * 1024 * 1024 * 1024;
      break;
    case ' ':
      break;
    default:
      scale = -1;
  }
  if (!(value > 0) || scale < 0 || value * scale > 1e15)
    throw std::invalid_argument(cat("meld::sim: ", name, "=", text,
                                    " is not a size (bytes, or a number with K, M, G or T)"));
  return static_cast<std::size_t>(value * scale);
}

inline constexpr int sim_max_devices = 16;

inline int sim_device_count() {
  static const int count = [] {
    const std::size_t n = sim_size_setting("MELD_SIM_DEVICES", 4);
    if (n > sim_max_devices)
      throw std::invalid_argument(
          cat("meld::sim: MELD_SIM_DEVICES=", n, " exceeds ", sim_max_devices));
    return static_cast<int>(n);
  }();
  return count;
}

class sim_arena;
// The arenas of the devices, created on first use; readable without a lock (see sim_host).
inline std::atomic<sim_arena*> sim_arenas[sim_max_devices] = {};

// On a fault at a sim device address, says so before the process dies of it (installed only where
// nothing else handles SIGSEGV, e.g. not under AddressSanitizer).
void install_sim_fault_report();

class sim_arena {
 public:
  static constexpr std::size_t alignment = 256;

  sim_arena(int device, std::size_t capacity) : device_(device) {
    capacity = (capacity + alignment - 1) / alignment * alignment;
    // Shrink until the address space can be reserved (machines that refuse large reservations).
    for (; capacity >= (std::size_t(1) << 26); capacity /= 2) {
      void* dev =
          ::mmap(nullptr, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (dev == MAP_FAILED) continue;
      void* host = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (host == MAP_FAILED) {
        ::munmap(dev, capacity);
        continue;
      }
#if defined(MADV_HUGEPAGE)
      ::madvise(host, capacity, MADV_HUGEPAGE);
#endif
      device_base_ = static_cast<char*>(dev);
      host_base_ = static_cast<char*>(host);
      capacity_ = free_bytes_ = capacity;
      insert_free(0, capacity);
      return;
    }
    throw allocation_error(cat("meld::sim: cannot reserve address space for sim device ", device));
  }
  sim_arena(const sim_arena&) = delete;
  sim_arena& operator=(const sim_arena&) = delete;

  void* allocate(std::size_t bytes) {
    const std::size_t size = (bytes + alignment - 1) / alignment * alignment;
    std::lock_guard lock(mutex_);
    auto fit = by_size_.lower_bound(size);
    if (size < bytes || fit == by_size_.end())
      throw allocation_error(cat("meld::sim: cannot allocate ", bytes, " bytes on sim device ",
                                 device_, ": ", free_bytes_, " bytes free of ", capacity_,
                                 " (the largest free block has ",
                                 by_size_.empty() ? 0 : by_size_.rbegin()->first,
                                 " bytes; MELD_SIM_MEMORY sets the capacity)"));
    const std::size_t offset = fit->second, block = fit->first;
    erase_free(offset, block);
    if (block > size) insert_free(offset + size, block - size);
    free_bytes_ -= size;
    return device_base_ + offset;
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    std::size_t offset = static_cast<std::size_t>(static_cast<char*>(p) - device_base_);
    std::size_t size = (bytes + alignment - 1) / alignment * alignment;
    std::lock_guard lock(mutex_);
    free_bytes_ += size;
    // Merge with the free neighbours.
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + size) {
      const std::size_t n = next->second;
      erase_free(next->first, n);
      size += n;
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        const std::size_t o = prev->first, n = prev->second;
        erase_free(o, n);
        offset = o;
        size += n;
      }
    }
    insert_free(offset, size);
  }

  bool contains(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= device_base_ && c < device_base_ + capacity_;
  }
  char* host(const void* p) const {
    return host_base_ + (static_cast<const char*>(p) - device_base_);
  }
  int device() const {
    return device_;
  }

 private:
  void insert_free(std::size_t offset, std::size_t size) {
    by_offset_.emplace(offset, size);
    by_size_.emplace(size, offset);
  }
  void erase_free(std::size_t offset, std::size_t size) {
    by_offset_.erase(offset);
    for (auto [it, end] = by_size_.equal_range(size); it != end; ++it)
      if (it->second == offset) {
        by_size_.erase(it);
        return;
      }
  }

  int device_;
  char* device_base_ = nullptr;
  char* host_base_ = nullptr;
  std::size_t capacity_ = 0, free_bytes_ = 0;
  std::mutex mutex_;
  std::map<std::size_t, std::size_t> by_offset_;     // free blocks: offset -> size
  std::multimap<std::size_t, std::size_t> by_size_;  // free blocks: size -> offset
};

inline sim_arena& sim_arena_of(int device) {
  if (sim_arena* a = sim_arenas[device].load(std::memory_order_acquire)) return *a;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (sim_arena* a = sim_arenas[device].load(std::memory_order_acquire)) return *a;
  install_sim_fault_report();
  // Never destroyed: tensors with static storage duration may free into it during exit.
  auto* arena = new sim_arena(device, sim_size_setting("MELD_SIM_MEMORY", std::size_t(16) << 30));
  sim_arenas[device].store(arena, std::memory_order_release);
  return *arena;
}

// The arena that holds device address p, or null.
inline sim_arena* sim_arena_holding(const void* p) {
  for (int d = 0; d < sim_max_devices; ++d) {
    sim_arena* a = sim_arenas[d].load(std::memory_order_acquire);
    if (a && a->contains(p)) return a;
  }
  return nullptr;
}

// The host address of sim device address p (null stays null): for the sim executor, the copy
// functions and communicators, never for user code.
template <class T>
T* sim_host(T* p) {
  if (!p) return nullptr;
  sim_arena* a = sim_arena_holding(p);
  if (!a) throw std::logic_error("meld::sim: a pointer that is not sim device memory");
  using byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(const_cast<byte*>(a->host(p)));
}

inline thread_local int sim_current_device = 0;

inline void sim_fault_report(int, siginfo_t* info, void*) {
  // Async-signal-safe: write(2) and arithmetic only. SA_RESETHAND has restored the default action,
  // so returning re-runs the access and the process dies of SIGSEGV as it would have.
  sim_arena* a = sim_arena_holding(info->si_addr);
  if (!a) return;
  char text[160] = "meld::sim: the host dereferenced sim device memory (device ";
  std::size_t n = std::strlen(text);
  if (a->device() >= 10) text[n++] = static_cast<char>('0' + a->device() / 10);
  text[n++] = static_cast<char>('0' + a->device() % 10);
  const char* rest = "): copy device tensors with meld::to<meld::cpu<>>(t) before host access\n";
  for (; *rest && n < sizeof(text) - 1; ++rest) text[n++] = *rest;
  [[maybe_unused]] const auto written = ::write(2, text, n);
}

inline void install_sim_fault_report() {
  const char* setting = std::getenv("MELD_SIM_FAULT_REPORT");
  if (setting && std::strcmp(setting, "0") == 0) return;
  struct sigaction current {};
  if (::sigaction(SIGSEGV, nullptr, &current) != 0) return;
  if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler != SIG_DFL) return;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction) return;  // someone else's
  struct sigaction report {};
  report.sa_sigaction = &sim_fault_report;
  report.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&report.sa_mask);
  ::sigaction(SIGSEGV, &report, nullptr);
}

}  // namespace detail

template <class Policy>
struct memory<sim<Policy>> {
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    return detail::sim_arena_of(detail::sim_current_device).allocate(bytes);
  }
  template <class Access>
  static void deallocate(void* p, std::size_t bytes, Access&) noexcept {
    if (!p) return;
    if (detail::sim_arena* a = detail::sim_arena_holding(p)) a->deallocate(p, bytes);
  }
  static int device_count() { return detail::sim_device_count(); }
  static int current_device() { return detail::sim_current_device; }
  // The host address of sim device memory p: the accessor that communicators use to move sim
  // tensors in place, device to device (as NCCL moves GPU memory), never for host code.
  template <class T>
  static T* host_alias(T* p) {
    return detail::sim_host(p);
  }
  static void set_current_device(int device) {
    if (device < 0 || device >= device_count())
      throw std::invalid_argument(detail::cat("meld::sim: device ", device, " does not exist (",
                                              device_count(),
                                              " sim devices; MELD_SIM_DEVICES sets the count)"));
    detail::sim_current_device = device;
  }
};

}  // namespace meld
