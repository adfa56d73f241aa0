// The asynchronous policy of backends whose kernels are CPU code (cpu<async>, sim<async>): every
// operation checks shapes on the host, then enqueues the synchronous evaluation (the backend's
// `Run` executor) on a stream and returns at once.
//
// Every storage records the event of its last write and the events of reads since. Work on another
// stream that reads or writes it makes that stream (not the host) wait first, and host access
// (data(), element access, item(), a reduction's result) waits for exactly the work it depends
// on. Queued work holds the storages it touches (the captured expression's leaves are views that
// own their storage), so a tensor destroyed while work on it is queued keeps its memory until that
// work has run.
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "../../expr/walk.hpp"
#include "../../tensor/tensor.hpp"
#include "../backend.hpp"
#include "../future.hpp"
#include "../lowering.hpp"
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

// Ordering state of one storage (guarded by enqueue_mutex()). Home::current() names the stream
// that a new storage is bound to (the stream work that writes it runs on).
template <class Home>
class stream_access {
 public:
  using home_type = Home;
  stream_access() : home_(Home::current()) {}

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

// Enqueues work on stream `on` (or the home stream of the first written storage, else of the first
// read one, else the current stream) after the events
// it depends on; records it as a read of `reads` and a write of `writes`. Returns its event.
// (One instance per access type, whatever the work: the work arrives type-erased.)
template <class Access>
event enqueue_ordered(std::shared_ptr<stream_state> on, const small_list<Access*, 8>& reads,
                      const small_list<Access*, 8>& writes, task work) {
  std::lock_guard lock(enqueue_mutex());
  auto home_of = [&](Access* a) {
    if (!on) on = a->home_locked();
  };
  writes.for_each(home_of);
  reads.for_each(home_of);
  if (!on) on = Access::home_type::current();
  small_list<event, 8> waits;
  reads.for_each([&](Access* a) { a->dependencies(on.get(), false, waits); });
  writes.for_each([&](Access* a) { a->dependencies(on.get(), true, waits); });
  if (!waits.empty()) {
    on->enqueue(task([waits] { waits.for_each([](const event& e) { e.wait_quietly(); }); }));
  }
  const event done(on, on->enqueue(std::move(work)));
  reads.for_each([&](Access* a) { a->record_read(done); });
  writes.for_each([&](Access* a) { a->record_write(done); });
  return done;
}

// A view that shares the storage of a tensor or view: what queued work holds.
template <class X>
auto owning_view(const X& x) {
  using T = typename X::element_type;
  using B = typename X::backend_type;
  return tensor_view<T, B>(x.storage_ptr(), const_cast<T*>(x.raw_data()),
                           layout{x.shape(), x.strides(), 0});
}

// The expression with every leaf replaced by a read-only view that owns its storage (an lvalue
// tensor, held by pointer in the expression, may be gone when the work runs).
template <class E>
auto capture(const E& e) {
  return transform_leaves(e, [](const auto& leaf) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (strided_leaf<L>) {
      using T = value_t<L>;
      return tensor_view<const T, backend_t<L>>(owning_view(leaf));
    } else {
      return leaf;
    }
  });
}

// The ordering state of every leaf of an expression.
template <class Access, class E>
void leaf_accesses(const E& e, small_list<Access*, 8>& out) {
  for_each_leaf(e, [&](const auto& leaf) {
    if constexpr (requires { leaf.storage_ptr(); })
      if (leaf.storage_ptr()) out.push_back(&leaf.storage_ptr()->access());
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

  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e, stream* on = nullptr) {
    if (dst.size() == 0) return;
    check_devices("assignment", dst, e);
    auto target = owning_view(dst);
    auto captured = capture(e);
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    leaf_accesses(captured, reads);
    enqueue_ordered(on ? on->state() : nullptr, reads, writes,
                    task([target, captured] { Run::assign(target, captured); }));
  }

  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    if (dst.size() == 0) return;
    auto target = owning_view(dst);
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    enqueue_ordered(nullptr, reads, writes, task([target, value] { Run::fill(target, value); }));
  }

  template <class Dst, class G>
  static void generate(const Dst& dst, const G& g) {
    if (dst.size() == 0) return;
    auto target = owning_view(dst);
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    enqueue_ordered(nullptr, reads, writes, task([target, g] { Run::generate(target, g); }));
  }

  template <class R, class E>
  static future<reduce_result_t<R, E>> reduce(const E& e) {
    using Result = reduce_result_t<R, E>;
    if (R::needs_elements && e.shape().product() == 0)
      throw shape_error(cat(R::name, ": the expression of shape ", e.shape(),
                            " is empty, and an empty ", R::name, " has no value"));
    check_devices(R::name, e);
    auto captured = capture(e);
    access_list reads, writes;
    std::shared_ptr<stream_state> home;
    leaf_accesses(captured, reads);
    reads.for_each([&](access_type* a) {
      if (!home) home = a->home();
    });
    if (!home) home = access_type::home_type::current();
    auto state = std::make_shared<stream_future_state<Result>>();
    state->done = enqueue_ordered(home, reads, writes, task([captured, state] {
                                    state->value = Run::template reduce<R>(captured);
                                  }));
    return future<Result>(state);
  }

  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis) {
    if (dst.size() == 0) return;
    check_devices("assignment", dst, e);
    auto target = owning_view(dst);
    auto captured = capture(e);
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    leaf_accesses(captured, reads);
    enqueue_ordered(nullptr, reads, writes, task([target, captured, axis] {
                      Run::template reduce_axis<R>(target, captured, axis);
                    }));
  }

  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c) {
    if (c.size() == 0) return;
    check_devices("gemm", c, a, b);
    auto target = owning_view(c);
    auto ca = capture(a);
    auto cb = capture(b);
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    leaf_accesses(ca, reads);
    leaf_accesses(cb, reads);
    enqueue_ordered(nullptr, reads, writes, task([alpha, ca, cb, beta, target] {
                      Run::gemm(alpha, ca, cb, beta, target);
                    }));
  }

  // The host data is staged at once (the caller may reuse it when this returns); the copy into
  // dst is enqueued.
  template <class Dst, class T>
  static void copy_from_host(const Dst& dst, const T* src) {
    const std::size_t n = static_cast<std::size_t>(dst.size());
    if (n == 0) return;
    std::shared_ptr<T[]> staged(new T[n]);
    std::memcpy(staged.get(), src, n * sizeof(T));
    auto target = owning_view(dst);
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    enqueue_ordered(nullptr, reads, writes,
                    task([target, staged] { Run::copy_from_host(target, staged.get()); }));
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
    auto target = owning_view(dst);
    auto source = owning_view(src);  // another device of the backend is fine
    access_list reads, writes;
    writes.push_back(&target.storage_ptr()->access());
    reads.push_back(&source.storage_ptr()->access());
    enqueue_ordered(nullptr, reads, writes, task([target, source] { Run::copy(target, source); }));
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
    enqueue_ordered(nullptr, reads, writes,
                    task([fn = std::forward<F>(fn), args...] { Run::host_kernel(fn, args...); }));
  }
};

}  // namespace detail
}  // namespace meld
