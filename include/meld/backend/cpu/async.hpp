// The asynchronous CPU backend: meld::cpu<meld::async>.
//
// An assignment checks shapes on the host, then enqueues the evaluation on the destination
// tensor's stream and returns at once. Every storage records the event of its last write and the
// events of reads since; work on another stream that reads or writes it makes that stream (not
// the host) wait first, and host access (data(), element access, item(), a reduction's result)
// waits for exactly the work it depends on. Queued work holds the storages it touches, so a tensor
// destroyed while work on it is queued keeps its memory until that work has run.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "../../expr/matmul.hpp"
#include "../../expr/reduce.hpp"
#include "../../tensor/convert.hpp"
#include "../future.hpp"
#include "executor.hpp"
#include "stream.hpp"

namespace meld {

namespace detail {

// Enqueueing is one step for the whole process, so that two host threads enqueueing work on
// shared tensors cannot interleave their dependency bookkeeping; the lock also guards every
// storage's ordering state.
inline std::mutex& enqueue_mutex() {
  static std::mutex m;
  return m;
}

// Ordering state of one storage of an asynchronous CPU tensor (guarded by enqueue_mutex()).
class cpu_access {
 public:
  // A new storage is bound to the stream current on the creating thread.
  cpu_access() : home_(stream::current().state()) {}

  std::shared_ptr<stream_state> home() const {
    std::lock_guard lock(enqueue_mutex());
    return home_;
  }
  void bind(std::shared_ptr<stream_state> s) {
    std::lock_guard lock(enqueue_mutex());
    home_ = std::move(s);
  }

  // Host access: waits for the last write (and, before writing, for pending reads).
  void wait_host(bool write) {
    event last;
    std::vector<event> reads;
    {
      std::lock_guard lock(enqueue_mutex());
      last = last_write_;
      if (write) reads = reads_;
    }
    if (last.recorded()) last.wait();
    for (const event& e : reads) e.wait();
  }

  // The following run under enqueue_mutex().
  const std::shared_ptr<stream_state>& home_locked() const { return home_; }
  // Events that work on `on` must wait for before reading (write = false) or writing.
  template <class Out>
  void dependencies(const stream_state* on, bool write, Out& out) const {
    auto add = [&](const event& e) {
      if (e.recorded() && e.stream_id() != on && !e.ready()) out.push_back(e);
    };
    add(last_write_);
    if (write)
      for (const event& e : reads_) add(e);
  }
  void record_write(const event& e) {
    last_write_ = e;
    reads_.clear();
  }
  void record_read(const event& e) {
    for (event& r : reads_)
      if (r.stream_id() == e.stream_id()) {
        r = e;
        return;
      }
    std::erase_if(reads_, [](const event& r) { return r.ready(); });
    reads_.push_back(e);
  }

 private:
  std::shared_ptr<stream_state> home_;
  event last_write_;
  std::vector<event> reads_;  // at most one per stream
};

// A list with room for N items on the stack.
template <class T, std::size_t N>
class small_list {
 public:
  void push_back(const T& v) {
    if (n_ < N)
      items_[n_++] = v;
    else
      more_.push_back(v);
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i) f(items_[i]);
    for (const T& v : more_) f(v);
  }
  bool empty() const { return n_ == 0; }

