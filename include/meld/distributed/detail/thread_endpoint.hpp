// How the ranks of a thread_group wait for each other. They share one tc_state: a slot per rank
// (an atomic progress counter, the buffers of the rank's current collective, a waiter to sleep
// on) and the group's failure. A thread_endpoint is one rank's side of it: it publishes its
// buffers and its progress, waits for a peer's progress (spinning briefly, then sleeping, under
// the timeout), and fails the group with a comm_error that names the ranks that never arrived.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../runtime/thread_pool.hpp"
#include "../../runtime/waiter.hpp"
#include "../communicator.hpp"
#include "progress.hpp"

namespace meld::detail::distributed {

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
  waiter wakeup;  // the rank sleeps here while it waits for its peers
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
    for (int q = 0; q < size; ++q) slots[q].wakeup.notify();
  }
};

class thread_endpoint {
 public:
  thread_endpoint(std::shared_ptr<tc_state> st, int rank) : st_(std::move(st)), rank_(rank) {}

  int rank() const { return rank_; }
  int size() const { return st_->size; }
  const resolved_options& options() const { return st_->opts; }
  bool debug() const { return st_->opts.debug; }
  int left() const { return (rank_ + size() - 1) % size(); }
  int right() const { return (rank_ + 1) % size(); }
  int mod(long i) const { return static_cast<int>(((i % size()) + size()) % size()); }
  tc_slot& slot_of(int r) const { return st_->slots[r]; }
  // What rank `peer` published for `call`.
  const tc_entry& entry_of(int peer, const call_info& call) const {
    return slot_of(peer).entries[call.seq & 1];
  }
  // This rank's scratch memory (published to its peers with arrive()).
  void* scratch(std::size_t bytes) { return scratch_.get(bytes); }

  // Slices per chunk of `count` elements of `elem` bytes (the same on every rank).
  index_t slices(index_t count, std::size_t elem) const {
    const auto bytes = static_cast<std::size_t>(count) * elem;
    const auto s =
        static_cast<index_t>((bytes + st_->opts.slice_bytes - 1) / st_->opts.slice_bytes);
    return std::clamp<index_t>(s, 1, tc_max_slices);
  }

  // Runs body(call) as this rank's part of `call`, refusing it if the group has failed.
  template <class F>
  void run(const call_info& call, F& body) {
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
  }

  // Fails the whole group: every rank waiting in (or later entering) a collective throws
  // comm_error naming this rank and the reason.
  void abort(const std::string& reason) {
    st_->abort(rank_, comm_error::reason::aborted,
               cat("rank ", rank_, " aborted the group: ", reason));
  }

  // Publishes this rank's buffers for `call` and announces its arrival; in debug mode, waits for
  // every rank and compares what they called.
  void arrive(const call_info& call, const void* src, void* dst, const void* scratch) {
    tc_slot& me = slot_of(rank_);
    me.entries[call.seq & 1] = {call, src, dst, scratch};
    {
      std::lock_guard lock(me.last_mutex);
      me.last = call;
    }
    me.progress.store(seq_base(call.seq), std::memory_order_seq_cst);
    for (int q = 0; q < size(); ++q)
      if (q != rank_) slot_of(q).wakeup.notify();
    if (debug()) check_calls(call);
  }

  void advance(std::uint64_t value) {
    slot_of(rank_).progress.store(value, std::memory_order_seq_cst);
    slot_of(left()).wakeup.notify();
    if (right() != left()) slot_of(right()).wakeup.notify();
  }

  // What rank `peer` published for `call`, once it has arrived, checked against this rank's call:
  // the rings read a peer's buffers only through this, so a peer that called something else
  // (another kind, count, element type, operation or root) is reported as a mismatch instead of
  // being read out of bounds. A comparison in the shared slot, where debug mode instead compares
  // every rank's call with every other's before any data moves.
  const tc_entry& matching_entry(int peer, const call_info& call) {
    await(peer, seq_base(call.seq), call);
    const tc_entry& e = entry_of(peer, call);
    if (!(e.call == call)) mismatch(peer, e.call, call);
    return e;
  }

  // How long a rank spins for a peer before it sleeps, where every rank has a core (as long as
  // worker_crew's threads spin between steps). A peer that enters a collective late is usually a
  // fraction of a millisecond behind (data_parallel's workers reach their gradient allreduce after
  // the same backward pass), and a rank that slept makes the peer that wakes it wait for its
  // wake-up in the collective's first step (benchmarks/RESULTS.md, "Where the example's 2-worker
  // MLP step goes").
  static constexpr auto spin_time = std::chrono::microseconds(1000);

