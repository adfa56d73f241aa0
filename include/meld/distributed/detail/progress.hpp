// What the CPU communicators share: requests (the handles of asynchronous collectives), the
// progress queue that runs a rank's asynchronous collectives in order on a background thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "../../core/config.hpp"
#include "../../core/trace.hpp"
#include "../../runtime/waiter.hpp"
#include "../comm_error.hpp"
#include "../communicator.hpp"

namespace meld {

namespace detail::distributed {

using clock = std::chrono::steady_clock;

struct request_state {
  std::atomic<bool> done{false};
  std::exception_ptr error;
  std::mutex mutex;
  std::condition_variable cv;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard lock(mutex);
      error = std::move(e);
      done.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
};

// A scratch buffer that grows on demand (64-byte aligned).
class scratch_buffer {
 public:
  void* get(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t(cache_line))));
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  struct release {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t(cache_line)); }
  };
  std::unique_ptr<std::byte, release> data_;
  std::size_t size_ = 0;
};

// Runs the asynchronous collectives of one rank, in the order they were issued (which is the
// order every rank issues them), on one background thread started on first use. A synchronous
// collective issued while nothing is queued runs on the caller's thread; otherwise it queues
// behind the others and the caller waits.
class progress_queue {
 public:
  progress_queue() = default;
  progress_queue(const progress_queue&) = delete;
  progress_queue& operator=(const progress_queue&) = delete;
  ~progress_queue() { stop(); }

  // rank: the rank whose collectives the thread runs, for its name in traces.
  std::shared_ptr<request_state> submit(std::function<void()> job, int rank = -1) {
    auto state = std::make_shared<request_state>();
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) thread_ = std::thread([this, rank] { loop(rank); });
      jobs_.emplace_back(std::move(job), state);
    }
    cv_.notify_all();
    return state;
  }

  // Runs job now: on this thread when the queue is idle, else after the queued jobs.
  template <class F>
  void run(F&& job) {
    bool here;
    {
      std::lock_guard lock(mutex_);
      // Only the rank's own thread issues collectives, so nothing is queued while this runs.
      here = jobs_.empty() && !busy_;
    }
    if (here) {
      job();
      return;
    }
    auto state = submit(std::function<void()>(std::forward<F>(job)));
    wait(*state);
  }

  // Waits until every queued job has run.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) return;
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  static void wait(request_state& s) {
    if (!s.done.load(std::memory_order_acquire)) {
      for (int i = 0; i < 2000 && !s.done.load(std::memory_order_acquire); ++i) cpu_relax();
      std::unique_lock lock(s.mutex);
      s.cv.wait(lock, [&] { return s.done.load(std::memory_order_acquire); });
    }
    if (s.error) rethrow_copy(s.error);
  }

  // Rethrows a copy of a comm_error (a fresh object owned by this thread, rather than the one
  // the progress thread threw and still references), other exceptions as they are.
  [[noreturn]] static void rethrow_copy(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const comm_error& ce) {
      throw comm_error(ce.why(), ce.what());
    }
  }

 private:
  void loop(int rank) {
    trace_recorder::get().name_thread(rank < 0 ? std::string("collectives")
                                               : cat("rank ", rank, " collectives"));
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // quit, with nothing left to run
      auto [job, state] = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      state->finish(std::move(error));
      lock.lock();
      busy_ = false;
      if (jobs_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<request_state>>> jobs_;
  bool busy_ = false;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace detail::distributed

// The handle of an asynchronous collective on a CPU communicator. wait() returns when the
// collective has completed on this rank and rethrows its error (comm_error on a timeout, a
// mismatch or an abort). A default-constructed request is complete.
class comm_request {
 public:
  comm_request() = default;
  explicit comm_request(std::shared_ptr<detail::distributed::request_state> s)
      : state_(std::move(s)) {}

  void wait() const {
    if (state_) detail::distributed::progress_queue::wait(*state_);
  }
  bool ready() const { return !state_ || state_->done.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<detail::distributed::request_state> state_;
};

namespace detail::distributed {

// Issues one collective of a rank on its queue: the job runs body(call) inside the rank's endpoint
// (thread_endpoint or mpi_endpoint: run() refuses it when the group has failed, and cleans up
// after an exception), as a traced range on the thread that runs it. async false: the job runs
// now, on the caller's thread when nothing is queued, else after the queued ones, and the request
// returned is complete. async true: it runs in turn on the progress thread, and the request says
// when it has.
template <class Endpoint, class F>
comm_request issue_on(progress_queue& queue, Endpoint& endpoint, const call_info& call, bool async,
                      F body) {
  auto job = [&endpoint, call, body,
              tag = trace_enabled() ? collective_tag : trace_arg{}]() mutable {
    trace_scope traced(name_of(call.kind), "comm", {"rank", endpoint.rank()},
                       {"elements", call.count}, tag);
    endpoint.run(call, body);
  };
  if (async) return comm_request(queue.submit(std::move(job), endpoint.rank()));
  queue.run(job);
  return {};
}

}  // namespace detail::distributed

}  // namespace meld
