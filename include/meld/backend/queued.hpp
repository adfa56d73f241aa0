// The asynchronous policy of backends whose kernels are CPU code (cpu<async>, sim<async>): every
// operation checks shapes on the host, then enqueues the synchronous evaluation (the backend's
// `Run` executor) on a stream and returns at once.
//
// Every storage records the event of its last write and the events of reads since. Work on another
// stream that reads or writes it makes that stream (not the host) wait first, and host access
// (data(), element access, item(), a reduction's result) waits for exactly the work it depends
// on. Queued work borrows the storages it touches (views without a reference count: enqueueing
// one operation costs no atomic operation beyond the enqueue lock and the queue's publishing
// store), and a storage whose last tensor goes while work on it is queued is deleted after that
// work (stream_access::delete_after_work).
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../expr/walk.hpp"
#include "../runtime/stream.hpp"
#include "../tensor/tensor.hpp"
#include "backend.hpp"
#include "future.hpp"
#include "lowering.hpp"

namespace meld {

namespace detail {

// Where work that touched a storage sits: a stream and the sequence number of that work there.
struct stream_mark {
  std::shared_ptr<stream_state> stream;
  std::uint64_t seq = 0;

  bool pending() const { return stream && !stream->completed(seq); }
  // Whether a host access must go through the stream: the work is pending, or the stream holds an
  // error to report (the work may have run before the host looks: reading the tensor still
  // reports it).
  bool to_report() const { return pending() || (stream && stream->has_error()); }
  event as_event() const { return event(stream, seq); }
};

// A list with room for N items on the stack (constructed only as they are added).
template <class T, std::size_t N>
class small_list {
 public:
  small_list() = default;
  small_list(const small_list& other) {
    other.for_each([&](const T& v) { push_back(v); });
  }
  small_list& operator=(const small_list&) = delete;
  ~small_list() {
    for (std::size_t i = 0; i < n_; ++i) item(i).~T();
  }

  void push_back(const T& v) {
    if (n_ < N) {
      ::new (static_cast<void*>(items_ + n_ * sizeof(T))) T(v);
      ++n_;
    } else {
      more_.push_back(v);
    }
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i) f(item(i));
    for (const T& v : more_) f(v);
  }
  bool empty() const { return n_ == 0; }
  const T& front() const { return item(0); }

 private:
  T& item(std::size_t i) { return *std::launder(reinterpret_cast<T*>(items_ + i * sizeof(T))); }
  const T& item(std::size_t i) const {
    return *std::launder(reinterpret_cast<const T*>(items_ + i * sizeof(T)));
  }
  alignas(T) unsigned char items_[N * sizeof(T)];
  std::size_t n_ = 0;
  std::vector<T> more_;
};

// Ordering state of one storage (guarded by enqueue_lock()): the stream work of its last write and
// of the reads since, at most one per stream. Home::current() names the stream that a new storage
// is bound to (the stream work that writes it runs on). Recording work on a stream the record
// already names only advances its sequence number: no reference counting on the common path.
template <class Home>
class stream_access {
 public:
  using home_type = Home;
  stream_access() : home_(Home::current()) {}

  std::shared_ptr<stream_state> home() const {
    std::lock_guard lock(enqueue_lock());
    return home_;
  }
  void bind(std::shared_ptr<stream_state> s) {
    std::lock_guard lock(enqueue_lock());
    home_ = std::move(s);
  }

  // Host access: waits for the last write (and, before writing, for pending reads).
  void wait_host(bool write) {
    small_list<event, 8> waits;
    {
      std::lock_guard lock(enqueue_lock());
      if (last_write_.to_report()) waits.push_back(last_write_.as_event());
      if (write)
        for (const stream_mark& r : reads_)
          if (r.to_report()) waits.push_back(r.as_event());
    }
    waits.for_each([](const event& e) { e.wait(); });
  }

