// thread_comm: k ranks inside one process, one thread each (one CPU "device" each), sharing
// memory. A thread_group owns the k communicators; rank r's thread uses group.comm(r).
//
//   meld::thread_group group(4);
//   group.run([&](meld::thread_comm& comm) {        // 4 threads, one per rank
//     comm.allreduce(grads);                        // sum over the 4 ranks, in place
//   });
//
// The collectives move data with bandwidth-optimal ring algorithms, directly between the ranks'
// buffers (no staging copies, no lock):
//   allreduce       reduce-scatter then allgather around the ring: each rank sends and receives
//                   2 (k - 1) / k of the buffer, whatever k. The buffer is cut into k chunks and
//                   each chunk into slices (64 KiB by default); rank r reduces slice j of a chunk
//                   as soon as its left neighbour has finished it, so the k ranks work in a
//                   pipeline, and a slice is read while it is still in cache. The sums run through
//                   meld's SIMD evaluation.
//   reduce_scatter  the same ring, with partial sums in a per-rank scratch buffer.
//   allgather       a ring of copies; broadcast: a pipelined chain from the root.
// Each rank publishes its progress in one atomic counter (collective sequence number, slices
// done); a rank waits only for its two neighbours' counters: spinning briefly, then sleeping.
//
// Every element is reduced in the same order on every run, and each chunk's result is computed
// once and copied to the others, so every rank gets the same bits, and runs repeat bit for bit.
//
// Timeouts: a wait that sees no progress for `timeout` (default 60 s, comm_options) throws
// comm_error naming the ranks that never arrived and the pending collective, and aborts the
// group: the other ranks then throw too (and a straggler that arrives later throws at once).
// A group that failed refuses further collectives.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../backend/cpu/thread_pool.hpp"
#include "buffer.hpp"
#include "communicator.hpp"
#include "detail/progress.hpp"
#include "detail/reduce_kernels.hpp"

namespace meld {

class thread_comm;
class thread_group;

namespace detail::dist {

// progress = (sequence << tc_unit_bits) | units of that collective completed.
inline constexpr int tc_unit_bits = 24;
inline constexpr std::uint64_t seq_base(std::uint64_t seq) {
  return seq << tc_unit_bits;
}
inline constexpr std::size_t tc_default_slice = std::size_t(64) << 10;
inline constexpr index_t tc_max_slices = 4096;
inline constexpr int tc_max_ranks = 1024;

// What a rank publishes when it enters a collective (two slots, by sequence parity: a reader of
// sequence s is done before its owner can enter s + 2).
struct tc_entry {
  call_info call;
  const void* src = nullptr;
  void* dst = nullptr;
  const void* scratch = nullptr;
};

struct alignas(cache_line) tc_slot {
  std::atomic<std::uint64_t> progress{0};
  // Inside a collective: the rank may be reading its peers' buffers.
  std::atomic<bool> inside{false};
  tc_entry entries[2];
  timed_waiter waiter;
  std::mutex last_mutex;
  call_info last;  // the latest collective this rank entered (for error messages)
};

struct tc_state {
  explicit tc_state(int k, const comm_options& o)
      : size(k),
        opts(resolve(o, std::chrono::seconds(60), tc_default_slice)),
        slots(new tc_slot[static_cast<std::size_t>(k)]),
        spin(k <= available_cores()) {}

  int size;
  resolved_options opts;
  std::unique_ptr<tc_slot[]> slots;
  bool spin;  // spin briefly before sleeping (only when every rank can have a core)

  std::atomic<bool> aborted{false};
  std::mutex abort_mutex;
  comm_error::reason abort_reason = comm_error::reason::aborted;
  int abort_rank = -1;
  std::string abort_message;

