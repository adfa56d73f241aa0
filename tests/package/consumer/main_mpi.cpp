// Built against meld::mpi: MPI's headers and MELD_ENABLE_MPI come with the target.
#include <mpi.h>

#include <cstdio>
#include <meld/version.hpp>

#ifndef MELD_ENABLE_MPI
#error "meld::mpi did not define MELD_ENABLE_MPI"
#endif

int main() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(library, &length);
  std::printf("consumer_mpi ok: meld %s with MPI %d.%d\n", MELD_VERSION_STRING, MPI_VERSION,
              MPI_SUBVERSION);
  return length > 0 ? 0 : 1;
}