  // Deletes `owner` (the storage holding this record) once the queued work on it has run: now if
  // none is pending, else from a task enqueued behind that work. Queued work borrows the storages
  // it touches instead of holding a reference, and this is what keeps them alive for it.
  template <class Owner>
  void delete_after_work(Owner* owner) noexcept {
    small_list<event, 8> pending;
    try {
      std::lock_guard lock(enqueue_lock());
      if (last_write_.pending()) pending.push_back(last_write_.as_event());
      for (const stream_mark& r : reads_)
        if (r.pending()) pending.push_back(r.as_event());
      if (!pending.empty()) {
        stream_state* on = const_cast<stream_state*>(pending.front().stream_id());
        on->enqueue_locked([pending, owner] {
          pending.for_each([](const event& e) { e.wait_quietly(); });
          delete owner;
        });
        return;
      }
    } catch (...) {  // the stream was closed meanwhile, or no memory for the task: wait here
      pending.for_each([](const event& e) { e.wait_quietly(); });
    }
    delete owner;
  }

  // The following run under enqueue_lock().
  const std::shared_ptr<stream_state>& home_locked() const { return home_; }
  // Events that work on `on` must wait for before reading (write = false) or writing.
  template <class Out>
  void dependencies(const stream_state* on, bool write, Out& out) const {
    auto add = [&](const stream_mark& m) {
      if (pending_elsewhere(m, on)) out.push_back(m.as_event());
    };
    add(last_write_);
    if (write)
      for (const stream_mark& r : reads_) add(r);
  }
  // Whether work on `on` must wait for some (dependencies() lists them).
  bool depends(const stream_state* on, bool write) const {
    if (pending_elsewhere(last_write_, on)) return true;
    if (write)
      for (const stream_mark& r : reads_)
        if (pending_elsewhere(r, on)) return true;
    return false;
  }
  void record_write(const std::shared_ptr<stream_state>& on, std::uint64_t seq) {
    if (last_write_.stream != on) last_write_.stream = on;
    last_write_.seq = seq;
    // Reads on other streams were waited for by this write; a read on its own stream precedes it.
    std::erase_if(reads_, [&](const stream_mark& r) { return r.stream != on; });
  }
  void record_read(const std::shared_ptr<stream_state>& on, std::uint64_t seq) {
    for (stream_mark& r : reads_)
      if (r.stream == on) {
        r.seq = seq;
        return;
      }
    std::erase_if(reads_, [](const stream_mark& r) { return !r.pending(); });
    reads_.push_back({on, seq});
  }

 private:
  static bool pending_elsewhere(const stream_mark& m, const stream_state* on) {
    return m.stream && m.stream.get() != on && m.pending();
  }

  std::shared_ptr<stream_state> home_;
  stream_mark last_write_;
  std::vector<stream_mark> reads_;  // at most one per stream
};

// Enqueues work on stream `on` (or the home stream of the first written storage, else of the first
// read one, else the current stream) after the events it depends on, and records it as a read of
// `reads` and a write of `writes`; enqueue_lock() is held from construction to destruction. The
// constructor (one instance per access type, whatever the work) picks the stream and enqueues the
// waits; push() stores the work in its queue slot in place and records it.
template <class Access>
class ordered_enqueue {
 public:
  using list = small_list<Access*, 8>;
  ordered_enqueue(const std::shared_ptr<stream_state>* on, const list& reads, const list& writes)
      : lock_(enqueue_lock()), reads_(reads), writes_(writes), on_(on) {
    if (!on_) {  // a home is not changed under the lock
      if (!writes.empty())
        on_ = &writes.front()->home_locked();
      else if (!reads.empty())
        on_ = &reads.front()->home_locked();
      else
        on_ = &(fallback_ = Access::home_type::current());
    }
    // Work on one stream (the common case) waits for nothing: the event list is built only when
    // some storage has pending work on another.
    stream_state* s = on_->get();
    bool waits_needed = false;
    reads.for_each([&](Access* a) { waits_needed = waits_needed || a->depends(s, false); });
    writes.for_each([&](Access* a) { waits_needed = waits_needed || a->depends(s, true); });
    if (waits_needed) {
      small_list<event, 8> waits;
      reads.for_each([&](Access* a) { a->dependencies(s, false, waits); });
      writes.for_each([&](Access* a) { a->dependencies(s, true, waits); });
      s->enqueue_locked([waits] { waits.for_each([](const event& e) { e.wait_quietly(); }); });
    }
  }
  ordered_enqueue(const ordered_enqueue&) = delete;
  ordered_enqueue& operator=(const ordered_enqueue&) = delete;

  // Enqueues the work; sets *done to its event when asked.
  template <class F>
  void push(F&& work, event* done = nullptr) {
    record((*on_)->enqueue_locked(std::forward<F>(work)), done);
  }

