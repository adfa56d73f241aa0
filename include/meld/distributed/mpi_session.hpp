// mpi_session: initializes MPI for meld and finalizes it. Needs MPI (MELD_ENABLE_MPI).
//
//   int main(int argc, char** argv) {
//     meld::mpi_session mpi(argc, argv);            // MPI_Init_thread(MPI_THREAD_MULTIPLE)
//     try {
//       meld::mpi_comm comm;                        // MPI_COMM_WORLD
//       ...
//     } catch (const std::exception& e) {
//       std::fprintf(stderr, "error: %s\n", e.what());   // first report,
//       mpi.abort(1);                               // then end the job (or return: finalize)
//     }
//   }
//
// Keep the session outside the try block, so that an error is reported before MPI ends: after a
// collective failed, MPI_Finalize can crash or hang (Open MPI 4.1 was seen to segfault in it),
// and the message would be lost with it. For the same reason a session destroyed while an
// exception propagates after a communicator failed does not finalize: the exception reaches its
// handler, and the process ends without MPI_Finalize (mpirun then reports that it did).
#pragma once

#include <mpi.h>

#include <atomic>
#include <exception>

#include "comm_error.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

namespace detail::distributed {
// Set once any mpi_comm of this process has failed (a timeout, a mismatch, an abort, an MPI error).
inline std::atomic<bool>& mpi_failed() {
  static std::atomic<bool> failed{false};
  return failed;
}
}  // namespace detail::distributed

/// Initializes MPI for meld (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) and finalizes it.
/// (Open MPI 4.1's MPI_Finalize, with --enable-recovery, usually returns after a peer has died,
/// but can wait for it: 1 run in 5 - 7 of tests/distributed/mpi_sigkill.cpp with both cores busy.
/// After a lost peer, end with abort(), or without MPI_Finalize, as that program does.)
class mpi_session {
 public:
  /// Initializes MPI asking for thread support `required` (see provided()); throws comm_error when
  /// MPI_Init_thread fails. When MPI is already initialized it does nothing and finalizes nothing.
  mpi_session(int& argc, char**& argv, int required = MPI_THREAD_MULTIPLE) {
    init(&argc, &argv, required);
  }
  mpi_session() { init(nullptr, nullptr, MPI_THREAD_MULTIPLE); }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;
  ~mpi_session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!owner_ || finalized) return;
    // Unwinding after a failed collective: finalizing now could crash before the exception is
    // reported (see the top of this file).
    if (std::uncaught_exceptions() > uncaught_ && detail::distributed::mpi_failed().load()) return;
    MPI_Finalize();
  }

  /// The thread support MPI provides.
  int provided() const { return provided_; }

  /// Ends every process of the job with `code` (MPI_Abort on MPI_COMM_WORLD): what a program does
  /// after reporting an error that its peers may not have seen, instead of finalizing.
  [[noreturn]] void abort(int code) const {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::terminate();  // (MPI_Abort does not return)
  }

 private:
  void init(int* argc, char*** argv, int required) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&provided_);
      return;
    }
    owner_ = true;
    if (MPI_Init_thread(argc, argv, required, &provided_) != MPI_SUCCESS)
      throw comm_error(comm_error::reason::backend, "mpi_session: MPI_Init_thread failed");
  }
  int provided_ = 0;
  bool owner_ = false;
  int uncaught_ = std::uncaught_exceptions();
};

/// @}

}  // namespace meld
