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

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/trace.hpp"
#include "thread_pool.hpp"
#include "waiter.hpp"

namespace meld {

/// \addtogroup execution
/// @{

/// Errors of the execution machinery itself: waiting on an event that was never recorded, using a
/// stream that was destroyed.
class execution_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

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

// On a cache line of its own: the line of an atomic that every enqueue exchanges must not be one
// that other threads read (guard variables of function-local statics sit next to it otherwise).
struct alignas(cache_line) padded_spin_lock : spin_lock {};
inline padded_spin_lock enqueue_lock_instance;
inline spin_lock& enqueue_lock() {
  return enqueue_lock_instance;
}

// An unbounded single-producer, single-consumer queue of type-erased callables. Each task is a
// record of whole cache lines (a header, then the callable, stored in place) packed into 64 KiB
// segments: a task touches only the lines its captures need, the producer writes them sequentially
// and asks for the lines ahead before it gets there, and the consumer reads and runs a task in
// place without writing to its lines (so that they need not travel back and forth between the two
// cores). The producer (whoever holds enqueue_lock()) publishes a task with one store. Emptied
// segments go to a free list that the producer takes from, so bursts of work reuse warm memory
// instead of allocating (and page-faulting) fresh segments.
class task_queue {
  struct operations {
    void (*invoke)(void*);
    void (*destroy)(void*) noexcept;
  };
  struct alignas(16) header {
    const operations* ops;  // null: the records go on in the next segment
    std::size_t bytes;      // the record's size, header included: whole cache lines
  };
  static constexpr std::size_t segment_bytes = std::size_t{64} << 10;
  static constexpr std::size_t capacity = segment_bytes - cache_line;
  static constexpr std::size_t max_in_place = 4096;  // larger callables are stored on the heap
  static constexpr std::size_t prefetch_distance = 16 * cache_line;
  static constexpr int max_free_segments = 32;  // 2 MiB of idle segments at most
  struct segment {
    alignas(cache_line) unsigned char bytes[capacity];
    segment* next = nullptr;
  };

  template <class Fn>
  static constexpr operations in_place_ops = {[](void* p) { (*static_cast<Fn*>(p))(); },
                                              [](void* p) noexcept { static_cast<Fn*>(p)->~Fn(); }};
  template <class Fn>
  static constexpr operations heap_ops = {[](void* p) { (**static_cast<Fn**>(p))(); },
                                          [](void* p) noexcept { delete *static_cast<Fn**>(p); }};

 public:
  task_queue() : head_(new segment), tail_(head_) {}
  // Only once the consumer has stopped; destroys the tasks it did not run.
  ~task_queue() {
    while (popped_ < pushed_) pop();
    while (head_) delete std::exchange(head_, head_->next);
    segment* f = free_.load(std::memory_order_acquire);
    while (f) delete std::exchange(f, f->next);
  }
  task_queue(const task_queue&) = delete;
  task_queue& operator=(const task_queue&) = delete;

  // Producer: stores the callable in the next record and publishes it; returns its sequence number
  // (1, 2, ...). If constructing the callable throws, nothing is published.
  template <class F>
  std::uint64_t push(F&& work) {
    using Fn = std::decay_t<F>;
    constexpr bool in_place = sizeof(Fn) <= max_in_place && alignof(Fn) <= alignof(header);
    constexpr std::size_t payload = in_place ? sizeof(Fn) : sizeof(Fn*);
    constexpr std::size_t bytes =
        (sizeof(header) + payload + cache_line - 1) / cache_line * cache_line;
    // A record always leaves a line for the header that says "next segment".
    if (tail_offset_ + bytes + cache_line > capacity) next_segment();
    unsigned char* at = tail_->bytes + tail_offset_;
    void* body = at + sizeof(header);
    if constexpr (in_place) {
      ::new (body) Fn(std::forward<F>(work));
      ::new (static_cast<void*>(at)) header{&in_place_ops<Fn>, bytes};
    } else {
      *static_cast<Fn**>(body) = new Fn(std::forward<F>(work));
      ::new (static_cast<void*>(at)) header{&heap_ops<Fn>, bytes};
    }
    tail_offset_ += bytes;
    prefetch_ahead();
    // seq_cst: waiter::notify, called next, must not read the sleeper count before this store.
    published_.store(++pushed_, std::memory_order_seq_cst);
    return pushed_;
  }

  // Tasks published so far (any thread).
  std::uint64_t published() const { return published_.load(std::memory_order_acquire); }

