// meld's trace recorder: what meld did and when, as Chrome-trace JSON (a top-level "traceEvents"
// array) that ui.perfetto.dev opens (and chrome://tracing, in browsers that still have it).
//
//   MELD_TRACE=run.json ./program              records the whole run, written when it exits
//   meld::trace::start("run.json"); ... meld::trace::stop();    records between the two, writes
//   meld::trace::write("now.json");            writes the events so far; recording goes on
//   meld::trace_range r("epoch");              a range of the program's own (until r's scope ends)
//   meld::trace_range r("load", "data", {"samples", n});   with a category and integer arguments
//
// Each event is a complete event ("ph":"X"): a name, a category, ts and dur in microseconds of the
// steady clock, the process id, a thread number of the recorder's own (the thread's name in a
// "thread_name" metadata event), and up to three integer arguments. meld records: assignments,
// reductions, products and copies with their element counts, on the thread that ran them (a
// stream's worker for asynchronous tensors); host waits for streams and futures that block;
// data_parallel's forward, backward and the wait for its allreduces, per worker; each gradient
// bucket's launch and each collective (with its bucket), on the thread that runs it;
// parameter-server requests, on workers (issue to completion) and servers (handling).
//
// Off (the default), a range costs a relaxed load of one flag and a predictable branch: no clock
// read, no allocation, no formatting. On, each thread appends to a buffer of its own, whose lock
// only the writer ever contends, and the buffers are merged when the file is written.
//
// In programs built with the CUDA backend, the same ranges are also NVTX ranges (domain "meld",
// the category as NVTX category, the first argument as payload) whenever an NVTX tool such as
// Nsight Systems is attached (backend/cuda/nvtx.hpp): they then show on the tool's timeline above
// the kernels they launched. Without a tool, nothing changes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config.hpp"

namespace meld {

/// \addtogroup diagnostics
/// @{

/// An integer argument of a traced range, shown in the viewer's details ({"elements", n}).
struct trace_arg {
  const char* key = nullptr;  ///< a string that lives as long as the program (a literal)
  std::int64_t value = 0;     ///< the value
};

namespace detail {

// Where traced ranges go: bits of the word that every traced range reads first. Constant-
// initialized: valid before and after the recorder (static construction and destruction of other
// objects may record).
inline constexpr unsigned trace_to_recorder = 1;  // trace::start .. trace::stop
inline constexpr unsigned trace_to_nvtx = 2;      // an NVTX tool listens (CUDA builds)
inline std::atomic<unsigned> trace_sinks{0};

// Whether the recorder records (the JSON trace).
inline bool trace_enabled() noexcept {
  return (trace_sinks.load(std::memory_order_relaxed) & trace_to_recorder) != 0;
}

// NVTX's range push and pop, installed (before trace_to_nvtx is set) by backend/cuda/nvtx.hpp in
// programs that a tool profiles. Function pointers, so that the core knows nothing of CUDA and
// every translation unit sees the same trace_scope.
struct trace_nvtx_calls {
  void (*push)(const char* name, const char* category, std::int64_t payload) = nullptr;
  void (*pop)() = nullptr;
};
inline trace_nvtx_calls trace_nvtx;

inline void trace_nvtx_push(const char* name, const char* category, trace_arg a) noexcept {
  trace_nvtx.push(name, category, a.value);
}
inline void trace_nvtx_pop() noexcept {
  trace_nvtx.pop();
}

// Nanoseconds of the steady clock (the clock of data_parallel's step timing too).
inline std::int64_t trace_now() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline std::int64_t trace_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct trace_event {
  std::int64_t begin = 0, end = 0;  // trace_now()
  const char* name = nullptr;       // a literal; null where `text` holds the name
  const char* category = nullptr;
  trace_arg args[3];
  std::string text;
};

// A lock that its owner thread takes for each event and the writer takes rarely: uncontended, one
// atomic exchange (a std::mutex costs two read-modify-writes).
class trace_lock {
 public:
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

// One thread's events.
struct trace_thread {
  trace_lock mutex;  // this thread's appends and the writer's reads
  std::vector<trace_event> events;
  std::string name;
  int tid = 0;
};

// The threads' buffers and the output path. Constructed during static initialization (see
// trace_boot below), so that it is destroyed after everything constructed later, such as the
// thread pool and the default stream, whose threads record; its destructor writes the file of a
// recording still on.
class trace_recorder {
 public:
  MELD_RUNTIME static trace_recorder& get();
  MELD_RUNTIME void record(trace_event&& e);
  MELD_RUNTIME void start(const std::string& path);
  MELD_RUNTIME void stop();
  MELD_RUNTIME void write(const std::string& path);
  MELD_RUNTIME void name_thread(const std::string& name);
  MELD_RUNTIME ~trace_recorder();
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;

 private:
  MELD_RUNTIME trace_recorder();
  MELD_RUNTIME trace_thread& this_thread();

  std::mutex mutex_;  // threads_, path_
  std::vector<std::unique_ptr<trace_thread>> threads_;
  std::string path_;  // where stop() and the destructor write; "" for nowhere
};

inline const bool trace_boot = (trace_recorder::get(), true);

// Records a range measured elsewhere (begin and end from trace_now() or trace_ns()).
inline void trace_complete(const char* name, const char* category, std::int64_t begin,
                           std::int64_t end, trace_arg a = {}, trace_arg b = {}, trace_arg c = {}) {
  trace_recorder::get().record(trace_event{begin, end, name, category, {a, b, c}, {}});
}

// meld's own ranges: names and arguments are read only when tracing is on.
class trace_scope {
 public:
  MELD_INLINE trace_scope(const char* name, const char* category, trace_arg a = {},
                          trace_arg b = {}, trace_arg c = {}) noexcept {
    if (const unsigned sinks = trace_sinks.load(std::memory_order_relaxed)) [[unlikely]]
      begin(sinks, name, category, a, b, c);
  }
  MELD_INLINE ~trace_scope() {
    if (sinks_ != 0) [[unlikely]]
      end();
  }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;