  // Marks the group failed (the first abort wins) and wakes every waiting rank.
  void abort(int rank, comm_error::reason why, const std::string& message) {
    {
      std::lock_guard lock(abort_mutex);
      if (!aborted.load(std::memory_order_relaxed)) {
        abort_rank = rank;
        abort_reason = why;
        abort_message = message;
        aborted.store(true, std::memory_order_seq_cst);
      }
    }
    for (int q = 0; q < size; ++q) slots[q].waiter.notify();
  }
};

}  // namespace detail::dist

class thread_comm {
 public:
  using request = comm_request;

  thread_comm(const thread_comm&) = delete;
  thread_comm& operator=(const thread_comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return st_->size; }
  // The sequence number the next collective will get.
  std::uint64_t next_sequence() const { return seq_ + 1; }
  std::chrono::milliseconds timeout() const { return st_->opts.timeout; }
  bool debug() const { return st_->opts.debug; }

  // ---- collectives (see communicator.hpp for their meaning)
  // --------------------------------------

  template <detail::dist::buffer X>
  void allreduce(X&& buf, reduce_op op = reduce_op::sum) {
    allreduce_impl(detail::dist::as_span(buf), op, false);
  }
  template <detail::dist::buffer X>
  comm_request allreduce_async(X&& buf, reduce_op op = reduce_op::sum) {
    return allreduce_impl(detail::dist::as_span(buf), op, true);
  }

  template <detail::dist::buffer X>
  void broadcast(X&& buf, int root) {
    broadcast_impl(detail::dist::as_span(buf), root, false);
  }
  template <detail::dist::buffer X>
  comm_request broadcast_async(X&& buf, int root) {
    return broadcast_impl(detail::dist::as_span(buf), root, true);
  }

