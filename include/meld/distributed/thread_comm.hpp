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
//
// Mismatched calls: a rank reads a neighbour's buffers only after comparing the neighbour's call
// (kind, count, element type, operation, root) with its own, and a barrier compares every
// rank's; a difference throws comm_error (reason mismatch) naming both calls and aborts the
// group, debug mode or not. Debug mode compares every rank's call before any data moves.
//
// Here: the public class and thread_group; the rings are in detail/thread_rings.hpp, the waiting
// and the failures in detail/thread_endpoint.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "collectives.hpp"
#include "communicator.hpp"
#include "detail/progress.hpp"
#include "detail/thread_endpoint.hpp"
#include "detail/thread_rings.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

class thread_group;

/// One rank of a thread_group: collectives among threads of this process, on shared memory.
class thread_comm : public collectives<thread_comm> {
 public:
  /// What the _async collectives return: wait() finishes the operation.
  using request = comm_request;

  thread_comm(const thread_comm&) = delete;
  thread_comm& operator=(const thread_comm&) = delete;

  /// This rank.
  int rank() const { return me_.rank(); }
  /// The number of ranks of the group.
  int size() const { return me_.size(); }
  /// The sequence number the next collective will get.
  std::uint64_t next_sequence() const { return seq_ + 1; }
  /// How long a collective waits for a peer before it throws comm_error.
  std::chrono::milliseconds timeout() const { return me_.options().timeout; }
  /// Whether collectives compare their descriptions across ranks first.
  bool debug() const { return me_.debug(); }

  // The collectives (allreduce, broadcast, reduce_scatter, allgather, barrier and their _async
  // forms) are collectives<thread_comm>'s: see collectives.hpp and communicator.hpp.

  /// Waits until every asynchronous collective this rank issued has completed (errors stay with
  /// their requests).
  void drain() { queue_.drain(); }

  /// Fails the whole group: every rank waiting in (or later entering) a collective throws
  /// comm_error naming this rank and the reason.
  void abort(const std::string& reason) { me_.abort(reason); }

 private:
  friend class thread_group;
  friend class collectives<thread_comm>;
  using call_info = detail::distributed::call_info;
  static constexpr const char* comm_name = "thread_comm";

  thread_comm(std::shared_ptr<detail::distributed::tc_state> st, int rank)
      : me_(std::move(st), rank) {}

  // ---- the collectives --------------------------------------------------------------------------

  template <class T>
  comm_request allreduce_impl(comm_buffer<T> buf, reduce_op op, bool async) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::allreduce,
                                                        static_cast<std::int64_t>(buf.size()), op);
    return detail::distributed::issue_on(
        queue_, me_, call, async, [this, buf, op](const call_info& c) {
          detail::distributed::ring_allreduce(me_, buf.data(), c, op);
        });
  }

  template <class T>
  comm_request broadcast_impl(comm_buffer<T> buf, int root, bool async) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::broadcast,
                                                        static_cast<std::int64_t>(buf.size()),
                                                        reduce_op::sum, root);
    return detail::distributed::issue_on(queue_, me_, call, async, [this, buf](const call_info& c) {
      detail::distributed::chain_broadcast(me_, buf.data(), c);
    });
  }

  template <class T>
  comm_request reduce_scatter_impl(comm_buffer<const T> in, comm_buffer<T> out, reduce_op op,
                                   bool async) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::reduce_scatter,
                                                        static_cast<std::int64_t>(out.size()), op);
    return detail::distributed::issue_on(
        queue_, me_, call, async, [this, in, out, op](const call_info& c) {
          detail::distributed::ring_reduce_scatter(me_, in.data(), out.data(), c, op);
        });
  }

  template <class T>
  comm_request allgather_impl(comm_buffer<const T> in, comm_buffer<T> out, bool async) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::allgather,
                                                        static_cast<std::int64_t>(in.size()));
    return detail::distributed::issue_on(
        queue_, me_, call, async, [this, in, out](const call_info& c) {
          detail::distributed::ring_allgather(me_, in.data(), out.data(), c);
        });
  }

  comm_request barrier_impl(bool async) {
    const auto call =
        detail::distributed::make_call<std::uint8_t>(++seq_, collective_kind::barrier, 0);
    return detail::distributed::issue_on(queue_, me_, call, async, [this](const call_info& c) {
      detail::distributed::arrive_all(me_, c);
    });
  }

  detail::distributed::thread_endpoint me_;
  std::uint64_t seq_ = 0;
  detail::distributed::progress_queue
      queue_;  // last: its thread stops before the rest is destroyed
};

/// k ranks of thread_comm in this process.
class thread_group {
 public:
  /// A group of `ranks` ranks (1 to 1024) with the given settings; throws std::invalid_argument
  /// outside that range.
  explicit thread_group(int ranks, const comm_options& options = {}) {
    if (ranks < 1 || ranks > detail::distributed::tc_max_ranks)
      throw std::invalid_argument(detail::cat("thread_group: ", ranks, " ranks (expected 1 .. ",
                                              detail::distributed::tc_max_ranks, ")"));
    state_ = std::make_shared<detail::distributed::tc_state>(ranks, options);
    for (int r = 0; r < ranks; ++r)
      comms_.push_back(std::unique_ptr<thread_comm>(new thread_comm(state_, r)));
  }
  thread_group(const thread_group&) = delete;
  thread_group& operator=(const thread_group&) = delete;

  /// The number of ranks.
  int size() const { return state_->size; }
  /// Rank r's communicator: only one thread at a time may use it.
  thread_comm& comm(int r) {
    if (r < 0 || r >= size())
      throw std::out_of_range(detail::cat("thread_group::comm: rank ", r, " of ", size()));
    return *comms_[static_cast<std::size_t>(r)];
  }
  /// How long a collective waits for a peer before it throws comm_error.
  std::chrono::milliseconds timeout() const { return state_->opts.timeout; }
  /// Whether a rank has aborted the group.
  bool aborted() const { return state_->aborted.load(std::memory_order_acquire); }

  /// Runs f(comm(r)) on k threads, one per rank, and returns when all have returned. If one
  /// throws, the group is aborted (so that no rank waits for it) and, once all have returned, the
  /// exception that caused the failure is rethrown (the others are consequences).
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

  /// Of the exceptions ranks threw, the one that caused the others: the first that is not a
  /// comm_error reporting an abort by another rank.
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
  std::shared_ptr<detail::distributed::tc_state> state_;
  std::vector<std::unique_ptr<thread_comm>> comms_;
};

static_assert(communicator<thread_comm>);

/// @}

}  // namespace meld