 private:
  void record(std::uint64_t seq, event* done) {
    reads_.for_each([&](Access* a) { a->record_read(*on_, seq); });
    writes_.for_each([&](Access* a) { a->record_write(*on_, seq); });
    if (done) *done = event(*on_, seq);
  }

  std::lock_guard<spin_lock> lock_;
  const list& reads_;
  const list& writes_;
  const std::shared_ptr<stream_state>* on_;
  std::shared_ptr<stream_state> fallback_;
};

// A view of the storage of a tensor or view that does not count as a reference to it: what queued
// work holds (the storage's deleter waits for that work, stream_access::delete_after_work). T is
// the element type of the view (const to read).
template <class T, class X>
tensor_view<T, typename X::backend_type> borrowed_view_of(const X& x) {
  using S = typename std::remove_cvref_t<decltype(x.storage_ptr())>::element_type;
  // The aliasing constructor with an empty owner: a pointer without a control block, so copies of
  // the view cost no atomic operations.
  return {std::shared_ptr<S>(std::shared_ptr<S>(), x.storage_ptr().get()),
          const_cast<T*>(x.raw_data()), layout{x.shape(), x.strides(), 0}};
}
template <class X>
auto borrowed_view(const X& x) {
  return borrowed_view_of<typename X::element_type>(x);
}

// e with every tensor or view leaf x replaced by make(x); scalars are kept.
template <class E, class Make>
auto replace_strided_leaves(const E& e, const Make& make) {
  return transform_leaves(e, [&](const auto& leaf) {
    if constexpr (strided_leaf<std::remove_cvref_t<decltype(leaf)>>) {
      return make(leaf);
    } else {
      return leaf;
    }
  });
}

// The expression with every leaf replaced by a read-only borrowed view: copies of the work's
// expression then cost no atomic operations, and the storage outlives the work all the same
// (its deleter waits for it).
template <class E>
auto capture(const E& e) {
  return replace_strided_leaves(
      e, [](const auto& leaf) { return borrowed_view_of<const value_t<decltype(leaf)>>(leaf); });
}

// A leaf of queued work that covers n contiguous elements: a pointer to them and to their storage
// (16 bytes instead of a 168-byte view with room for eight dimensions), rebuilt into a 1-D view
// when the work runs. An assignment whose leaves all have the destination's shape and are
// contiguous (the common case) is captured this way: its task then fills two cache lines of the
// queue instead of nine, and writing those lines is most of what enqueueing costs.
template <class T, class Backend, class S>
struct flat_leaf {
  using value_type = std::remove_const_t<T>;
  T* data;
  S* storage;

  tensor_view<T, Backend> view(index_t n) const {
    return {std::shared_ptr<S>(std::shared_ptr<S>(), storage), data,
            layout{shape_t{n}, strides_t{1}, 0}};
  }
};

template <class T, class X>
auto flat_leaf_of(const X& x) {
  using S = typename std::remove_cvref_t<decltype(x.storage_ptr())>::element_type;
  return flat_leaf<T, typename X::backend_type, S>{const_cast<T*>(x.raw_data()),
                                                   x.storage_ptr().get()};
}

template <class E>
struct flat_capturable : std::bool_constant<strided_leaf<E> || is_scalar_expr<E>> {};
template <class E>
struct any_input : std::true_type {};

// Whether e can be captured flat (see flat_leaf): at compile time, every input of its kernel is a
// leaf or a scalar (no reduction or product evaluated first); at run time, every leaf is
// contiguous with exactly the destination's shape (the criterion of the CPU evaluator's flat path,
// cpu_eval::flat_inputs).
template <class E>
inline constexpr bool flat_capturable_tree =
    count_inputs<flat_capturable, E>::value == count_inputs<any_input, E>::value;
template <class E>
bool flat_capture_fits(const E& e, const shape_t& shape) {
  bool flat = true;
  for_each_leaf(e, [&](const auto& leaf) {
    if constexpr (strided_leaf<std::remove_cvref_t<decltype(leaf)>>)
      flat = flat && leaf.shape() == shape && leaf.is_contiguous();
  });
  return flat;
}

// The expression with every leaf replaced by a read-only flat_leaf, and back to views of n
// elements when the work runs: the views have the types capture() gives, so the work runs the
// same evaluation.
template <class E>
auto capture_flat(const E& e) {
  return replace_strided_leaves(
      e, [](const auto& leaf) { return flat_leaf_of<const value_t<decltype(leaf)>>(leaf); });
}
template <class E>
auto expand_flat(const E& e, index_t n) {
  return transform_leaves(e, [n](const auto& leaf) {
    if constexpr (requires { leaf.view(n); }) {
      return leaf.view(n);
    } else {
      return leaf;
    }
  });
}

// The ordering state of every leaf of an expression, but `written`'s: work that reads and writes a
// storage (y = x * 2 + y) is ordered as its write, which waits for everything a read would.
template <class Access, class E>
void leaf_accesses(const E& e, small_list<Access*, 8>& out, const Access* written = nullptr) {
  for_each_leaf(e, [&](const auto& leaf) {
    if constexpr (requires { leaf.storage_ptr(); })
      if (leaf.storage_ptr() && &leaf.storage_ptr()->access() != written)
        out.push_back(&leaf.storage_ptr()->access());
  });
}

// A reduction's value, ready when its event on a stream is.
template <class T>
struct stream_future_state : future_state<T> {
  event done;
  void wait() override { done.wait(); }
  bool ready() override { return done.ready(); }
};

// The asynchronous executor of Backend, whose operations run Run's (a synchronous executor of
// the same memory) on the stream of the tensor they write (of their first operand, for
// reductions to a value).
template <class Backend, class Run>
struct queued_executor {
  using access_type = typename access_tracking<Backend>::type;
  using access_list = small_list<access_type*, 8>;
  using ordered = ordered_enqueue<access_type>;