  template <detail::dist::buffer In, detail::dist::buffer Out>
  void reduce_scatter(In&& in, Out&& out, reduce_op op = reduce_op::sum) {
    reduce_scatter_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out), op,
                        false);
  }
  template <detail::dist::buffer In, detail::dist::buffer Out>
  comm_request reduce_scatter_async(In&& in, Out&& out, reduce_op op = reduce_op::sum) {
    return reduce_scatter_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out),
                               op, true);
  }

  template <detail::dist::buffer In, detail::dist::buffer Out>
  void allgather(In&& in, Out&& out) {
    allgather_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out), false);
  }
  template <detail::dist::buffer In, detail::dist::buffer Out>
  comm_request allgather_async(In&& in, Out&& out) {
    return allgather_impl(const_span(detail::dist::as_span(in)), detail::dist::as_span(out), true);
  }

  void barrier() { barrier_impl(false); }
  comm_request barrier_async() { return barrier_impl(true); }

  // Waits until every asynchronous collective this rank issued has completed (errors stay with
  // their requests).
  void drain() { queue_.drain(); }

  // Fails the whole group: every rank waiting in (or later entering) a collective throws
  // comm_error naming this rank and the reason.
  void abort(const std::string& reason) {
    st_->abort(rank_, comm_error::reason::aborted,
               detail::cat("rank ", rank_, " aborted the group: ", reason));
  }

 private:
  friend class thread_group;
  using slot = detail::dist::tc_slot;
  using clock = detail::dist::clock;

  thread_comm(std::shared_ptr<detail::dist::tc_state> st, int rank)
      : st_(std::move(st)), rank_(rank) {}

  template <class T>
  static std::span<const T> const_span(std::span<T> s) {
    return std::span<const T>(s.data(), s.size());
  }

  int left() const { return (rank_ + size() - 1) % size(); }
  int right() const { return (rank_ + 1) % size(); }
  int mod(long i) const { return static_cast<int>(((i % size()) + size()) % size()); }
  slot& slot_of(int r) const { return st_->slots[r]; }

  template <class F>
  comm_request issue(const detail::dist::call_info& call, bool async, F body) {
    auto job = [this, call, body]() mutable {
      std::atomic<bool>& inside = slot_of(rank_).inside;
      inside.store(true, std::memory_order_seq_cst);  // before the abort check: see leave_failed
      try {
        check_usable(call);
        body(call);
      } catch (...) {
        leave_failed();
        throw;
      }
      inside.store(false, std::memory_order_release);
    };
    if (async) return comm_request(queue_.submit(std::move(job)));
    queue_.run(job);
    return {};
  }

  // ---- the collectives --------------------------------------------------------------------------

  template <class T>
  comm_request allreduce_impl(std::span<T> buf, reduce_op op, bool async) {
    static_assert(detail::dist::comm_element<T> && !std::is_const_v<T>,
                  "thread_comm::allreduce: the buffer must be mutable float, double, int32 or "
                  "int64 elements");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::allreduce,
                                                 static_cast<std::int64_t>(buf.size()), op);
    return issue(call, async,
                 [this, buf, op](const auto& c) { this->ring_allreduce(buf.data(), c, op); });
  }

  template <class T>
  comm_request broadcast_impl(std::span<T> buf, int root, bool async) {
    static_assert(detail::dist::comm_element<T> && !std::is_const_v<T>,
                  "thread_comm::broadcast: the buffer must be mutable");
    check_root(root, "broadcast");
    const auto call =
        detail::dist::make_call<T>(++seq_, collective_kind::broadcast,
                                   static_cast<std::int64_t>(buf.size()), reduce_op::sum, root);
    return issue(call, async, [this, buf](const auto& c) { this->chain_broadcast(buf.data(), c); });
  }

  template <class T>
  comm_request reduce_scatter_impl(std::span<const T> in, std::span<T> out, reduce_op op,
                                   bool async) {
    static_assert(detail::dist::comm_element<T>, "thread_comm::reduce_scatter: element type");
    if (in.size() != out.size() * static_cast<std::size_t>(size()))
      throw shape_error(detail::cat("thread_comm::reduce_scatter: the input has ", in.size(),
                                    " elements, expected ", size(), " ranks x ", out.size(),
                                    " (the output's size)"));
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::reduce_scatter,
                                                 static_cast<std::int64_t>(out.size()), op);
    return issue(call, async, [this, in, out, op](const auto& c) {
      this->ring_reduce_scatter(in.data(), out.data(), c, op);
    });
  }

  template <class T>
  comm_request allgather_impl(std::span<const T> in, std::span<T> out, bool async) {
    static_assert(detail::dist::comm_element<T>, "thread_comm::allgather: element type");
    if (out.size() != in.size() * static_cast<std::size_t>(size()))
      throw shape_error(detail::cat("thread_comm::allgather: the output has ", out.size(),
                                    " elements, expected ", size(), " ranks x ", in.size(),
                                    " (the input's size)"));
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::allgather,
                                                 static_cast<std::int64_t>(in.size()));
    return issue(call, async, [this, in, out](const auto& c) {
      this->ring_allgather(in.data(), out.data(), c);
    });
  }

  comm_request barrier_impl(bool async) {
    const auto call = detail::dist::make_call<std::uint8_t>(++seq_, collective_kind::barrier, 0);
    return issue(call, async, [this](const auto& c) {
      this->arrive(c, nullptr, nullptr, nullptr);
      if (!this->debug())  // (the debug check already waited for everyone)
        for (int q = 0; q < this->size(); ++q) this->await(q, detail::dist::seq_base(c.seq), c);
    });
  }

  void check_root(int root, const char* what) const {
    if (root < 0 || root >= size())
      throw std::invalid_argument(
          detail::cat("thread_comm::", what, ": root ", root, " is not a rank of ", size()));
  }

  // Slices per chunk of `count` elements of `elem` bytes (the same on every rank).
  index_t slices(index_t count, std::size_t elem) const {
    const auto bytes = static_cast<std::size_t>(count) * elem;
    const auto s =
        static_cast<index_t>((bytes + st_->opts.slice_bytes - 1) / st_->opts.slice_bytes);
    return std::clamp<index_t>(s, 1, detail::dist::tc_max_slices);
  }

  template <class T>
  void ring_allreduce(T* buf, const detail::dist::call_info& call, reduce_op op) {
    using namespace detail::dist;
    arrive(call, buf, buf, nullptr);
    const int k = size();
    const index_t n = call.count;
    if (k == 1 || n == 0) return;
    const std::uint64_t base = seq_base(call.seq);
    await(left(), base, call);
    const T* lbuf = static_cast<const T*>(slot_of(left()).entries[call.seq & 1].dst);
    const index_t S = slices((n + k - 1) / k, sizeof(T));
    const index_t steps = 2 * (k - 1);
    for (index_t g = 0; g < steps; ++g) {
      const bool scatter = g < k - 1;
      const index_t t = g - (k - 1);
      const int c = scatter ? mod(rank_ - 1 - static_cast<long>(g)) : mod(rank_ - t);
      const index_t lo = part_begin(n, k, c), len = part_begin(n, k, c + 1) - lo;
      for (index_t j = 0; j < S; ++j) {
        const index_t u = g * S + j;
        if (u >= S) await(left(), base + static_cast<std::uint64_t>(u - S + 1), call);
        // Before overwriting a slice with its final value, the right neighbour must have read
        // its partial sum (its reduce-scatter step t).
        if (!scatter) await(right(), base + static_cast<std::uint64_t>(t * S + j + 1), call);
        const index_t a = lo + part_begin(len, S, j), b = lo + part_begin(len, S, j + 1);
        if (scatter)
          reduce_into(buf + a, lbuf + a, b - a, op);
        else
          copy_elements(buf + a, lbuf + a, b - a);
        advance(base + static_cast<std::uint64_t>(u + 1));
      }
    }
    // The right neighbour reads this buffer until its last step.
    await(right(), base + static_cast<std::uint64_t>(steps * S), call);
  }

  template <class T>
  void ring_reduce_scatter(const T* in, T* out, const detail::dist::call_info& call, reduce_op op) {
    using namespace detail::dist;
    const int k = size();
    const index_t m = call.count;
    T* scratch = k > 2 ? static_cast<T*>(scratch_.get(2 * static_cast<std::size_t>(m) * sizeof(T)))
                       : nullptr;
    arrive(call, in, out, scratch);
    if (m == 0) return;
    if (k == 1) return copy_elements(out, in, m);
    const std::uint64_t base = seq_base(call.seq);
    await(left(), base, call);
    const tc_entry& le = slot_of(left()).entries[call.seq & 1];
    const T* lin = static_cast<const T*>(le.src);
    const T* lscratch = static_cast<const T*>(le.scratch);
    const index_t S = slices(m, sizeof(T));
    // Step s handles chunk r - s - 2: its partial sum passes from rank to rank and ends, complete,
    // at its own rank after k - 1 steps. Partial sums alternate between two scratch halves.
    for (index_t s = 0; s < k - 1; ++s) {
      const int c = mod(rank_ - 2 - static_cast<long>(s));
      const bool last = s == k - 2;
      for (index_t j = 0; j < S; ++j) {
        const index_t u = s * S + j;
        const index_t a = part_begin(m, S, j), len = part_begin(m, S, j + 1) - a;
        if (s > 0) await(left(), base + static_cast<std::uint64_t>(u - S + 1), call);
        if (s >= 2 && !last)
          await(right(), base + static_cast<std::uint64_t>((s - 1) * S + j + 1), call);
        const T* partial = s == 0 ? lin + c * m + a : lscratch + ((s - 1) % 2) * m + a;
        T* dst = last ? out + a : scratch + (s % 2) * m + a;
        reduce_to(dst, in + c * m + a, partial, len, op);
        advance(base + static_cast<std::uint64_t>(u + 1));
      }
    }
    await(right(), base + static_cast<std::uint64_t>((k - 1) * S), call);
  }

  template <class T>
  void ring_allgather(const T* in, T* out, const detail::dist::call_info& call) {
    using namespace detail::dist;
    arrive(call, in, out, nullptr);
    const int k = size();
    const index_t m = call.count;
    if (m == 0) return;
    if (k == 1) return copy_elements(out, in, m);
    const std::uint64_t base = seq_base(call.seq);
    const index_t S = slices(m, sizeof(T));
    // Step 0 copies this rank's own chunk; step s copies chunk r - s from the left neighbour.
    for (index_t j = 0; j < S; ++j) {
      const index_t a = part_begin(m, S, j), b = part_begin(m, S, j + 1);
      copy_elements(out + rank_ * m + a, in + a, b - a);
      advance(base + static_cast<std::uint64_t>(j + 1));
    }
    await(left(), base, call);
    const T* lout = static_cast<const T*>(slot_of(left()).entries[call.seq & 1].dst);
    for (index_t s = 1; s < k; ++s) {
      const int c = mod(rank_ - static_cast<long>(s));
      for (index_t j = 0; j < S; ++j) {
        const index_t u = s * S + j;
        await(left(), base + static_cast<std::uint64_t>(u - S + 1), call);
        const index_t a = c * m + part_begin(m, S, j), b = c * m + part_begin(m, S, j + 1);
        copy_elements(out + a, lout + a, b - a);
        advance(base + static_cast<std::uint64_t>(u + 1));
      }
    }
    await(right(), base + static_cast<std::uint64_t>(k * S), call);
  }

  template <class T>
  void chain_broadcast(T* buf, const detail::dist::call_info& call) {
    using namespace detail::dist;
    arrive(call, buf, buf, nullptr);
    const int k = size();
    const index_t n = call.count;
    if (k == 1 || n == 0) return;
    const std::uint64_t base = seq_base(call.seq);
    const index_t S = slices(n, sizeof(T));
    const int d = mod(rank_ - call.root);  // position in the chain from the root
    if (d == 0) {
      advance(base + static_cast<std::uint64_t>(S));
    } else {
      await(left(), base, call);
      const T* lbuf = static_cast<const T*>(slot_of(left()).entries[call.seq & 1].dst);
      for (index_t j = 0; j < S; ++j) {
        await(left(), base + static_cast<std::uint64_t>(j + 1), call);
        const index_t a = part_begin(n, S, j), b = part_begin(n, S, j + 1);
        copy_elements(buf + a, lbuf + a, b - a);
        advance(base + static_cast<std::uint64_t>(j + 1));
      }
    }
    if (d < k - 1) await(right(), base + static_cast<std::uint64_t>(S), call);
  }

  // ---- synchronization --------------------------------------------------------------------------

  void check_usable(const detail::dist::call_info& call) const {
    if (st_->aborted.load(std::memory_order_seq_cst)) throw_aborted(call);
  }

  // Leaving a collective by an exception (the group was aborted, or a wait timed out): the
  // caller's buffers die with the exception, but peers that can still make progress may be
  // reading them (a ring step copies from the left neighbour's buffer). Stop reading theirs, then
  // wait until no peer is inside a collective. Peers leave promptly: the group is failed, so each
  // one's next wait throws. A peer that has not entered yet sees the abort when it does (its
  // `inside` store precedes its abort check, and the abort precedes this scan: seq_cst).
  void leave_failed() {
    slot_of(rank_).inside.store(false, std::memory_order_seq_cst);
    const auto deadline = clock::now() + 2 * st_->opts.timeout;
    for (int q = 0; q < size(); ++q)
      while (q != rank_ && slot_of(q).inside.load(std::memory_order_seq_cst) &&
             clock::now() < deadline)
        std::this_thread::yield();
  }

  // Publishes this rank's buffers for `call` and announces its arrival; in debug mode, waits for
  // every rank and compares what they called.
  void arrive(const detail::dist::call_info& call, const void* src, void* dst,
              const void* scratch) {
    slot& me = slot_of(rank_);
    me.entries[call.seq & 1] = {call, src, dst, scratch};
    {
      std::lock_guard lock(me.last_mutex);
      me.last = call;
    }
    me.progress.store(detail::dist::seq_base(call.seq), std::memory_order_seq_cst);
    for (int q = 0; q < size(); ++q)
      if (q != rank_) slot_of(q).waiter.notify();
    if (debug()) check_calls(call);
  }

  void check_calls(const detail::dist::call_info& call) {
    bool same = true;
    for (int q = 0; q < size(); ++q) {
      await(q, detail::dist::seq_base(call.seq), call);
      same = same && slot_of(q).entries[call.seq & 1].call == call;
    }
    if (same) return;
    std::string msg =
        detail::cat("meld::thread_comm: ranks called different collectives at #", call.seq, ":");
    for (int q = 0; q < size(); ++q)
      msg += detail::cat(q ? ";" : "", " rank ", q, " called ",
                         slot_of(q).entries[call.seq & 1].call.str());
    st_->abort(rank_, comm_error::reason::mismatch, msg);
    throw comm_error(comm_error::reason::mismatch, msg);
  }

  void advance(std::uint64_t value) {
    slot_of(rank_).progress.store(value, std::memory_order_seq_cst);
    slot_of(left()).waiter.notify();
    if (right() != left()) slot_of(right()).waiter.notify();
  }

  // Waits until rank `peer` has published progress >= target.
  void await(int peer, std::uint64_t target, const detail::dist::call_info& call) {
    const std::atomic<std::uint64_t>& p = slot_of(peer).progress;
    auto ready = [&] {
      return p.load(std::memory_order_acquire) >= target ||
             st_->aborted.load(std::memory_order_relaxed);
    };
    if (!ready()) {
      if (st_->spin)
        for (int i = 0; i < 1000 && !ready(); ++i) detail::cpu_relax();
      if (!ready()) sleep_until_ready(peer, target, call, ready);
    }
    // A collective that can still complete does; one that waits for a failed group throws.
    if (p.load(std::memory_order_acquire) < target) throw_aborted(call);
  }

  template <class Ready>
  void sleep_until_ready(int peer, std::uint64_t target, const detail::dist::call_info& call,
                         Ready& ready) {
    const std::atomic<std::uint64_t>& p = slot_of(peer).progress;
    std::uint64_t seen = p.load(std::memory_order_acquire);
    auto start = clock::now(), deadline = start + st_->opts.timeout;
    for (int round = 0; !ready(); ++round) {
      if (round < 64)
        std::this_thread::yield();
      else
        slot_of(rank_).waiter.wait_until(
            ready, std::min(deadline, clock::now() + std::chrono::milliseconds(5)));
      const auto now = clock::now();
      const std::uint64_t cur = p.load(std::memory_order_acquire);
      if (cur != seen) {  // the peer is making progress: the timeout starts again
        seen = cur;
        start = now;
        deadline = now + st_->opts.timeout;
      }
      if (now >= deadline && !ready()) timed_out(peer, target, call, now - start);
    }
  }

  [[noreturn]] void timed_out(int peer, std::uint64_t target, const detail::dist::call_info& call,
                              clock::duration waited) {
    using namespace detail::dist;
    std::vector<int> missing;
    for (int q = 0; q < size(); ++q)
      if (slot_of(q).progress.load(std::memory_order_acquire) < seq_base(call.seq))
        missing.push_back(q);
    std::string msg = detail::cat("meld::thread_comm rank ", rank_, ": ", call.str(),
                                  " timed out after ", seconds_str(waited), " without progress: ");
    if (!missing.empty()) {
      msg += ranks_str(missing) + (missing.size() == 1 ? " never arrived" : " never arrived") +
             " (last collective entered:";
      for (std::size_t i = 0; i < missing.size(); ++i) {
        slot& s = slot_of(missing[i]);
        std::lock_guard lock(s.last_mutex);
        msg += detail::cat(i ? "; " : " ", "rank ", missing[i], ": ", s.last.str());
      }
      msg += ")";
    } else {
      const std::uint64_t p = slot_of(peer).progress.load(std::memory_order_acquire);
      msg += detail::cat("every rank arrived, but rank ", peer, " stopped at step ",
                         p - seq_base(call.seq), " (waiting for step ", target - seq_base(call.seq),
                         ")");
    }
    st_->abort(rank_, comm_error::reason::timeout, msg);
    throw comm_error(comm_error::reason::timeout, msg);
  }

  [[noreturn]] void throw_aborted(const detail::dist::call_info& call) const {
    std::lock_guard lock(st_->abort_mutex);
    if (st_->abort_rank == rank_) throw comm_error(st_->abort_reason, st_->abort_message);
    throw comm_error(st_->abort_reason,
                     detail::cat("meld::thread_comm rank ", rank_, ": ", call.str(),
                                 " failed: the group was aborted. ", st_->abort_message));
  }

  std::shared_ptr<detail::dist::tc_state> st_;
  int rank_;
  std::uint64_t seq_ = 0;
  detail::dist::scratch_buffer scratch_;
  detail::dist::progress_queue queue_;  // last: its thread stops before the rest is destroyed
};

