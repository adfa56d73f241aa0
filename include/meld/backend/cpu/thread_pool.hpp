// A persistent pool of worker threads for fork-join loops. Threads are created once; a parallel
// loop publishes one job, the workers (and the calling thread) take task indices from an atomic
// counter, and the caller returns when every task is done.
//
// The pool serves one loop at a time. A loop started while the pool is busy (from another thread,
// or from inside a task) runs on its calling thread alone: never a deadlock, never
// oversubscription.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/error.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

#include "gcc12_warnings.hpp"  // push (the loop bodies are inlined into parallel_for)

namespace meld {

namespace detail {

inline void cpu_relax() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_ia32_pause();
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
  asm volatile("yield");
#endif
}

// Cores this process may run on (the affinity mask, which containers and taskset restrict).
MELD_RUNTIME int available_cores()
#if MELD_RUNTIME_DEFINITIONS
{
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}
#else
    ;
#endif

// MELD_NUM_THREADS if set to a positive integer, else every available core.
MELD_RUNTIME int default_thread_count()
#if MELD_RUNTIME_DEFINITIONS
{
  if (const char* env = std::getenv("MELD_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n <= 1024) return static_cast<int>(n);
    raise<std::invalid_argument>("MELD_NUM_THREADS='", env,
                                 "' is not a thread count (an integer 1..1024)");
  }
  return available_cores();
}
#else
    ;
#endif

// Spin-then-sleep waiting on a condition that other threads make true. Notifying is free while
// nobody sleeps. (std::atomic::wait is avoided: libstdc++ 12 can lose its wakeups.)
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

}  // namespace detail

/// A fixed set of worker threads that run parallel loops (parallel_for); meld's CPU evaluation
/// uses the global() pool, sized by MELD_NUM_THREADS or meld::set_num_threads.
class thread_pool {
 public:
  /// A pool of threads threads in all (threads - 1 workers and the caller).
  explicit thread_pool(int threads) { start(threads); }
  ~thread_pool() { stop(); }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// The pool that meld's evaluators use.
  static thread_pool& global();

  /// Threads that run a loop, the calling thread included.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /// Changes the number of threads. Waits for a running loop to finish first.
  void resize(int threads);

  /// Runs body(i) for every i in [0, tasks), spread over the pool; returns when all are done.
  /// Rethrows the first exception a task threw.
  template <class F>
  void parallel_for(index_t tasks, F&& body) {
    // The body is compiled once, behind a function pointer (also when the loop runs serially),
    // and the machinery in run() once per program, not once per loop body: a program with one
    // expression compiles a fraction of the code.
    run(
        tasks, [](void* ctx, index_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&body)));
  }

  /// True on a thread that is running a task of this or another pool loop.
  static bool in_task() { return in_task_; }

 private:
  static constexpr int spin_limit = 4000;  // ~20-50 us of pause: covers back-to-back loops

  // parallel_for of fn(ctx, i).
  void run(index_t tasks, void (*fn)(void*, index_t), void* ctx);

  struct job {
    void (*fn)(void*, index_t) = nullptr;
    void* ctx = nullptr;
    index_t tasks = 0;
    alignas(cache_line) std::atomic<index_t> next{0};
    alignas(cache_line) std::atomic<index_t> done{0};
    std::exception_ptr error;
    std::mutex error_mutex;
  };

  void start(int threads);

  void stop();

  // Takes tasks of the current job until none are left.
  void work();

  void worker(std::uint64_t seen);

  std::vector<std::thread> workers_;
  job job_;
  alignas(cache_line) std::atomic<std::uint64_t> generation_{0};
  alignas(cache_line) std::atomic<int> active_{0};  // workers inside work()
  alignas(cache_line) std::atomic<bool> busy_{false};
  std::atomic<bool> quit_{false};
  detail::waiter posted_;    // workers wait here for a job
  detail::waiter finished_;  // the caller waits here for the tasks and the workers
  std::mutex resize_mutex_;
  static inline thread_local bool in_task_ = false;
};

#if MELD_RUNTIME_DEFINITIONS
MELD_RUNTIME thread_pool& thread_pool::global() {
  static thread_pool pool(detail::default_thread_count());
  return pool;
}

MELD_RUNTIME void thread_pool::resize(int threads) {
  if (threads < 1) detail::raise<std::invalid_argument>("thread_pool: ", threads, " threads");
  std::lock_guard lock(resize_mutex_);
  while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  stop();
  start(threads);
  busy_.store(false, std::memory_order_release);
}

MELD_NOINLINE MELD_RUNTIME void thread_pool::run(index_t tasks, void (*fn)(void*, index_t),
                                                 void* ctx) {
  if (tasks <= 0) return;
  if (tasks == 1 || workers_.empty() || in_task_ ||
      busy_.exchange(true, std::memory_order_acquire)) {
    for (index_t i = 0; i < tasks; ++i) fn(ctx, i);
    return;
  }
  job_.fn = fn;
  job_.ctx = ctx;
  job_.tasks = tasks;
  job_.next.store(0, std::memory_order_relaxed);
  job_.done.store(0, std::memory_order_relaxed);
  job_.error = nullptr;
  // An odd generation opens the job to the workers.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  posted_.notify();

  in_task_ = true;
  work();
  in_task_ = false;
  finished_.wait([&] { return job_.done.load(std::memory_order_seq_cst) >= tasks; }, spin_limit);
  // An even generation closes it; then wait for workers still inside work() to leave, so that
  // the next job can rewrite job_ safely.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  finished_.wait([&] { return active_.load(std::memory_order_seq_cst) == 0; }, spin_limit);
  std::exception_ptr error = job_.error;
  busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

MELD_RUNTIME void thread_pool::start(int threads) {
  quit_.store(false);
  // Workers start from the current generation: a job or a stop posted before a new thread
  // first runs is still seen by it.
  const std::uint64_t now = generation_.load(std::memory_order_seq_cst);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, now] { worker(now); });
}

MELD_RUNTIME void thread_pool::stop() {
  quit_.store(true);
  generation_.fetch_add(2, std::memory_order_seq_cst);  // stays even: no job is opened
  posted_.notify();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

MELD_RUNTIME void thread_pool::work() {
  const index_t tasks = job_.tasks;
  for (index_t i; (i = job_.next.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
    try {
      job_.fn(job_.ctx, i);
    } catch (...) {
      std::lock_guard lock(job_.error_mutex);
      if (!job_.error) job_.error = std::current_exception();
    }
    if (job_.done.fetch_add(1, std::memory_order_seq_cst) + 1 == tasks) finished_.notify();
  }
}

MELD_RUNTIME void thread_pool::worker(std::uint64_t seen) {
  in_task_ = true;
  for (;;) {
    posted_.wait([&] { return generation_.load(std::memory_order_seq_cst) != seen; }, spin_limit);
    seen = generation_.load(std::memory_order_acquire);
    if (quit_.load(std::memory_order_acquire)) return;
    if (seen % 2 == 0) continue;  // a closed job
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == seen) work();
    if (active_.fetch_sub(1, std::memory_order_seq_cst) == 1) finished_.notify();
  }
}
#endif

/// Threads that meld's CPU evaluation uses (the calling thread included).
inline int num_threads() {
  return thread_pool::global().size();
}

/// Sets the threads that meld's CPU evaluation uses; the default is MELD_NUM_THREADS or every
/// available core.
inline void set_num_threads(int threads) {
  thread_pool::global().resize(threads);
}

}  // namespace meld

#include "gcc12_warnings.hpp"  // pop