  // Consumer: runs the oldest task not yet popped (only while published() says there is one).
  void run_front() {
    header* h = front();
    h->ops->invoke(reinterpret_cast<unsigned char*>(h) + sizeof(header));
  }
  // Consumer: destroys the oldest task.
  void pop() noexcept {
    header* h = front();
    h->ops->destroy(reinterpret_cast<unsigned char*>(h) + sizeof(header));
    head_offset_ += h->bytes;
    ++popped_;
  }

 private:
  header* front() noexcept {
    auto* h = std::launder(reinterpret_cast<header*>(head_->bytes + head_offset_));
    if (h->ops) return h;
    give_free(std::exchange(head_, head_->next));
    head_offset_ = 0;
    return std::launder(reinterpret_cast<header*>(head_->bytes));
  }

  void next_segment() {
    segment* fresh = take_free();
    // The consumer reads this header only after a later store of published_ (release) says a task
    // follows it.
    ::new (static_cast<void*>(tail_->bytes + tail_offset_)) header{nullptr, 0};
    tail_->next = fresh;
    tail_ = fresh;
    tail_offset_ = 0;
    prefetched_ = 0;
  }

  // The consumer last touched these lines, so the producer's stores to them miss; asking for them
  // a few records ahead (for writing) lets the misses overlap the enqueueing work in between
  // instead of stalling the next locked instruction (the enqueue lock, the publishing store).
  void prefetch_ahead() noexcept {
    const std::size_t ahead = tail_offset_ + prefetch_distance;
    const std::size_t end = ahead < capacity ? ahead : capacity;
    for (; prefetched_ < end; prefetched_ += cache_line)
      __builtin_prefetch(tail_->bytes + prefetched_, 1, 3);
  }

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
  void give_free(segment* s) noexcept {
    if (free_count_.load(std::memory_order_relaxed) >= max_free_segments) {
      delete s;
      return;
    }
    free_count_.fetch_add(1, std::memory_order_relaxed);
    s->next = free_.load(std::memory_order_relaxed);
    while (!free_.compare_exchange_weak(s->next, s, std::memory_order_release))
      ;
  }

  segment* head_;  // consumer's
  std::size_t head_offset_ = 0;
  std::uint64_t popped_ = 0;
  alignas(cache_line) segment* tail_;  // producer's, on its own cache line
  std::size_t tail_offset_ = 0;
  std::size_t prefetched_ = 0;
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

  // Appends work; returns its sequence number (1, 2, ...). Throws if the stream was closed, unless
  // the caller is the stream's own work: a closed stream runs what is queued before its worker
  // stops, and work that enqueues more (a storage freed by a closure, whose deleter enqueues the
  // free behind the work that uses it: backend/queued.hpp) extends that, where waiting for it
  // would wait for itself.
  template <class F>
  std::uint64_t enqueue(F&& work) {
    std::lock_guard lock(enqueue_lock());
    return enqueue_locked(std::forward<F>(work));
  }
  // The same, for a caller that holds enqueue_lock(); the callable is stored in its queue record in
  // place. Wakes the worker only if it sleeps.
  template <class F>
  std::uint64_t enqueue_locked(F&& work) {
    if (closed_.load(std::memory_order_relaxed) && running_ != this) closed_error();
    const std::uint64_t seq = queue_.push(std::forward<F>(work));
    work_ready_.notify();
    return seq;
  }

  std::uint64_t enqueued() const { return queue_.published(); }
  bool completed(std::uint64_t seq) const {
    return completed_.load(std::memory_order_acquire) >= seq;
  }

  // Blocks until work `seq` has run (spinning briefly first: stream work is often short). A wait
  // that blocks is a traced range on the waiting thread (the host, or a stream waiting for
  // another).
  void wait_for(std::uint64_t seq) const {
    if (completed(seq)) return;
    trace_scope traced("wait for stream", "wait", {"sequence", static_cast<std::int64_t>(seq)});
    done_.wait([&] { return completed(seq); }, 2000);
  }

  // Whether an error raised on the worker waits to be reported (take_error).
  bool has_error() const { return has_error_.load(std::memory_order_acquire); }

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
    running_ = this;
    trace_recorder::get().name_thread("stream " + name_);
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
      try {
        queue_.run_front();
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

  // The stream whose worker this thread is, if any.
  static inline thread_local const stream_state* running_ = nullptr;

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
    return event(state_, state_->enqueue(std::forward<F>(work)));
  }
  /// An event that completes when the work enqueued so far has run.
  event record() {
    return event(state_, state_->enqueue([] {}));
  }
  /// Makes this stream wait (not the host) until e is complete.
  void wait(const event& e) {
    if (e.recorded() && e.stream_id() != state_.get() && !e.ready())
      state_->enqueue([e] { e.wait_quietly(); });
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

/// @}

}  // namespace meld
