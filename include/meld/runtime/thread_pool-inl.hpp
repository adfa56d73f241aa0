// The definitions of thread_pool.hpp's runtime functions (MELD_RUNTIME in core/config.hpp):
// included by thread_pool.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../core/error.hpp"
#include "waiter.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

#include "thread_pool.hpp"

namespace meld {
namespace detail {

MELD_RUNTIME int available_cores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

MELD_RUNTIME int default_thread_count() {
  if (const char* env = std::getenv("MELD_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n <= 1024) return static_cast<int>(n);
    raise<std::invalid_argument>("MELD_NUM_THREADS='", env,
                                 "' is not a thread count (an integer 1..1024)");
  }
  return available_cores();
}

}  // namespace detail
}  // namespace meld

namespace meld {

struct detail::thread_pool_state {
  static constexpr int spin_limit = 4000;  // ~20-50 us of pause: covers back-to-back loops

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

  std::vector<std::thread> workers;
  job current;
  alignas(cache_line) std::atomic<std::uint64_t> generation{0};
  alignas(cache_line) std::atomic<int> active{0};  // workers inside work()
  alignas(cache_line) std::atomic<bool> busy{false};
  std::atomic<bool> quit{false};
  detail::waiter posted;    // workers wait here for a job
  detail::waiter finished;  // the caller waits here for the tasks and the workers
  std::mutex resize_mutex;
};

MELD_RUNTIME thread_pool::thread_pool(int threads) : state_(std::make_unique<state>()) {
  state_->start(threads);
}

MELD_RUNTIME thread_pool::~thread_pool() {
  state_->stop();
}

MELD_RUNTIME int thread_pool::size() const {
  return static_cast<int>(state_->workers.size()) + 1;
}

MELD_RUNTIME thread_pool& thread_pool::global() {
  static thread_pool pool(detail::default_thread_count());
  return pool;
}

MELD_RUNTIME void thread_pool::resize(int threads) {
  if (threads < 1) detail::raise<std::invalid_argument>("thread_pool: ", threads, " threads");
  state& s = *state_;
  std::lock_guard lock(s.resize_mutex);
  while (s.busy.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  s.stop();
  s.start(threads);
  s.busy.store(false, std::memory_order_release);
}

MELD_NOINLINE MELD_RUNTIME void thread_pool::run(index_t tasks, void (*fn)(void*, index_t),
                                                 void* ctx) {
  if (tasks <= 0) return;
  state& s = *state_;
  if (tasks == 1 || s.workers.empty() || in_task_ ||
      s.busy.exchange(true, std::memory_order_acquire)) {
    for (index_t i = 0; i < tasks; ++i) fn(ctx, i);
    return;
  }
  state::job& job = s.current;
  job.fn = fn;
  job.ctx = ctx;
  job.tasks = tasks;
  job.next.store(0, std::memory_order_relaxed);
  job.done.store(0, std::memory_order_relaxed);
  job.error = nullptr;
  // An odd generation opens the job to the workers.
  s.generation.fetch_add(1, std::memory_order_seq_cst);
  s.posted.notify();

  in_task_ = true;
  s.work();
  in_task_ = false;
  s.finished.wait([&] { return job.done.load(std::memory_order_seq_cst) >= tasks; },
                  state::spin_limit);
  // An even generation closes it; then wait for workers still inside work() to leave, so that
  // the next job can rewrite the job safely.
  s.generation.fetch_add(1, std::memory_order_seq_cst);
  s.finished.wait([&] { return s.active.load(std::memory_order_seq_cst) == 0; }, state::spin_limit);
  std::exception_ptr error = job.error;
  s.busy.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

MELD_RUNTIME void detail::thread_pool_state::start(int threads) {
  quit.store(false);
  // Workers start from the current generation: a job or a stop posted before a new thread
  // first runs is still seen by it.
  const std::uint64_t now = generation.load(std::memory_order_seq_cst);
  for (int i = 1; i < threads; ++i) workers.emplace_back([this, now] { worker(now); });
}

MELD_RUNTIME void detail::thread_pool_state::stop() {
  quit.store(true);
  generation.fetch_add(2, std::memory_order_seq_cst);  // stays even: no job is opened
  posted.notify();
  for (auto& w : workers) w.join();
  workers.clear();
}

MELD_RUNTIME void detail::thread_pool_state::work() {
  const index_t tasks = current.tasks;
  for (index_t i; (i = current.next.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
    try {
      current.fn(current.ctx, i);
    } catch (...) {
      std::lock_guard lock(current.error_mutex);
      if (!current.error) current.error = std::current_exception();
    }
    if (current.done.fetch_add(1, std::memory_order_seq_cst) + 1 == tasks) finished.notify();
  }
}

MELD_RUNTIME void detail::thread_pool_state::worker(std::uint64_t seen) {
  thread_pool::in_task_ = true;
  for (;;) {
    posted.wait([&] { return generation.load(std::memory_order_seq_cst) != seen; }, spin_limit);
    seen = generation.load(std::memory_order_acquire);
    if (quit.load(std::memory_order_acquire)) return;
    if (seen % 2 == 0) continue;  // a closed job
    active.fetch_add(1, std::memory_order_seq_cst);
    if (generation.load(std::memory_order_seq_cst) == seen) work();
    if (active.fetch_sub(1, std::memory_order_seq_cst) == 1) finished.notify();
  }
}

}  // namespace meld
