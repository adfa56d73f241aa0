// mpi_comm: a communicator over MPI processes (one rank per process), for one machine or many,
// launched with mpirun. Needs MPI (Open MPI: libopenmpi-dev, openmpi-bin) and MELD_ENABLE_MPI.
//
//   int main(int argc, char** argv) {
//     meld::mpi_session mpi(argc, argv);            // MPI_Init_thread(MPI_THREAD_MULTIPLE)
//     meld::mpi_comm comm;                          // MPI_COMM_WORLD
//     comm.allreduce(grads);
//   }
//
// How it works:
//   * The communicator duplicates the one it is given twice (with MPI_Comm_idup, under the
//     timeout): one for data, one for control messages, so that neither mixes with the user's.
//   * allreduce is a pipelined ring (reduce-scatter then allgather) over non-blocking
//     point-to-point messages, with the sums done by meld's SIMD evaluation: the bandwidth-optimal
//     algorithm, and one whose result has the same bits on every rank and in every run (every
//     chunk is reduced once, in a fixed order, then copied). `native_allreduce` uses
//     MPI_Iallreduce instead. The other collectives are MPI's non-blocking ones (MPI_Ibcast,
//     MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibarrier).
//   * Nothing blocks inside MPI: every request is polled (MPI_Test*) against a deadline, with a
//     back-off from spinning to short sleeps. A wait that sees no progress for `timeout` (default
//     10 minutes, comm_options or MELD_COMM_TIMEOUT) throws comm_error.
//   * Each collective starts by sending its description (sequence, operation, element type,
//     count, root) to every peer on the control communicator. On a timeout, the peers whose
//     description for this collective never came are the ones named as missing, with the last
//     collective each was seen in. In debug mode the descriptions are compared before any data
//     moves, and a mismatch throws comm_error naming every rank's call. (This costs 2 (P - 1)
//     small messages per collective: a few microseconds for a handful of ranks.)
//   * A rank that fails (a timeout, or abort()) sends an abort notice to every peer: collectives
//     waiting there throw comm_error at once, naming the rank and the reason. A communicator that
//     failed refuses new collectives, and its destructor does not free MPI resources that could
//     wait for dead peers. The process should then end: std::exit or MPI_Abort.
//   * Asynchronous collectives run, in issue order, on a progress thread that polls MPI; so
//     MPI must be initialized with MPI_THREAD_SERIALIZED at least (mpi_session asks for
//     MPI_THREAD_MULTIPLE). Below MULTIPLE, meld serializes its own MPI calls.
//
// A process killed by a signal: Open MPI's mpirun (4.1) then ends the whole job at once, the
// survivors included, and reports which rank died. With `mpirun --enable-recovery` the survivors
// keep running, and their pending collective throws comm_error naming the dead rank within
// about the timeout (tests/distributed/mpi_sigkill.cmake checks both behaviours).
//
// Here: the public class; mpi_session is in mpi_session.hpp, the control protocol (descriptions,
// polling under the timeout, aborts) in detail/mpi_endpoint.hpp, the ring in detail/mpi_ring.hpp.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "buffer.hpp"
#include "communicator.hpp"
#include "detail/mpi_endpoint.hpp"
#include "detail/mpi_ring.hpp"
#include "detail/progress.hpp"
#include "mpi_session.hpp"

namespace meld {

struct mpi_comm_options : comm_options {
  // allreduce with MPI_Iallreduce instead of meld's ring.
  bool native_allreduce = false;
};

class mpi_comm {
 public:
  using request = comm_request;

  explicit mpi_comm(MPI_Comm comm = MPI_COMM_WORLD, const mpi_comm_options& options = {})
      : ep_(comm, detail::dist::resolve(options, std::chrono::minutes(10), std::size_t(1) << 20)),
        native_allreduce_(options.native_allreduce) {}

  mpi_comm(const mpi_comm&) = delete;
  mpi_comm& operator=(const mpi_comm&) = delete;

  int rank() const { return ep_.rank(); }
  int size() const { return ep_.size(); }
  std::uint64_t next_sequence() const { return seq_ + 1; }
  std::chrono::milliseconds timeout() const { return ep_.options().timeout; }
  bool debug() const { return ep_.options().debug; }
  // The duplicated communicator meld's data moves on.
  MPI_Comm native() const { return ep_.data(); }

  // ---- collectives (see communicator.hpp)
  // --------------------------------------------------------

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

  void drain() { queue_.drain(); }

  // Fails this communicator and tells every peer (their pending collectives throw comm_error
  // naming this rank and the reason).
  void abort(const std::string& reason) {
    ep_.fail(comm_error::reason::aborted, detail::cat("rank ", rank(), " aborted: ", reason));
  }

  // Whether this communicator has failed, and why.
  bool failed() const { return ep_.failed(); }

 private:
  using call_info = detail::dist::call_info;

  template <class T>
  static std::span<const T> const_span(std::span<T> s) {
    return std::span<const T>(s.data(), s.size());
  }

