// worker_crew: the threads of data_parallel's threads mode. k - 1 persistent threads run each job
// together with the calling thread (job(0) on the caller, job(i) on thread i), so that a step
// costs a wake-up, not k thread starts; every worker's exception comes back to the caller.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace meld::detail::dist {

class worker_crew {
 public:
  explicit worker_crew(int workers) : errors_(static_cast<std::size_t>(workers)) {
    for (int i = 1; i < workers; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~worker_crew() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  worker_crew(const worker_crew&) = delete;
  worker_crew& operator=(const worker_crew&) = delete;

  // Runs job on every worker; returns each worker's exception (null if none).
  const std::vector<std::exception_ptr>& run(const std::function<void(int)>& job) {
    std::fill(errors_.begin(), errors_.end(), nullptr);
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      remaining_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    call(job, 0);
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return remaining_ == 0; });
    job_ = nullptr;
    return errors_;
  }

 private:
  void call(const std::function<void(int)>& job, int i) {
    try {
      job(i);
    } catch (...) {
      errors_[static_cast<std::size_t>(i)] = std::current_exception();
    }
  }
  void loop(int i) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      const auto* job = job_;
      lock.unlock();
      call(*job, i);
      lock.lock();
      if (--remaining_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int remaining_ = 0;
  bool quit_ = false;
};

}  // namespace meld::detail::dist
