// CPU streams: in-order queues of work, each run by a dedicated worker thread (which uses the
// thread pool for large operations). Events mark points in a stream's work.
//
//   meld::stream s;                 a queue with its own worker thread
//   s.enqueue(f)                    runs f() on the worker after everything enqueued before
//   meld::event e = s.record();     completes when everything enqueued so far has run
//   e.wait(); s.synchronize();      wait on the host; rethrow an error raised on the worker
//   meld::stream_guard g(s);        tensors created in this scope (this thread) are bound to s
//   meld::synchronize();            waits for every stream
//
// An exception thrown by work on a stream is kept and rethrown, with its original message, at the
// next synchronization point of that stream (synchronize(), waiting on one of its events, reading
// a tensor it wrote); then the stream is usable again. Destroying a stream waits for its work.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "thread_pool.hpp"

namespace meld {

// Errors of the execution machinery itself: waiting on an event that was never recorded, using a
// stream that was destroyed.
class execution_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// A move-only callable stored inline when it fits (the captured expression of an assignment
// usually does), so that enqueueing does not allocate.
class task {
 public:
  task() = default;
  template <class F>
  explicit task(F&& f) {
    emplace(std::forward<F>(f));
  }
  task(task&& other) noexcept : ops_(other.ops_) {
    if (ops_) ops_->move(other.buffer_, buffer_);
    other.ops_ = nullptr;
  }
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      ops_ = other.ops_;
      if (ops_) ops_->move(other.buffer_, buffer_);
      other.ops_ = nullptr;
    }
    return *this;
  }
  ~task() { reset(); }

  // Stores f (an empty task only): in place when it fits, so that enqueueing does not allocate.
  template <class F>
  void emplace(F&& f) {
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= sizeof(buffer_) && alignof(Fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Fn>) {
      ::new (static_cast<void*>(buffer_)) Fn(std::forward<F>(f));
      ops_ = &inline_ops<Fn>;
    } else {
      *reinterpret_cast<Fn**>(buffer_) = new Fn(std::forward<F>(f));
      ops_ = &heap_ops<Fn>;
    }
  }

  void operator()() { ops_->invoke(buffer_); }
  void reset() {
    if (ops_) ops_->destroy(buffer_);
    ops_ = nullptr;
  }

 private:
  struct operations {
    void (*invoke)(void*);
    void (*destroy)(void*);
    void (*move)(void* from, void* to);
  };
  template <class Fn>
  static constexpr operations inline_ops = {[](void* p) { (*static_cast<Fn*>(p))(); },
                                            [](void* p) { static_cast<Fn*>(p)->~Fn(); },
                                            [](void* from, void* to) {
                                              ::new (to) Fn(std::move(*static_cast<Fn*>(from)));
                                              static_cast<Fn*>(from)->~Fn();
                                            }};
  template <class Fn>
  static constexpr operations heap_ops = {
      [](void* p) { (**static_cast<Fn**>(p))(); }, [](void* p) { delete *static_cast<Fn**>(p); },
      [](void* from, void* to) { *static_cast<Fn**>(to) = *static_cast<Fn**>(from); }};

  alignas(std::max_align_t) unsigned char buffer_[1008];  // an assignment of three views fits
  const operations* ops_ = nullptr;
};

// Enqueueing is one step for the whole process: the dependency bookkeeping of queued work
// (queued.hpp) and the producer side of every stream's queue run under this lock, so that two host
// threads enqueueing work on shared tensors cannot interleave. A spin lock, because the critical
// sections are a few dozen instructions and an uncontended acquire is one atomic exchange (a
// std::mutex costs two read-modify-writes, ~12 ns each on these machines).
class spin_lock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire))
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

inline spin_lock enqueue_lock_instance;
inline spin_lock& enqueue_lock() {
  return enqueue_lock_instance;
}

