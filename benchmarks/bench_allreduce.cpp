// Allreduce bandwidth, reported as nccl-tests report it: for each message size, the time of one
// allreduce (median over repetitions of the mean over a timed loop), algbw = bytes / time and
// busbw = algbw * 2 (n - 1) / n (GB = 10^9 bytes), and #wrong: elements that differ from the
// exact result in a separate checked run.
//
//   bench_allreduce threads [ranks...]      thread_comm with 2 and 4 ranks (default), against a
//                                           single-thread memcpy of the same size
//   mpirun -np N bench_allreduce mpi        mpi_comm (meld's ring), mpi_comm with
//                                           MPI_Iallreduce, and MPI_Allreduce called directly
// Options: --min BYTES --max BYTES (default 4 KiB .. 256 MiB), --reps N (default 5).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <meld/distributed/thread_comm.hpp>
#if defined(MELD_ENABLE_MPI)
#include <meld/distributed/mpi_comm.hpp>
#endif

namespace {

using clk = std::chrono::steady_clock;

struct settings {
  std::size_t min_bytes = 4 << 10, max_bytes = std::size_t(256) << 20;
  int reps = 5;
};

// Iterations of the timed loop: about 0.2 s of work per repetition at 1 GB/s, 2..200.
int iterations(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t(200) << 20) / bytes, 2, 200));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rank r's element i: (r + 1) * (i % 13 + 1). The sum over n ranks is exact in float.
void fill_pattern(std::vector<float>& v, int rank) {
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 13 + 1));
}
long count_wrong(const std::vector<float>& v, int ranks) {
  long wrong = 0;
  const int total = ranks * (ranks + 1) / 2;
  for (std::size_t i = 0; i < v.size(); ++i)
    wrong += v[i] != static_cast<float>(total * static_cast<int>(i % 13 + 1));
  return wrong;
}

void header(const char* title, const char* extra = "") {
  std::printf("# %s\n#%11s %11s %6s %6s %10s %8s %8s %7s%s\n", title, "size(B)", "count", "type",
              "redop", "time(us)", "algbw", "busbw", "#wrong", extra);
}

void row(std::size_t bytes, double seconds, int ranks, long wrong, const std::string& extra = "") {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
  std::printf(" %11zu %11zu %6s %6s %10.1f %8.3f %8.3f %7ld%s\n", bytes, bytes / 4, "float", "sum",
              seconds * 1e6, algbw, busbw, wrong, extra.c_str());
  std::fflush(stdout);
}

// Single-thread memcpy bandwidth (bytes copied per second) at this size: the reference for
// thread_comm, which moves data with copies and SIMD sums in shared memory.
double memcpy_seconds(std::size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int iters = iterations(bytes);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clk::now();
    for (int i = 0; i < iters; ++i) {
      std::memcpy(b.data(), a.data(), bytes);
      asm volatile("" ::"r"(b.data()) : "memory");
    }
    t.push_back(std::chrono::duration<double>(clk::now() - t0).count() / iters);
  }
  return median(t);
}

void run_threads(const settings& s, const std::vector<int>& rank_counts) {
  for (int k : rank_counts) {
    meld::thread_group group(k);
    header(
        meld::detail::cat("thread_comm allreduce, ", k, " ranks (threads of one process)").c_str(),
        "   memcpy  busbw/memcpy");
    for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= 4) {
      const std::size_t n = bytes / 4;
      std::vector<std::vector<float>> bufs(static_cast<std::size_t>(k), std::vector<float>(n));
      // Checked run.
      group.run([&](meld::thread_comm& c) {
        auto& b = bufs[static_cast<std::size_t>(c.rank())];
        fill_pattern(b, c.rank());
        c.allreduce(b);
      });
      long wrong = 0;
      for (const auto& b : bufs) wrong += count_wrong(b, k);
      // Timed runs on zeros (repeated sums in place would overflow any other values).
      const int iters = iterations(bytes);
      std::vector<double> times;
      group.run([&](meld::thread_comm& c) {
        auto& b = bufs[static_cast<std::size_t>(c.rank())];
        std::fill(b.begin(), b.end(), 0.f);
        c.allreduce(b);  // warm-up
        for (int r = 0; r < s.reps; ++r) {
          c.barrier();
          const auto t0 = clk::now();
          for (int i = 0; i < iters; ++i) c.allreduce(b);
          c.barrier();
          if (c.rank() == 0)
            times.push_back(std::chrono::duration<double>(clk::now() - t0).count() / iters);
        }
      });
      const double t = median(times);
      const double mc = static_cast<double>(bytes) / memcpy_seconds(bytes, s.reps) / 1e9;
      const double busbw = static_cast<double>(bytes) / t / 1e9 * 2.0 * (k - 1) / k;
      row(bytes, t, k, wrong, meld::detail::cat("   ", mc, "  ", busbw / mc));
    }
    std::printf("\n");
  }
}

