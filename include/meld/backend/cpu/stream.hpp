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
#include <vector>

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

// A growable ring of tasks (no allocation per task once grown).
class task_ring {
 public:
  bool empty() const { return head_ == tail_; }
  void push(task&& t) {
    if (tail_ - head_ == slots_.size()) grow();
    slots_[tail_++ & (slots_.size() - 1)] = std::move(t);
  }
  task pop() { return std::move(slots_[head_++ & (slots_.size() - 1)]); }

 private:
  void grow() {
    std::vector<task> bigger(std::max<std::size_t>(16, slots_.size() * 2));
    for (std::size_t i = 0; head_ + i < tail_; ++i) bigger[i] = pop_at(head_ + i);
    tail_ -= head_;
    head_ = 0;
    slots_ = std::move(bigger);
  }
  task pop_at(std::size_t i) { return std::move(slots_[i & (slots_.size() - 1)]); }
  std::vector<task> slots_;
  std::size_t head_ = 0, tail_ = 0;
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
    std::uint64_t seq;
    {
      std::lock_guard lock(mutex_);
      if (closed_)
        throw execution_error(
            cat("stream '", name_, "' was destroyed; its work can no longer run"));
      queue_.push(std::move(work));
      seq = ++enqueued_;
    }
    work_ready_.notify();
    return seq;
  }

  std::uint64_t enqueued() const {
    std::lock_guard lock(mutex_);
    return enqueued_;
  }
  bool completed(std::uint64_t seq) const {
    return completed_.load(std::memory_order_seq_cst) >= seq;
  }

  // Blocks until work `seq` has run (spinning briefly first: stream work is often short).
  void wait_for(std::uint64_t seq) const {
    done_.wait([&] { return completed(seq); }, 2000);
  }

  // The first error raised on the worker since the last call, cleared.
  std::exception_ptr take_error() {
    std::lock_guard lock(mutex_);
    return std::exchange(error_, nullptr);
  }
  void rethrow_error() {
    if (std::exception_ptr e = take_error()) std::rethrow_exception(e);
  }

  // Runs the queued work, then stops the worker. Idempotent.
  void close() {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      closed_ = true;
    }
    work_ready_.notify();
    if (worker_.joinable()) worker_.join();
  }

  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

 private:
  void run() {
    for (;;) {
      task work;
      // Spin a while before sleeping: work usually comes in bursts, and waking a sleeping thread
      // costs microseconds.
      work_ready_.wait(
          [&] {
            std::lock_guard lock(mutex_);
            return !queue_.empty() || closed_;
          },
          20000);
      {
        std::lock_guard lock(mutex_);
        if (queue_.empty()) {
          if (closed_) return;
          continue;
        }
        work = queue_.pop();
      }
      try {
        work();
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      completed_.fetch_add(1, std::memory_order_seq_cst);
      done_.notify();
    }
  }

  std::string name_;
  mutable std::mutex mutex_;
  task_ring queue_;
  std::uint64_t enqueued_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  std::exception_ptr error_;
  bool closed_ = false;
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