 private:
  void begin(unsigned sinks, const char* name, const char* category, trace_arg a, trace_arg b,
             trace_arg c) noexcept {
    sinks_ = sinks;
    name_ = name;
    category_ = category;
    args_[0] = a;
    args_[1] = b;
    args_[2] = c;
    if (sinks & trace_to_nvtx) trace_nvtx_push(name, category, a);
    if (sinks & trace_to_recorder) begin_ = trace_now();
  }
  void end() noexcept {
    if (sinks_ & trace_to_recorder) {
      try {
        trace_complete(name_, category_, begin_, trace_now(), args_[0], args_[1], args_[2]);
      } catch (...) {  // no memory for the event: the trace misses it
      }
    }
    if (sinks_ & trace_to_nvtx) trace_nvtx_pop();  // balanced: pushed by begin
  }
  unsigned sinks_ = 0;  // where this range went at its beginning
  std::int64_t begin_ = 0;
  const char* name_ = nullptr;
  const char* category_ = nullptr;
  trace_arg args_[3];
};

}  // namespace detail

/// Recording and writing traces (see the top of meld/core/trace.hpp).
namespace trace {

/// Whether meld is recording (MELD_TRACE was set, or start() was called and stop() was not).
inline bool enabled() noexcept {
  return detail::trace_enabled();
}
/// Starts a new recording (the events of an earlier one are dropped). With a path, stop() and a
/// normal exit write the trace there; "%p" in it is replaced by the process id (one file per
/// process under mpirun).
inline void start(const std::string& path = {}) {
  detail::trace_recorder::get().start(path);
}
/// Stops recording and writes the trace to start()'s path, if it had one. Throws
/// std::runtime_error when the file cannot be written.
inline void stop() {
  detail::trace_recorder::get().stop();
}
/// Writes the events recorded so far to `path` ("%p": the process id); recording goes on. Throws
/// std::runtime_error when the file cannot be written.
inline void write(const std::string& path) {
  detail::trace_recorder::get().write(path);
}
/// Whether meld's ranges also go to NVTX: a program built with the CUDA backend under an NVTX tool
/// (Nsight Systems, Nsight Compute) attached to it.
inline bool nvtx() noexcept {
  return (detail::trace_sinks.load(std::memory_order_relaxed) & detail::trace_to_nvtx) != 0;
}
/// The calling thread's name in traces (default: "main" for the thread that started the
/// program, "thread N" for others).
inline void name_thread(const std::string& name) {
  detail::trace_recorder::get().name_thread(name);
}

}  // namespace trace

/// A traced range of the program's own: from construction to the end of its scope, on the calling
/// thread, with a category (default "user") and up to two integer arguments. Ranges nest. Off,
/// constructing one costs a flag read (and, for a std::string name, the string the caller built).
/// Under an NVTX tool (CUDA builds), the range is an NVTX range of domain "meld" too.
class trace_range {
 public:
  /// A range named by a string that outlives the recording (a literal).
  explicit trace_range(const char* name, const char* category = "user", trace_arg a = {},
                       trace_arg b = {}) noexcept
      : sinks_(detail::trace_sinks.load(std::memory_order_relaxed)),
        name_(name),
        category_(category),
        a_(a),
        b_(b) {
    if (sinks_ != 0) [[unlikely]]
      begin();
  }
  /// A range with a name built at run time (kept only while recording).
  explicit trace_range(std::string name, const char* category = "user", trace_arg a = {},
                       trace_arg b = {})
      : sinks_(detail::trace_sinks.load(std::memory_order_relaxed)),
        name_(nullptr),
        category_(category),
        a_(a),
        b_(b) {
    if (sinks_ != 0) [[unlikely]] {
      text_ = std::move(name);
      begin();
    }
  }
  ~trace_range() {
    if (sinks_ & detail::trace_to_recorder) {
      try {
        detail::trace_recorder::get().record(detail::trace_event{
            begin_, detail::trace_now(), name_, category_, {a_, b_, {}}, std::move(text_)});
      } catch (...) {  // no memory for the event: the trace misses it
      }
    }
    if (sinks_ & detail::trace_to_nvtx) detail::trace_nvtx_pop();
  }
  trace_range(const trace_range&) = delete;
  trace_range& operator=(const trace_range&) = delete;

 private:
  void begin() noexcept {
    if (sinks_ & detail::trace_to_nvtx)
      detail::trace_nvtx_push(name_ ? name_ : text_.c_str(), category_, a_);
    if (sinks_ & detail::trace_to_recorder) begin_ = detail::trace_now();
  }
  unsigned sinks_;  // where this range went at its beginning
  std::int64_t begin_ = 0;
  const char* name_;  // null: text_ is the name
  const char* category_;
  trace_arg a_, b_;
  std::string text_;
};

/// @}

}  // namespace meld

#if MELD_RUNTIME_DEFINITIONS
#include "trace-inl.hpp"
#endif