 private:
  T items_[N];
  std::size_t n_ = 0;
  std::vector<T> more_;
};

using access_list = small_list<cpu_access*, 8>;

// ---- capturing an expression for later evaluation -----------------------------------------------
// Every leaf becomes a view that shares its storage (an lvalue tensor, held by pointer in the
// expression, may be gone when the work runs); nodes are rebuilt around captured operands.

template <class E>
struct capture_of;

template <class T, class B>
struct capture_of<tensor_ref<T, B>> {
  using type = tensor_view<const T, B>;
  static type make(const tensor_ref<T, B>& e) { return e.get().view(); }
};
template <class T, class B>
struct capture_of<tensor<T, B>> {
  using type = tensor_view<const T, B>;
  static type make(const tensor<T, B>& e) { return e.view(); }
};
template <class T, class B>
struct capture_of<tensor_view<T, B>> {
  using type = tensor_view<const std::remove_const_t<T>, B>;
  static type make(const tensor_view<T, B>& e) { return type(e); }
};
template <class T>
struct capture_of<scalar_expr<T>> {
  using type = scalar_expr<T>;
  static type make(const scalar_expr<T>& e) { return e; }
};
template <class Op, class A>
struct capture_of<unary_expr<Op, A>> {
  using type = unary_expr<Op, typename capture_of<A>::type>;
  static type make(const unary_expr<Op, A>& e) {
    return type(e.op(), capture_of<A>::make(e.operand()));
  }
};
template <class Op, class A, class B>
struct capture_of<binary_expr<Op, A, B>> {
  using type = binary_expr<Op, typename capture_of<A>::type, typename capture_of<B>::type>;
  static type make(const binary_expr<Op, A, B>& e) {
    return type(e.op(), capture_of<A>::make(e.lhs()), capture_of<B>::make(e.rhs()));
  }
};
template <class Op, class A, class B, class C>
struct capture_of<ternary_expr<Op, A, B, C>> {
  using type = ternary_expr<Op, typename capture_of<A>::type, typename capture_of<B>::type,
                            typename capture_of<C>::type>;
  static type make(const ternary_expr<Op, A, B, C>& e) {
    return type(e.op(), capture_of<A>::make(e.first()), capture_of<B>::make(e.second()),
                capture_of<C>::make(e.third()));
  }
};
template <class R, class A>
struct capture_of<reduce_expr<R, A>> {
  using type = reduce_expr<R, typename capture_of<A>::type>;
  static type make(const reduce_expr<R, A>& e) {
    return type(capture_of<A>::make(e.operand()), e.axis(), e.keepdims());
  }
};
template <class A, class B>
struct capture_of<matmul_expr<A, B>> {
  using type = matmul_expr<typename capture_of<A>::type, typename capture_of<B>::type>;
  static type make(const matmul_expr<A, B>& e) {
    return type(capture_of<A>::make(e.lhs()), capture_of<B>::make(e.rhs()));
  }
};

// The ordering state of every leaf of a captured expression.
template <class E>
void leaf_accesses(const E& e, access_list& out) {
  if constexpr (requires { e.storage_ptr(); }) {
    if (e.storage_ptr()) out.push_back(&e.storage_ptr()->access());
  } else if constexpr (requires { e.operand(); }) {
    leaf_accesses(e.operand(), out);
  } else if constexpr (requires { e.first(); }) {
    leaf_accesses(e.first(), out);
    leaf_accesses(e.second(), out);
    leaf_accesses(e.third(), out);
  } else if constexpr (requires { e.lhs(); }) {
    leaf_accesses(e.lhs(), out);
    leaf_accesses(e.rhs(), out);
  }
}

// Enqueues work on stream `on` (or the home stream of the first written storage) after the events
// it depends on; records it as a read of `reads` and a write of `writes`. Returns its event.
template <class F>
event enqueue_ordered(std::shared_ptr<stream_state> on, const access_list& reads,
                      const access_list& writes, F&& work) {
  std::lock_guard lock(enqueue_mutex());
  if (!on)
    writes.for_each([&](cpu_access* a) {
      if (!on) on = a->home_locked();
    });
  small_list<event, 8> waits;
  reads.for_each([&](cpu_access* a) { a->dependencies(on.get(), false, waits); });
  writes.for_each([&](cpu_access* a) { a->dependencies(on.get(), true, waits); });
  if (!waits.empty()) {
    on->enqueue(task([waits] { waits.for_each([](const event& e) { e.wait_quietly(); }); }));
  }
  const event done(on, on->enqueue(task(std::forward<F>(work))));
  reads.for_each([&](cpu_access* a) { a->record_read(done); });
  writes.for_each([&](cpu_access* a) { a->record_write(done); });
  return done;
}

template <class Dst>
auto target_view(const Dst& dst) {
  using T = typename Dst::value_type;
  return tensor_view<T, cpu<async>>(dst.storage_ptr(), const_cast<T*>(dst.raw_data()),
                                    layout{dst.shape(), dst.strides(), 0});
}

}  // namespace detail

