// Spin-then-sleep waiting for a condition that other threads make true: the thread pool's workers
// and callers, and the streams' workers, wait with it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace meld::detail {

inline void cpu_relax() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_ia32_pause();
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
  asm volatile("yield");
#endif
}

// Spins until ready() or until TimePoint's clock passes `until` (read every 256 spins, so that a
// short spin costs no clock reads); returns whether ready() holds. For waits that are usually
// short where the waiting thread has a core of its own: waking a sleeping thread costs more than
// a fraction of a millisecond of spinning in a virtual machine (the futex wake-up and the halted
// vCPU's start).
template <class Ready, class TimePoint>
bool spin_until(Ready ready, TimePoint until) {
  for (int i = 1; !ready(); ++i) {
    cpu_relax();
    if (i % 256 == 0 && TimePoint::clock::now() > until) return ready();
  }
  return true;
}

// wait spins, then sleeps; wait_until sleeps until the condition or a deadline. Notifying is free
// while nobody sleeps. (std::atomic::wait is avoided: libstdc++ 12 can lose its wakeups.)
class waiter {
 public:
  template <class Ready>
  void wait(Ready ready, int spins) {
    for (int i = 0; i < spins; ++i) {
      if (ready()) return;
      cpu_relax();
    }
    std::unique_lock lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, ready);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  template <class Ready, class TimePoint>
  void wait_until(Ready ready, TimePoint deadline) {
    std::unique_lock lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait_until(lock, deadline, ready);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  // Call after making a condition true (with a seq_cst store or read-modify-write).
  void notify() {
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);
      cv_.notify_all();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace meld::detail
