// worker_crew: the threads of data_parallel's threads mode. k - 1 persistent threads run each job
// together with the calling thread (job(0) on the caller, job(i) on thread i), so that a step
// costs a wake-up, not k thread starts; every worker's exception comes back to the caller.
//
// Between jobs a worker spins for a while before it sleeps, and so does the caller waiting for
// the workers, where every worker can have a core of its own: the next step comes after the
// optimizer's update (a fraction of a millisecond), and waking a sleeping thread costs more than
// that in a virtual machine (the futex wake-up and the halted vCPU's start; on 2 vCPUs the MLP
// example's 2 workers lost ~0.4 ms a step to it).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../../core/trace.hpp"
#include "../../runtime/thread_pool.hpp"
#include "../../runtime/waiter.hpp"

namespace meld::detail::distributed {

class worker_crew {
 public:
  explicit worker_crew(int workers)
      : errors_(static_cast<std::size_t>(workers)), spin_(workers <= available_cores()) {
    for (int i = 1; i < workers; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~worker_crew() {
    quit_.store(true, std::memory_order_seq_cst);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    posted_.notify();
    for (auto& t : threads_) t.join();
  }
  worker_crew(const worker_crew&) = delete;
  worker_crew& operator=(const worker_crew&) = delete;

  // Runs job on every worker; returns each worker's exception (null if none).
  const std::vector<std::exception_ptr>& run(const std::function<void(int)>& job) {
    std::fill(errors_.begin(), errors_.end(), nullptr);
    job_ = &job;
    remaining_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes job_ and remaining_
    posted_.notify();
    call(job, 0);
    wait(finished_, [&] { return remaining_.load(std::memory_order_seq_cst) == 0; });
    job_ = nullptr;
    return errors_;
  }

 private:
  // How long a waiting thread spins before it sleeps, where it spins at all.
  static constexpr auto spin_time = std::chrono::microseconds(1000);

  template <class Ready>
  void wait(waiter& w, Ready ready) {
    if (spin_ && spin_until(ready, std::chrono::steady_clock::now() + spin_time)) return;
    w.wait(ready, 0);
  }

  void call(const std::function<void(int)>& job, int i) {
    try {
      job(i);
    } catch (...) {
      errors_[static_cast<std::size_t>(i)] = std::current_exception();
    }
  }
  void loop(int i) {
    trace_recorder::get().name_thread("data_parallel worker " + std::to_string(i));
    std::uint64_t seen = 0;
    for (;;) {
      wait(posted_, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      seen = generation_.load(std::memory_order_seq_cst);
      if (quit_.load(std::memory_order_seq_cst)) return;
      call(*job_, i);
      if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1) finished_.notify();
    }
  }

  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  const bool spin_;
  const std::function<void(int)>* job_ = nullptr;
  alignas(64) std::atomic<std::uint64_t> generation_{0};
  alignas(64) std::atomic<int> remaining_{0};
  std::atomic<bool> quit_{false};
  waiter posted_;    // workers wait here for a job
  waiter finished_;  // the caller waits here for the workers
};

}  // namespace meld::detail::distributed
