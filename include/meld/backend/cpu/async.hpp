// The asynchronous CPU backend: meld::cpu<meld::async>. Each operation is enqueued on the stream
// of the tensor it writes and returns at once (queued.hpp); host access waits for exactly the work
// it depends on. Tensors are bound to the stream current on the thread that creates them
// (meld::stream_guard), else to the default stream.
#pragma once

#include <chrono>
#include <memory>

#include "../../runtime/stream.hpp"
#include "../../tensor/convert.hpp"
#include "../concept.hpp"
#include "../queued.hpp"
#include "executor.hpp"

namespace meld {

/// \addtogroup execution
/// @{

namespace detail {
struct cpu_home {
  static const std::shared_ptr<stream_state>& current() { return stream::current().state(); }
};
}  // namespace detail

/// The asynchronous CPU backend records each storage's last write and reads as stream events.
template <>
struct access_tracking<cpu<async>> {
  /// The per-storage record: events on the streams that touched it.
  using type = detail::stream_access<detail::cpu_home>;
};

/// The asynchronous CPU backend's executor: it queues each operation on a stream, whose worker
/// runs it with the synchronous CPU executor.
template <>
struct executor<cpu<async>> : detail::queued_executor<cpu<async>, executor<cpu<sync>>> {};

static_assert(backend<cpu<async>>);

/// Binds a tensor's storage (and every view of it) to a stream: work that writes it runs there
/// (cpu<async> and sim<async> tensors).
template <class T, class B>
requires requires(const tensor<T, B>& t, stream& s) {
  t.storage_ptr()->access().bind(s.state());
}
void bind(const tensor<T, B>& t, stream& s) {
  if (t.storage_ptr()) t.storage_ptr()->access().bind(s.state());
}

/// dst = src, enqueued on stream s when dst is asynchronous (with CUDA: the host/device transfer
/// that overlaps computation), done now otherwise. Across backends (an asynchronous source into a
/// synchronous destination, say) it waits for the source and copies through meld::to.
template <class Dst, class Src>
void copy(Dst&& dst, const Src& src, stream& s) {
  if (!broadcasts_to(src.shape(), dst.shape()))
    throw shape_error(detail::cat("copy: a source of shape ", src.shape(),
                                  " cannot be copied into a destination of shape ", dst.shape()));
  using B = typename std::remove_cvref_t<Dst>::backend_type;
  using SrcB = backend_t<Src>;
  if constexpr (!std::is_same_v<B, SrcB> && !std::is_same_v<SrcB, no_backend>) {
    using T = value_t<Src>;
    detail::assign_to_view(dst, to<B>(tensor<T, SrcB>(src)), "copy");
  } else if constexpr (requires { executor<B>::assign(dst, src, &s); }) {
    executor<B>::assign(dst, src, &s);  // a queued backend
  } else {
    detail::assign_to_view(dst, src, "copy");
  }
}

/// Measures the time that work on a stream takes: start() and stop() enqueue time stamps taken when
/// the stream reaches them, and seconds() waits for the stop stamp. Unlike a host clock read around
/// asynchronous calls, it never measures only the time to enqueue.
class timer {
 public:
  /// A timer for work on stream s (default: the current stream).
  explicit timer(stream& s = stream::current()) : stream_(&s) {}
  /// Enqueues the start stamp.
  void start() { start_ = stamp(); }
  /// Enqueues the stop stamp.
  void stop() { stop_ = stamp(); }
  /// Seconds between start() and stop() on the stream; waits until the stream passes stop().
  double seconds() const {
    if (!start_.value || !stop_.value)
      throw execution_error("timer: call start() and stop() first");
    stop_.done.wait();
    return std::chrono::duration<double>(*stop_.value - *start_.value).count();
  }

 private:
  struct mark {
    std::shared_ptr<std::chrono::steady_clock::time_point> value;
    event done;
  };
  mark stamp() {
    auto t = std::make_shared<std::chrono::steady_clock::time_point>();
    event e = stream_->enqueue([t] { *t = std::chrono::steady_clock::now(); });
    return {t, e};
  }
  stream* stream_;
  mark start_, stop_;
};

/// @}

}  // namespace meld
