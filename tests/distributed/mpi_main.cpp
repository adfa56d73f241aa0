// main() for the MPI tests: MPI is initialized around the Catch2 session. Every rank runs the
// same test cases in the same order; a failure on one rank makes the others time out in their
// next collective (short timeouts), so a run never hangs.
#include <meld/distributed/mpi_comm.hpp>

int meld_catch_session(int argc, char** argv);  // catch_runner.cpp

int main(int argc, char** argv) {
  meld::mpi_session mpi(argc, argv);
  return meld_catch_session(argc, argv) ? 1 : 0;
}