  // Waits until rank `peer` has published progress >= target.
  void await(int peer, std::uint64_t target, const call_info& call) {
    const std::atomic<std::uint64_t>& p = slot_of(peer).progress;
    auto ready = [&] {
      return p.load(std::memory_order_acquire) >= target ||
             st_->aborted.load(std::memory_order_relaxed);
    };
    if (!ready() && !(st_->spin && spin_until(ready, clock::now() + spin_time)))
      sleep_until_ready(peer, target, call, ready);
    // A collective that can still complete does; one that waits for a failed group throws.
    if (p.load(std::memory_order_acquire) < target) throw_aborted(call);
  }

 private:
  void check_usable(const call_info& call) const {
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

  void check_calls(const call_info& call) {
    bool same = true;
    for (int q = 0; q < size(); ++q) {
      await(q, seq_base(call.seq), call);
      same = same && entry_of(q, call).call == call;
    }
    if (same) return;
    std::string msg =
        cat("meld::thread_comm: ranks called different collectives at #", call.seq, ":");
    for (int q = 0; q < size(); ++q)
      msg += cat(q ? ";" : "", " rank ", q, " called ", entry_of(q, call).call.str());
    st_->abort(rank_, comm_error::reason::mismatch, msg);
    throw comm_error(comm_error::reason::mismatch, msg);
  }

  [[noreturn]] void mismatch(int peer, const call_info& theirs, const call_info& mine) {
    const bool first = rank_ < peer;
    std::string msg =
        cat("meld::thread_comm: ranks called different collectives at #", mine.seq, ": rank ",
            first ? rank_ : peer, " called ", (first ? mine : theirs).str(), "; rank ",
            first ? peer : rank_, " called ", (first ? theirs : mine).str(), " (seen by rank ",
            rank_, "; MELD_COMM_DEBUG=1 compares every rank's call)");
    st_->abort(rank_, comm_error::reason::mismatch, msg);
    throw comm_error(comm_error::reason::mismatch, msg);
  }

  template <class Ready>
  void sleep_until_ready(int peer, std::uint64_t target, const call_info& call, Ready& ready) {
    const std::atomic<std::uint64_t>& p = slot_of(peer).progress;
    std::uint64_t seen = p.load(std::memory_order_acquire);
    auto start = clock::now(), deadline = start + st_->opts.timeout;
    for (int round = 0; !ready(); ++round) {
      if (round < 64)
        std::this_thread::yield();
      else
        slot_of(rank_).wakeup.wait_until(
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

  [[noreturn]] void timed_out(int peer, std::uint64_t target, const call_info& call,
                              clock::duration waited) {
    std::vector<int> missing;
    for (int q = 0; q < size(); ++q)
      if (slot_of(q).progress.load(std::memory_order_acquire) < seq_base(call.seq))
        missing.push_back(q);
    std::string msg = cat("meld::thread_comm rank ", rank_, ": ", call.str(), " timed out after ",
                          seconds_str(waited), " without progress: ");
    if (!missing.empty()) {
      msg += ranks_str(missing) + (missing.size() == 1 ? " never arrived" : " never arrived") +
             " (last collective entered:";
      for (std::size_t i = 0; i < missing.size(); ++i) {
        tc_slot& s = slot_of(missing[i]);
        std::lock_guard lock(s.last_mutex);
        msg += cat(i ? "; " : " ", "rank ", missing[i], ": ", s.last.str());
      }
      msg += ")";
    } else {
      const std::uint64_t p = slot_of(peer).progress.load(std::memory_order_acquire);
      msg += cat("every rank arrived, but rank ", peer, " stopped at step ", p - seq_base(call.seq),
                 " (waiting for step ", target - seq_base(call.seq), ")");
    }
    st_->abort(rank_, comm_error::reason::timeout, msg);
    throw comm_error(comm_error::reason::timeout, msg);
  }

  [[noreturn]] void throw_aborted(const call_info& call) const {
    std::lock_guard lock(st_->abort_mutex);
    if (st_->abort_rank == rank_) throw comm_error(st_->abort_reason, st_->abort_message);
    throw comm_error(st_->abort_reason,
                     cat("meld::thread_comm rank ", rank_, ": ", call.str(),
                         " failed: the group was aborted. ", st_->abort_message));
  }

  std::shared_ptr<tc_state> st_;
  int rank_;
  scratch_buffer scratch_;
};

}  // namespace meld::detail::distributed