#if defined(MELD_ENABLE_MPI)
void run_mpi(const settings& s) {
  meld::mpi_comm ring(MPI_COMM_WORLD);
  meld::mpi_comm_options native_options;
  native_options.native_allreduce = true;
  meld::mpi_comm native(MPI_COMM_WORLD, native_options);
  const int k = ring.size(), rank = ring.rank();
  if (rank == 0) {
    std::printf(
        "# mpi_comm allreduce, %d processes: meld's ring (mpi_comm), mpi_comm with "
        "MPI_Iallreduce (native), and MPI_Allreduce called directly (raw)\n",
        k);
    std::printf("#%11s %11s %10s %8s %7s %10s %8s %10s %8s %7s %10s\n", "size(B)", "count",
                "ring(us)", "busbw", "#wrong", "native(us)", "busbw", "raw(us)", "busbw", "#wrong",
                "ring/raw");
  }
  for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= 4) {
    const std::size_t n = bytes / 4;
    std::vector<float> b(n);
    long wrong[2] = {0, 0};
    fill_pattern(b, rank);
    ring.allreduce(b);
    wrong[0] = count_wrong(b, k);
    fill_pattern(b, rank);
    MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    wrong[1] = count_wrong(b, k);
    std::fill(b.begin(), b.end(), 0.f);
    const int iters = iterations(bytes);
    std::vector<double> t[3];
    // The three variants interleaved, so that drift on a shared machine hits them alike.
    for (int r = 0; r < s.reps; ++r) {
      for (int v = 0; v < 3; ++v) {
        auto once = [&] {
          if (v == 0)
            ring.allreduce(b);
          else if (v == 1)
            native.allreduce(b);
          else
            MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
        };
        once();  // warm-up
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = clk::now();
        for (int i = 0; i < iters; ++i) once();
        double dt = std::chrono::duration<double>(clk::now() - t0).count() / iters;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[v].push_back(dt);
      }
    }
    long all_wrong[2];
    MPI_Allreduce(wrong, all_wrong, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      auto bus = [&](double sec) {
        return static_cast<double>(bytes) / sec / 1e9 * 2.0 * (k - 1) / k;
      };
      const double a = median(t[0]), b2 = median(t[1]), c = median(t[2]);
      std::printf(" %11zu %11zu %10.1f %8.3f %7ld %10.1f %8.3f %10.1f %8.3f %7ld %10.3f\n", bytes,
                  n, a * 1e6, bus(a), all_wrong[0], b2 * 1e6, bus(b2), c * 1e6, bus(c),
                  all_wrong[1], a / c);
      std::fflush(stdout);
    }
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  settings s;
  std::string mode = "threads";
  std::vector<int> ranks;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--min" && i + 1 < argc)
      s.min_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--max" && i + 1 < argc)
      s.max_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc)
      s.reps = std::atoi(argv[++i]);
    else if (a == "threads" || a == "mpi")
      mode = a;
    else
      ranks.push_back(std::atoi(a.c_str()));
  }
  if (ranks.empty()) ranks = {2, 4};
  if (mode == "threads") {
    meld::set_num_threads(1);  // each rank is one thread: no pool threads besides
    run_threads(s, ranks);
    return 0;
  }
#if defined(MELD_ENABLE_MPI)
  meld::mpi_session mpi(argc, argv);
  meld::set_num_threads(1);
  run_mpi(s);
  return 0;
#else
  std::fprintf(stderr, "bench_allreduce: built without MPI (MELD_ENABLE_MPI)\n");
  return 1;
#endif
}
