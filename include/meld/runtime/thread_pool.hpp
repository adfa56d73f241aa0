// A persistent pool of worker threads for fork-join loops. Threads are created once; a parallel
// loop publishes one job, the workers (and the calling thread) take task indices from an atomic
// counter, and the caller returns when every task is done.
//
// The pool serves one loop at a time. A loop started while the pool is busy (from another thread,
// or from inside a task) runs on its calling thread alone: never a deadlock, never
// oversubscription.
//
// The workers and their synchronization live behind a pointer, defined with the runtime: a
// program on the compiled runtime does not parse <thread>, <mutex> and <condition_variable> for
// every translation unit (a tenth of a one-expression program's compile time).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/gcc12_warnings.hpp"

MELD_GCC12_WARNINGS_OFF  // the loop bodies are inlined into parallel_for

namespace meld {
/// \addtogroup execution
/// @{

namespace detail {

// Cores this process may run on (the affinity mask, which containers and taskset restrict).
int available_cores();

// MELD_NUM_THREADS if set to a positive integer, else every available core.
int default_thread_count();

// The pool's workers, its current job and their synchronization (defined with the runtime).
struct thread_pool_state;

}  // namespace detail

/// A fixed set of worker threads that run parallel loops (parallel_for); meld's CPU evaluation
/// uses the global() pool, sized by MELD_NUM_THREADS or meld::set_num_threads.
class thread_pool {
 public:
  /// A pool of threads threads in all (threads - 1 workers and the caller).
  explicit thread_pool(int threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// The pool that meld's evaluators use.
  static thread_pool& global();

  /// Threads that run a loop, the calling thread included.
  int size() const;

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
  friend struct detail::thread_pool_state;
  using state = detail::thread_pool_state;

  // parallel_for of fn(ctx, i).
  void run(index_t tasks, void (*fn)(void*, index_t), void* ctx);

  std::unique_ptr<state> state_;
  static inline thread_local bool in_task_ = false;
};

/// Threads that meld's CPU evaluation uses (the calling thread included).
inline int num_threads() {
  return thread_pool::global().size();
}

/// Sets the threads that meld's CPU evaluation uses; the default is MELD_NUM_THREADS or every
/// available core.
inline void set_num_threads(int threads) {
  thread_pool::global().resize(threads);
}

/// @}

}  // namespace meld

#if MELD_RUNTIME_DEFINITIONS
#include "thread_pool-inl.hpp"
#endif

MELD_GCC12_WARNINGS_ON