// An unbounded single-producer, single-consumer queue of tasks in fixed-size segments. The
// producer (whoever holds enqueue_lock()) constructs a task in its slot and publishes it with one
// store; the consumer (the stream's worker) runs it in place and resets the slot. Emptied segments
// go to a free list that the producer takes from, so bursts of work reuse warm memory instead of
// allocating (and page-faulting) fresh segments.
class task_queue {
  static constexpr std::size_t segment_tasks = 32;
  static constexpr int max_free_segments = 64;  // 2 MiB of idle slots at most
  struct segment {
    task slots[segment_tasks];
    segment* next = nullptr;
  };

 public:
  task_queue() : head_(new segment), tail_(head_) {}
  // Only once the consumer has stopped.
  ~task_queue() {
    while (head_) delete std::exchange(head_, head_->next);
    segment* f = free_.load(std::memory_order_acquire);
    while (f) delete std::exchange(f, f->next);
  }
  task_queue(const task_queue&) = delete;
  task_queue& operator=(const task_queue&) = delete;

  // Producer: appends the work (a task, or a callable stored in its slot in place); returns its
  // sequence number (1, 2, ...).
  template <class F>
  std::uint64_t push(F&& work) {
    if (tail_used_ == segment_tasks) {
      segment* fresh = take_free();
      tail_->next = fresh;  // published by the store below
      tail_ = fresh;
      tail_used_ = 0;
    }
    task& slot = tail_->slots[tail_used_];
    if (tail_used_ + 2 < segment_tasks) prefetch_for_write(tail_->slots[tail_used_ + 2]);
    if constexpr (std::is_same_v<std::decay_t<F>, task>)
      slot = std::move(work);
    else
      slot.emplace(std::forward<F>(work));
    ++tail_used_;
    // seq_cst: waiter::notify, called next, must not read the sleeper count before this store.
    published_.store(++pushed_, std::memory_order_seq_cst);
    return pushed_;
  }

  // Tasks published so far (any thread).
  std::uint64_t published() const { return published_.load(std::memory_order_acquire); }

  // Consumer: the oldest task not yet popped (only while published() says there is one).
  task& front() {
    if (head_used_ == segment_tasks) {
      segment* done = std::exchange(head_, head_->next);
      head_used_ = 0;
      give_free(done);
    }
    return head_->slots[head_used_];
  }
  // Consumer: destroys the front task.
  void pop() { head_->slots[head_used_++].reset(); }

 private:
  // The free list is a stack with one pusher (the consumer) and one popper (the producer), so a
  // popped node cannot come back between the popper's read and its compare-exchange (no ABA).
  segment* take_free() {
    segment* top = free_.load(std::memory_order_acquire);
    while (top && !free_.compare_exchange_weak(top, top->next, std::memory_order_acquire))
      ;
    if (!top) return new segment;
    free_count_.fetch_sub(1, std::memory_order_relaxed);
    top->next = nullptr;
    return top;
  }
  void give_free(segment* s) {
    if (free_count_.load(std::memory_order_relaxed) >= max_free_segments) {
      delete s;
      return;
    }
    free_count_.fetch_add(1, std::memory_order_relaxed);
    s->next = free_.load(std::memory_order_relaxed);
    while (!free_.compare_exchange_weak(s->next, s, std::memory_order_release))
      ;
  }

  // The consumer last touched a slot, so the producer's stores to it miss; asking for the lines
  // two tasks ahead lets those misses overlap the enqueueing work in between instead of stalling
  // the next locked instruction (the enqueue lock, the publishing store).
  static void prefetch_for_write(const task& t) {
    const char* p = reinterpret_cast<const char*>(&t);
    for (std::size_t line = 0; line < sizeof(task); line += cache_line)
      __builtin_prefetch(p + line, 1, 3);
  }

  segment* head_;  // consumer's
  std::size_t head_used_ = 0;
  alignas(cache_line) segment* tail_;  // producer's, on its own cache line
  std::size_t tail_used_ = 0;
  std::uint64_t pushed_ = 0;
  alignas(cache_line) std::atomic<std::uint64_t> published_{0};
  alignas(cache_line) std::atomic<segment*> free_{nullptr};
  std::atomic<int> free_count_{0};
};