  template <class F>
  comm_request issue(const call_info& call, bool async, F body) {
    auto job = [this, call, body]() mutable { ep_.run(call, body); };
    if (async) return comm_request(queue_.submit(std::move(job)));
    queue_.run(job);
    return {};
  }

  template <class T>
  comm_request allreduce_impl(std::span<T> buf, reduce_op op, bool async) {
    static_assert(detail::dist::comm_element<T> && !std::is_const_v<T>,
                  "mpi_comm::allreduce: the buffer must be mutable float, double, int32 or int64");
    detail::dist::mpi_endpoint::checked_count(buf.size(), "allreduce");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::allreduce,
                                                 static_cast<std::int64_t>(buf.size()), op);
    return issue(call, async, [this, buf, op](const call_info& c) {
      if (native_allreduce_ || size() == 1) {
        ep_.complete("MPI_Iallreduce", c, [&](MPI_Request* r) {
          return MPI_Iallreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()),
                                detail::dist::mpi_type<T>(), detail::dist::mpi_op(op), ep_.data(),
                                r);
        });
      } else {
        detail::dist::ring_allreduce(ep_, buf.data(), c, op);
      }
    });
  }

  template <class T>
  comm_request broadcast_impl(std::span<T> buf, int root, bool async) {
    static_assert(detail::dist::comm_element<T> && !std::is_const_v<T>,
                  "mpi_comm::broadcast: the buffer must be mutable");
    if (root < 0 || root >= size())
      throw std::invalid_argument(
          detail::cat("mpi_comm::broadcast: root ", root, " is not a rank of ", size()));
    const int n = detail::dist::mpi_endpoint::checked_count(buf.size(), "broadcast");
    const auto call =
        detail::dist::make_call<T>(++seq_, collective_kind::broadcast, n, reduce_op::sum, root);
    return issue(call, async, [this, buf, n, root](const call_info& c) {
      ep_.complete("MPI_Ibcast", c, [&](MPI_Request* r) {
        return MPI_Ibcast(buf.data(), n, detail::dist::mpi_type<T>(), root, ep_.data(), r);
      });
    });
  }

  template <class T>
  comm_request reduce_scatter_impl(std::span<const T> in, std::span<T> out, reduce_op op,
                                   bool async) {
    static_assert(detail::dist::comm_element<T>, "mpi_comm::reduce_scatter: element type");
    if (in.size() != out.size() * static_cast<std::size_t>(size()))
      throw shape_error(detail::cat("mpi_comm::reduce_scatter: the input has ", in.size(),
                                    " elements, expected ", size(), " ranks x ", out.size(),
                                    " (the output's size)"));
    detail::dist::mpi_endpoint::checked_count(in.size(), "reduce_scatter");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::reduce_scatter,
                                                 static_cast<std::int64_t>(out.size()), op);
    return issue(call, async, [this, in, out, op](const call_info& c) {
      ep_.complete("MPI_Ireduce_scatter_block", c, [&](MPI_Request* r) {
        return MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(out.size()),
                                         detail::dist::mpi_type<T>(), detail::dist::mpi_op(op),
                                         ep_.data(), r);
      });
    });
  }

  template <class T>
  comm_request allgather_impl(std::span<const T> in, std::span<T> out, bool async) {
    static_assert(detail::dist::comm_element<T>, "mpi_comm::allgather: element type");
    if (out.size() != in.size() * static_cast<std::size_t>(size()))
      throw shape_error(detail::cat("mpi_comm::allgather: the output has ", out.size(),
                                    " elements, expected ", size(), " ranks x ", in.size(),
                                    " (the input's size)"));
    detail::dist::mpi_endpoint::checked_count(out.size(), "allgather");
    const auto call = detail::dist::make_call<T>(++seq_, collective_kind::allgather,
                                                 static_cast<std::int64_t>(in.size()));
    return issue(call, async, [this, in, out](const call_info& c) {
      ep_.complete("MPI_Iallgather", c, [&](MPI_Request* r) {
        return MPI_Iallgather(in.data(), static_cast<int>(in.size()), detail::dist::mpi_type<T>(),
                              out.data(), static_cast<int>(in.size()), detail::dist::mpi_type<T>(),
                              ep_.data(), r);
      });
    });
  }

  comm_request barrier_impl(bool async) {
    const auto call = detail::dist::make_call<std::uint8_t>(++seq_, collective_kind::barrier, 0);
    return issue(call, async, [this](const call_info& c) {
      ep_.complete("MPI_Ibarrier", c, [&](MPI_Request* r) { return MPI_Ibarrier(ep_.data(), r); });
    });
  }

  // The endpoint outlives the progress thread (queue_, declared after it, stops first): a
  // collective still queued runs against a live endpoint.
  detail::dist::mpi_endpoint ep_;
  bool native_allreduce_;
  std::uint64_t seq_ = 0;
  detail::dist::progress_queue queue_;  // last: its thread stops first
};

}  // namespace meld
