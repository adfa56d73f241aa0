// main() for the MPI tests: MPI is initialized around the Catch2 session. Every rank runs the
// same test cases in the same order; a failure on one rank makes the others time out in their
// next collective (short timeouts), so a run never hangs.
#include <meld/distributed/mpi_comm.hpp>

#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
  meld::mpi_session mpi(argc, argv);
  return Catch::Session().run(argc, argv) ? 1 : 0;
}