class stream_state {
 public:
  explicit stream_state(std::string name) : name_(std::move(name)) {
    worker_ = std::thread([this] { run(); });
  }
  ~stream_state() { close(); }

  const std::string& name() const { return name_; }

  // Appends work; returns its sequence number (1, 2, ...). Throws if the stream was closed.
  std::uint64_t enqueue(task work) {
    std::lock_guard lock(enqueue_lock());
    return enqueue_locked(std::move(work));
  }
  // The same, for a caller that holds enqueue_lock(), with a task or any callable (stored in its
  // queue slot in place). Wakes the worker only if it sleeps.
  template <class F>
  std::uint64_t enqueue_locked(F&& work) {
    if (closed_.load(std::memory_order_relaxed)) closed_error();
    const std::uint64_t seq = queue_.push(std::forward<F>(work));
    work_ready_.notify();
    return seq;
  }

  std::uint64_t enqueued() const { return queue_.published(); }
  bool completed(std::uint64_t seq) const {
    return completed_.load(std::memory_order_acquire) >= seq;
  }

  // Blocks until work `seq` has run (spinning briefly first: stream work is often short).
  void wait_for(std::uint64_t seq) const {
    done_.wait([&] { return completed(seq); }, 2000);
  }

  // The first error raised on the worker since the last call, cleared.
  std::exception_ptr take_error() {
    if (!has_error_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(error_mutex_);
    has_error_.store(false, std::memory_order_relaxed);
    return std::exchange(error_, nullptr);
  }
  void rethrow_error() {
    if (std::exception_ptr e = take_error()) std::rethrow_exception(e);
  }

  // Runs the queued work, then stops the worker. Idempotent.
  void close() {
    if (closed_.load(std::memory_order_acquire)) return;
    {
      std::lock_guard lock(enqueue_lock());
      if (closed_.load(std::memory_order_relaxed)) return;
      closed_.store(true, std::memory_order_seq_cst);
      work_ready_.notify();
    }
    if (worker_.joinable()) worker_.join();
  }

  bool closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  [[noreturn]] void closed_error() const {
    throw execution_error(cat("stream '", name_, "' was destroyed; its work can no longer run"));
  }
  void run() {
    std::uint64_t done = 0;
    for (;;) {
      // Spin a while before sleeping: work usually comes in bursts, and waking a sleeping thread
      // costs microseconds.
      work_ready_.wait(
          [&] { return queue_.published() > done || closed_.load(std::memory_order_acquire); },
          20000);
      // closed_ is set after the last push (both under enqueue_lock()), so once it reads true the
      // count read after it is final.
      const bool closing = closed_.load(std::memory_order_acquire);
      if (queue_.published() == done) {
        if (closing) return;
        continue;
      }
      task& work = queue_.front();
      try {
        work();
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        has_error_.store(true, std::memory_order_release);
      }
      queue_.pop();
      completed_.store(++done, std::memory_order_seq_cst);  // seq_cst: read by done_.notify()
      done_.notify();
    }
  }

  std::string name_;
  task_queue queue_;
  alignas(cache_line) std::atomic<std::uint64_t> completed_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> has_error_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  mutable waiter work_ready_;
  mutable waiter done_;
  std::thread worker_;
};

}  // namespace detail

/// A point in a stream's work: complete when the work enqueued before it has run.
class event {
 public:
  event() = default;
  /// An event at position seq of stream s (streams make them: stream::record()).
  event(std::shared_ptr<detail::stream_state> s, std::uint64_t seq)
      : stream_(std::move(s)), seq_(seq) {}

  /// Whether the event belongs to a stream (a default-constructed one does not).
  bool recorded() const { return stream_ != nullptr; }
  /// Whether the work before the event has run (true for an unrecorded event).
  bool ready() const { return !stream_ || stream_->completed(seq_); }

  /// Waits on the host; rethrows an error raised on the event's stream.
  void wait() const {
    if (!stream_) throw execution_error("event::wait: the event was never recorded on a stream");
    stream_->wait_for(seq_);
    stream_->rethrow_error();
  }
  /// Waits without reporting errors (for streams waiting on each other).
  void wait_quietly() const {
    if (stream_) stream_->wait_for(seq_);
  }

