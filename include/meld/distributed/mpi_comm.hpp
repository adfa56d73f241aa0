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

#include "collectives.hpp"
#include "communicator.hpp"
#include "detail/mpi_endpoint.hpp"
#include "detail/mpi_ring.hpp"
#include "detail/progress.hpp"
#include "mpi_session.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// Settings of mpi_comm.
struct mpi_comm_options : comm_options {
  /// allreduce with MPI_Iallreduce instead of meld's ring.
  bool native_allreduce = false;
};

/// A communicator over the processes of an MPI communicator (run under mpirun; MPI initialized with
/// MPI_THREAD_MULTIPLE, e.g. by meld::mpi_session). Collectives are polled against deadlines, so a
/// rank that never arrives makes the others throw comm_error naming it instead of hanging.
class mpi_comm : public collectives<mpi_comm> {
 public:
  /// What the _async collectives return: wait() finishes the operation.
  using request = comm_request;

  /// A communicator over comm (duplicated: meld's traffic never mixes with the caller's).
  explicit mpi_comm(MPI_Comm comm = MPI_COMM_WORLD, const mpi_comm_options& options = {})
      : ep_(comm,
            detail::distributed::resolve(options, std::chrono::minutes(10), std::size_t(1) << 20)),
        native_allreduce_(options.native_allreduce) {}

  mpi_comm(const mpi_comm&) = delete;
  mpi_comm& operator=(const mpi_comm&) = delete;

  /// This process's rank.
  int rank() const { return ep_.rank(); }
  /// The number of ranks.
  int size() const { return ep_.size(); }
  /// The sequence number the next collective will get.
  std::uint64_t next_sequence() const { return seq_ + 1; }
  /// How long a collective waits for a peer before it throws comm_error.
  std::chrono::milliseconds timeout() const { return ep_.options().timeout; }
  /// Whether collectives compare their descriptions across ranks first.
  bool debug() const { return ep_.options().debug; }
  /// The duplicated communicator meld's data moves on.
  MPI_Comm native() const { return ep_.data(); }

  // The collectives (allreduce, broadcast, reduce_scatter, allgather, barrier and their _async
  // forms) are collectives<mpi_comm>'s: see collectives.hpp and communicator.hpp.

  /// Waits until every asynchronous collective this rank issued has completed.
  void drain() { queue_.drain(); }

  /// Fails this communicator and tells every peer (their pending collectives throw comm_error
  /// naming this rank and the reason).
  void abort(const std::string& reason) {
    ep_.fail(comm_error::reason::aborted, detail::cat("rank ", rank(), " aborted: ", reason));
  }

  /// Whether this communicator has failed, and why.
  bool failed() const { return ep_.failed(); }

 private:
  friend class collectives<mpi_comm>;
  using call_info = detail::distributed::call_info;
  static constexpr const char* comm_name = "mpi_comm";

  template <class T>
  comm_request allreduce_impl(comm_buffer<T> buf, reduce_op op, bool async) {
    detail::distributed::mpi_endpoint::checked_count(buf.size(), "allreduce");
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::allreduce,
                                                        static_cast<std::int64_t>(buf.size()), op);
    return detail::distributed::issue_on(
        queue_, ep_, call, async, [this, buf, op](const call_info& c) {
          if (native_allreduce_ || size() == 1) {
            ep_.complete("MPI_Iallreduce", c, [&](MPI_Request* r) {
              return MPI_Iallreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()),
                                    detail::distributed::mpi_type<T>(),
                                    detail::distributed::mpi_op(op), ep_.data(), r);
            });
          } else {
            detail::distributed::ring_allreduce(ep_, buf.data(), c, op);
          }
        });
  }

  template <class T>
  comm_request broadcast_impl(comm_buffer<T> buf, int root, bool async) {
    const int n = detail::distributed::mpi_endpoint::checked_count(buf.size(), "broadcast");
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::broadcast, n,
                                                        reduce_op::sum, root);
    return detail::distributed::issue_on(
        queue_, ep_, call, async, [this, buf, n, root](const call_info& c) {
          ep_.complete("MPI_Ibcast", c, [&](MPI_Request* r) {
            return MPI_Ibcast(buf.data(), n, detail::distributed::mpi_type<T>(), root, ep_.data(),
                              r);
          });
        });
  }

  template <class T>
  comm_request reduce_scatter_impl(comm_buffer<const T> in, comm_buffer<T> out, reduce_op op,
                                   bool async) {
    detail::distributed::mpi_endpoint::checked_count(in.size(), "reduce_scatter");
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::reduce_scatter,
                                                        static_cast<std::int64_t>(out.size()), op);
    return detail::distributed::issue_on(
        queue_, ep_, call, async, [this, in, out, op](const call_info& c) {
          ep_.complete("MPI_Ireduce_scatter_block", c, [&](MPI_Request* r) {
            return MPI_Ireduce_scatter_block(in.data(), out.data(), static_cast<int>(out.size()),
                                             detail::distributed::mpi_type<T>(),
                                             detail::distributed::mpi_op(op), ep_.data(), r);
          });
        });
  }

  template <class T>
  comm_request allgather_impl(comm_buffer<const T> in, comm_buffer<T> out, bool async) {
    detail::distributed::mpi_endpoint::checked_count(out.size(), "allgather");
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::allgather,
                                                        static_cast<std::int64_t>(in.size()));
    return detail::distributed::issue_on(
        queue_, ep_, call, async, [this, in, out](const call_info& c) {
          ep_.complete("MPI_Iallgather", c, [&](MPI_Request* r) {
            return MPI_Iallgather(in.data(), static_cast<int>(in.size()),
                                  detail::distributed::mpi_type<T>(), out.data(),
                                  static_cast<int>(in.size()), detail::distributed::mpi_type<T>(),
                                  ep_.data(), r);
          });
        });
  }

  comm_request barrier_impl(bool async) {
    const auto call =
        detail::distributed::make_call<std::uint8_t>(++seq_, collective_kind::barrier, 0);
    return detail::distributed::issue_on(queue_, ep_, call, async, [this](const call_info& c) {
      ep_.complete("MPI_Ibarrier", c, [&](MPI_Request* r) { return MPI_Ibarrier(ep_.data(), r); });
    });
  }

  // The endpoint outlives the progress thread (queue_, declared after it, stops first): a
  // collective still queued runs against a live endpoint.
  detail::distributed::mpi_endpoint ep_;
  bool native_allreduce_;
  std::uint64_t seq_ = 0;
  detail::distributed::progress_queue queue_;  // last: its thread stops first
};

static_assert(communicator<mpi_comm>);

/// @}

}  // namespace meld
