// Link latency and bandwidth between ranks 0 and 1 (MPI, the inputs of docs/scaling.md's model):
// for each message size, the median over REPS repetitions of the mean time of a timed loop of
//   one-way   half a round trip of a ping-pong (MPI_Send / MPI_Recv): the link idle in between
//   exchange  both ranks sending n bytes to each other at once (MPI_Sendrecv), back to back, as
//             a two-rank ring allreduce's steps do: both directions and both hosts busy
// and the bandwidth each gives (n / time, per direction).
//   mpirun -np 2 pingpong [--min BYTES] [--max BYTES] [--reps N]   (defaults 8 B .. 4 MiB, 5)
// Prints `bytes one_way_us MB_per_s exchange_us MB_per_s` rows; other ranks wait at barriers.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long min_bytes = 8, max_bytes = 4L << 20;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--min")) min_bytes = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max")) max_bytes = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "pingpong: needs 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<char> buf(static_cast<std::size_t>(max_bytes), 1), in(buf.size());
  if (rank == 0)
    std::printf("# %10s %12s %10s %12s %10s\n", "bytes", "one_way_us", "MB_per_s", "exchange_us",
                "MB_per_s");
  for (long n = min_bytes; n <= max_bytes; n *= 4) {
    // About 50 ms per repetition at 100 MB/s: 4 .. 1000 round trips.
    const int iters = static_cast<int>(std::clamp(2500000L / n, 4L, 1000L));
    std::vector<double> t, x;
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters && rank < 2; ++i) {
        const int peer = 1 - rank, count = static_cast<int>(n);
        if (rank == 0) {
          MPI_Send(buf.data(), count, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), count, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf.data(), count, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), count, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
        }
      }
      t.push_back((MPI_Wtime() - t0) / iters / 2);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t1 = MPI_Wtime();
      for (int i = 0; i < iters && rank < 2; ++i)
        MPI_Sendrecv(buf.data(), static_cast<int>(n), MPI_CHAR, 1 - rank, 1, in.data(),
                     static_cast<int>(n), MPI_CHAR, 1 - rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      x.push_back((MPI_Wtime() - t1) / iters);
    }
    std::sort(t.begin(), t.end());
    std::sort(x.begin(), x.end());
    const double s = t[t.size() / 2], e = x[x.size() / 2];
    if (rank == 0)
      std::printf("  %10ld %12.1f %10.1f %12.1f %10.1f\n", n, s * 1e6,
                  static_cast<double>(n) / s / 1e6, e * 1e6, static_cast<double>(n) / e / 1e6);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