template <>
struct access_tracking<cpu<async>> {
  using type = detail::cpu_access;
};

namespace detail {
// A reduction's value, ready when its event on a CPU stream is.
template <class T>
struct cpu_future_state : future_state<T> {
  event done;
  void wait() override { done.wait(); }
  bool ready() override { return done.ready(); }
};
}  // namespace detail

template <>
struct executor<cpu<async>> {
  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e, stream* on = nullptr) {
    if (dst.size() == 0) return;
    auto target = detail::target_view(dst);
    auto captured = detail::capture_of<E>::make(e);
    detail::access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    detail::leaf_accesses(captured, reads);
    detail::enqueue_ordered(on ? on->state() : nullptr, reads, writes,
                            [target, captured] { detail::cpu_eval::assign(target, captured); });
  }

  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    if (dst.size() == 0) return;
    auto target = detail::target_view(dst);
    detail::access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    detail::enqueue_ordered(nullptr, reads, writes, [target, value] {
      detail::cpu_eval::fill(target.raw_data(), target.size(), value);
    });
  }

  template <class R, class E>
  static auto reduce(const E& e) {
    using Result = decltype(detail::cpu_eval::reduce<R>(e));
    if (R::needs_elements && e.shape().product() == 0)
      throw shape_error(detail::cat(R::name, ": the expression of shape ", e.shape(),
                                    " is empty, and an empty ", R::name, " has no value"));
    auto captured = detail::capture_of<E>::make(e);
    detail::access_list reads, writes;
    std::shared_ptr<detail::stream_state> home;
    detail::leaf_accesses(captured, reads);
    reads.for_each([&](detail::cpu_access* a) {
      if (!home) home = a->home();
    });
    if (!home) home = stream::current().state();
    auto state = std::make_shared<detail::cpu_future_state<Result>>();
    state->done = detail::enqueue_ordered(home, reads, writes, [captured, state] {
      state->value = detail::cpu_eval::reduce<R>(captured);
    });
    return future<Result>(state);
  }

  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c) {
    if (c.size() == 0) return;
    auto target = detail::target_view(c);
    auto ca = detail::capture_of<A>::make(a);
    auto cb = detail::capture_of<B>::make(b);
    detail::access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    detail::leaf_accesses(ca, reads);
    detail::leaf_accesses(cb, reads);
    detail::enqueue_ordered(nullptr, reads, writes, [alpha, ca, cb, beta, target] {
      detail::cpu_eval::gemm_into(alpha, ca, cb, beta, target);
    });
  }
};

// Binds a tensor's storage (and every view of it) to a stream: work that writes it runs there.
template <class T>
void bind(const tensor<T, cpu<async>>& t, stream& s) {
  if (t.storage_ptr()) t.storage_ptr()->access().bind(s.state());
}

// dst = src, enqueued on stream s when dst is asynchronous (with CUDA: the host/device transfer
// that overlaps computation), done now otherwise. Across backends (an asynchronous source into a
// synchronous destination, say) it waits for the source and copies through meld::to.
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
  } else if constexpr (std::is_same_v<B, cpu<async>>) {
    executor<B>::assign(dst, src, &s);
  } else {
    detail::assign_to_view(dst, src, "copy");
  }
}

// Measures the time that work on a stream takes: start() and stop() enqueue time stamps taken when
// the stream reaches them, and seconds() waits for the stop stamp. Unlike a host clock read around
// asynchronous calls, it never measures only the time to enqueue.
class timer {
 public:
  explicit timer(stream& s = stream::current()) : stream_(&s) {}
  void start() { start_ = stamp(); }
  void stop() { stop_ = stamp(); }
  // Seconds between start() and stop() on the stream; waits until the stream passes stop().
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

}  // namespace meld