// k ranks of thread_comm in this process.
class thread_group {
 public:
  explicit thread_group(int ranks, const comm_options& options = {}) {
    if (ranks < 1 || ranks > detail::dist::tc_max_ranks)
      throw std::invalid_argument(detail::cat("thread_group: ", ranks, " ranks (expected 1 .. ",
                                              detail::dist::tc_max_ranks, ")"));
    state_ = std::make_shared<detail::dist::tc_state>(ranks, options);
    for (int r = 0; r < ranks; ++r)
      comms_.push_back(std::unique_ptr<thread_comm>(new thread_comm(state_, r)));
  }
  thread_group(const thread_group&) = delete;
  thread_group& operator=(const thread_group&) = delete;

  int size() const { return state_->size; }
  // Rank r's communicator: only one thread at a time may use it.
  thread_comm& comm(int r) {
    if (r < 0 || r >= size())
      throw std::out_of_range(detail::cat("thread_group::comm: rank ", r, " of ", size()));
    return *comms_[static_cast<std::size_t>(r)];
  }
  std::chrono::milliseconds timeout() const { return state_->opts.timeout; }
  bool aborted() const { return state_->aborted.load(std::memory_order_acquire); }

  // Runs f(comm(r)) on k threads, one per rank, and returns when all have returned. If one
  // throws, the group is aborted (so that no rank waits for it) and, once all have returned, the
  // exception that caused the failure is rethrown (the others are consequences).
  template <class F>
  void run(F&& f) {
    const int k = size();
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(k));
    auto body = [&](int r) {
      try {
        f(comm(r));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        comm(r).abort(detail::cat("it threw: ", e.what()));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        comm(r).abort("it threw an exception that is not a std::exception");
      }
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(k));
    for (int r = 1; r < k; ++r) threads.emplace_back(body, r);
    body(0);
    for (auto& t : threads) t.join();
    rethrow_root_cause(errors);
  }

  // Of the exceptions ranks threw, the one that caused the others: the first that is not a
  // comm_error reporting an abort by another rank.
  static void rethrow_root_cause(const std::vector<std::exception_ptr>& errors) {
    std::exception_ptr first;
    for (const auto& e : errors) {
      if (!e) continue;
      if (!first) first = e;
      try {
        std::rethrow_exception(e);
      } catch (const comm_error& ce) {
        if (ce.why() != comm_error::reason::aborted) std::rethrow_exception(e);
      } catch (...) {
        std::rethrow_exception(e);
      }
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  std::shared_ptr<detail::dist::tc_state> state_;
  std::vector<std::unique_ptr<thread_comm>> comms_;
};

}  // namespace meld