  // The work's captures are built in its lambda's init-captures and the lambda in its queue slot:
  // a captured view is constructed once and moved once.
  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e, stream* on = nullptr) {
    if (dst.size() == 0) return;
    check_devices("assignment", dst, e);
    access_list reads, writes;
    writes.push_back(&dst.storage_ptr()->access());
    leaf_accesses(e, reads, writes.front());
    ordered order(on ? &on->state() : nullptr, reads, writes);
    if constexpr (flat_capturable_tree<E>) {
      if (dst.is_contiguous() && flat_capture_fits(e, dst.shape())) {
        using T = typename Dst::element_type;
        return order.push(
            [target = flat_leaf_of<T>(dst), captured = capture_flat(e), n = dst.size()] {
              Run::assign(target.view(n), expand_flat(captured, n));
            });
      }
    }
    order.push(
        [target = borrowed_view(dst), captured = capture(e)] { Run::assign(target, captured); });
  }

  // One task for every destination: the pass over them all is the synchronous backend's.
  template <class... Dst, class... E>
  static void assign_each(const std::tuple<Dst...>& dsts, const std::tuple<E...>& es) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (check_devices("assignment", std::get<I>(dsts), std::get<I>(es)), ...);
      if (((std::get<I>(dsts).size() == 0) && ...)) return;
      access_list reads, writes;
      auto add_write = [&](access_type* a) {
        bool known = false;
        writes.for_each([&](access_type* w) { known = known || w == a; });
        if (!known) writes.push_back(a);
      };
      (add_write(&std::get<I>(dsts).storage_ptr()->access()), ...);
      access_list leaves;
      (leaf_accesses(std::get<I>(es), leaves), ...);
      leaves.for_each([&](access_type* a) {
        bool written = false;
        writes.for_each([&](access_type* w) { written = written || w == a; });
        if (!written) reads.push_back(a);
      });
      ordered(nullptr, reads, writes)
          .push([targets = std::make_tuple(borrowed_view(std::get<I>(dsts))...),
                 captured = std::make_tuple(capture(std::get<I>(es))...)] {
            Run::assign_each(targets, captured);
          });
    }
    (std::index_sequence_for<E...>{});
  }

  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    if (dst.size() == 0) return;
    access_list reads, writes;
    writes.push_back(&dst.storage_ptr()->access());
    ordered order(nullptr, reads, writes);
    if (dst.is_contiguous()) {
      using U = typename Dst::element_type;
      order.push([target = flat_leaf_of<U>(dst), value, n = dst.size()] {
        Run::fill(target.view(n), value);
      });
    } else {
      order.push([target = borrowed_view(dst), value] { Run::fill(target, value); });
    }
  }

  template <class Dst, class G>
  static void generate(const Dst& dst, const G& g) {
    if (dst.size() == 0) return;
    access_list reads, writes;
    writes.push_back(&dst.storage_ptr()->access());
    ordered(nullptr, reads, writes).push([target = borrowed_view(dst), g] {
      Run::generate(target, g);
    });
  }

  template <class R, class E>
  static future<reduce_result_t<R, E>> reduce(const E& e) {
    using Result = reduce_result_t<R, E>;
    if (R::needs_elements && e.shape().product() == 0)
      throw shape_error(cat(R::name, ": the expression of shape ", e.shape(),
                            " is empty, and an empty ", R::name, " has no value"));
    check_devices(R::name, e);
    access_list reads, writes;
    std::shared_ptr<stream_state> home;
    leaf_accesses(e, reads);
    reads.for_each([&](access_type* a) {
      if (!home) home = a->home();
    });
    if (!home) home = access_type::home_type::current();
    auto state = std::make_shared<stream_future_state<Result>>();
    ordered(&home, reads, writes)
        .push([captured = capture(e), state] { state->value = Run::template reduce<R>(captured); },
              &state->done);
    return future<Result>(state);
  }

  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis) {
    if (dst.size() == 0) return;
    check_devices("assignment", dst, e);
    access_list reads, writes;
    writes.push_back(&dst.storage_ptr()->access());
    leaf_accesses(e, reads, writes.front());
    ordered(nullptr, reads, writes)
        .push([target = borrowed_view(dst), captured = capture(e), axis] {
          Run::template reduce_axis<R>(target, captured, axis);
        });
  }

  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c) {
    if (c.size() == 0) return;
    check_devices("gemm", c, a, b);
    access_list reads, writes;
    writes.push_back(&c.storage_ptr()->access());
    leaf_accesses(a, reads, writes.front());
    leaf_accesses(b, reads, writes.front());
    ordered(nullptr, reads, writes)
        .push([alpha, ca = capture(a), cb = capture(b), beta, target = borrowed_view(c)] {
          Run::gemm(alpha, ca, cb, beta, target);
        });
  }

  // The host data is staged at once (the caller may reuse it when this returns); the copy into
  // dst is enqueued.
  template <class Dst, class T>
  static void copy_from_host(const Dst& dst, const T* src) {
    const std::size_t n = static_cast<std::size_t>(dst.size());
    if (n == 0) return;
    std::shared_ptr<T[]> staged(new T[n]);
    std::memcpy(staged.get(), src, n * sizeof(T));
    access_list reads, writes;
    writes.push_back(&dst.storage_ptr()->access());
    ordered(nullptr, reads, writes).push([target = borrowed_view(dst), staged = std::move(staged)] {
      Run::copy_from_host(target, staged.get());
    });
  }

  // Waits for src's last write, then copies.
  template <class T, class Src>
  static void copy_to_host(T* dst, const Src& src) {
    if (src.size() == 0) return;
    src.storage_ptr()->access().wait_host(false);
    Run::copy_to_host(dst, src);
  }

  template <class Dst, class Src>
  static void copy(const Dst& dst, const Src& src) {
    if (dst.size() == 0) return;
    access_list reads, writes;
    writes.push_back(&dst.storage_ptr()->access());
    reads.push_back(&src.storage_ptr()->access());
    // The source may live on another device of the backend.
    ordered(nullptr, reads, writes)
        .push([target = borrowed_view(dst), source = borrowed_view(src)] {
          Run::copy(target, source);
        });
  }

  // Enqueues fn(args...) with host views of the tensor views among args (see
  // executor<cpu<sync>>::host_kernel): views of const elements are read, the others written;
  // other arguments are copied.
  template <class F, class... Args>
  static void host_kernel(F&& fn, const Args&... args) {
    access_list reads, writes;
    auto note = [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      if constexpr (strided_leaf<A>) {
        if (!a.storage_ptr()) return;
        if constexpr (std::is_const_v<typename A::element_type>)
          reads.push_back(&a.storage_ptr()->access());
        else
          writes.push_back(&a.storage_ptr()->access());
      }
    };
    (note(args), ...);
    check_devices("host_kernel", args...);
    ordered(nullptr, reads, writes).push([fn = std::forward<F>(fn), args...] {
      Run::host_kernel(fn, args...);
    });
  }
};

}  // namespace detail
}  // namespace meld