  /// Identifies the event's stream (null when unrecorded).
  const detail::stream_state* stream_id() const { return stream_.get(); }
  /// The event's position in its stream's work.
  std::uint64_t sequence() const { return seq_; }

 private:
  std::shared_ptr<detail::stream_state> stream_;
  std::uint64_t seq_ = 0;
};

namespace detail {
// Every live stream, for meld::synchronize().
struct stream_registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<stream_state>> streams;
  static stream_registry& get() {
    static stream_registry r;
    return r;
  }
  void add(const std::shared_ptr<stream_state>& s) {
    std::lock_guard lock(mutex);
    std::erase_if(streams, [](const auto& w) { return w.expired(); });
    streams.push_back(s);
  }
  std::vector<std::shared_ptr<stream_state>> live() {
    std::lock_guard lock(mutex);
    std::vector<std::shared_ptr<stream_state>> out;
    for (auto& w : streams)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }
};
}  // namespace detail

/// An in-order queue of CPU work with its own worker thread (the CPU's counterpart of a CUDA
/// stream). Work enqueued on one stream runs in order; work on different streams may run at the
/// same time.
class stream {
 public:
  /// Starts the worker; name appears in error messages (default: "stream N").
  explicit stream(std::string name = "") {
    static std::atomic<int> counter{0};
    if (name.empty()) name = "stream " + std::to_string(counter.fetch_add(1));
    state_ = std::make_shared<detail::stream_state>(std::move(name));
    detail::stream_registry::get().add(state_);
  }
  // Waits for the stream's work, then stops its worker.
  ~stream() {
    if (state_) state_->close();
  }
  /// Streams move; they do not copy.
  stream(stream&&) noexcept = default;
  /// Streams move; they do not copy.
  stream& operator=(stream&&) noexcept = default;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// The name given at construction.
  const std::string& name() const { return state_->name(); }

  /// Runs work() on the stream's worker, after everything enqueued before.
  template <class F>
  event enqueue(F&& work) {
    return event(state_, state_->enqueue(detail::task(std::forward<F>(work))));
  }
  /// An event that completes when the work enqueued so far has run.
  event record() {
    return event(state_, state_->enqueue(detail::task([] {})));
  }
  /// Makes this stream wait (not the host) until e is complete.
  void wait(const event& e) {
    if (e.recorded() && e.stream_id() != state_.get() && !e.ready())
      state_->enqueue(detail::task([e] { e.wait_quietly(); }));
  }
  /// Waits until the stream's work has run; rethrows the first error it raised.
  void synchronize() {
    state_->wait_for(state_->enqueued());
    state_->rethrow_error();
  }

  /// The shared state that events and tensors refer to.
  const std::shared_ptr<detail::stream_state>& state() const { return state_; }

  /// The stream that new asynchronous CPU tensors of this thread are bound to: the innermost
  /// stream_guard's, else the default stream.
  static stream& current();
  /// The stream used where no stream_guard binds another.
  static stream& default_stream() {
    static stream s("default");
    return s;
  }

 private:
  std::shared_ptr<detail::stream_state> state_;
};

namespace detail {
inline thread_local stream* current_stream = nullptr;
}

inline stream& stream::current() {
  return detail::current_stream ? *detail::current_stream : default_stream();
}

/// Binds tensors created by this thread in its scope to a stream.
class stream_guard {
 public:
  /// Makes s the current stream of this thread until the guard is destroyed.
  explicit stream_guard(stream& s) : saved_(detail::current_stream) { detail::current_stream = &s; }
  ~stream_guard() { detail::current_stream = saved_; }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

 private:
  stream* saved_;
};

/// Waits for the work of every stream; rethrows the first error found.
inline void synchronize() {
  std::exception_ptr first;
  for (auto& s : detail::stream_registry::get().live()) {
    s->wait_for(s->enqueued());
    if (auto e = s->take_error(); e && !first) first = e;
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace meld
