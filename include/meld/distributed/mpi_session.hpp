// mpi_session: initializes MPI for meld and finalizes it. Needs MPI (MELD_ENABLE_MPI).
//
//   int main(int argc, char** argv) {
//     meld::mpi_session mpi(argc, argv);            // MPI_Init_thread(MPI_THREAD_MULTIPLE)
//     meld::mpi_comm comm;                          // MPI_COMM_WORLD
//   }
#pragma once

#include <mpi.h>

#include "comm_error.hpp"

namespace meld {

/// Initializes MPI for meld (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) and finalizes it.
/// (Open MPI 4.1's MPI_Finalize returns even when a peer has died, with --enable-recovery.)
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
    if (owner_ && !finalized) MPI_Finalize();
  }

  /// The thread support MPI provides.
  int provided() const { return provided_; }

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
};

}  // namespace meld
