// A parameter-server soak and stress run under mpirun (3 processes: rank 0 serves, ranks 1 and 2
// work; see ps_soak.cmake). Keys of seeded random shapes (flat, 2-d, sliced over the servers or
// whole) take dense and sparse pushes of small whole numbers, so that the final values are exact
// whatever the order the servers applied them in; each worker checks them against a sequential
// reference it computes alone.
//
//   ps_soak MODE ROUNDS [--inflight N]      sync, stale:S or async; prints "final <checksum>";
//                                           worker 0 ends with N pulls in flight at once
//   ps_soak MODE ROUNDS --save K PATH --die   checkpoints after round K, then the server rank
//                                           kills itself (SIGKILL) a few rounds later
//   ps_soak MODE ROUNDS --resume K PATH     the servers restore PATH; the workers go on from
//                                           round K + 1
//
// Along the way every worker pauses for 1.5x the timeout (busy workers are no failure).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/mpi_comm.hpp>
#include <meld/distributed/param_server.hpp>

namespace {

using meld::index_t;

struct key_shape {
  index_t rows, cols;
  index_t size() const { return rows * cols; }
};

// The same keys on every rank: seeded.
std::vector<key_shape> make_keys() {
  std::mt19937_64 rng(7);
  std::vector<key_shape> keys;
  for (int k = 0; k < 12; ++k) {
    const index_t cols = 1 + static_cast<index_t>(rng() % 9);
    const index_t rows = 1 + static_cast<index_t>(rng() % 60);
    keys.push_back({rows, cols});
  }
  keys.push_back({1, 1});  // the small key of the in-flight pulls
  return keys;
}

// Worker w's push of round r to key k: the rows it touches (all: dense) and the values.
struct push_data {
  std::vector<index_t> rows;  // empty: dense
  std::vector<double> values;
};
push_data push_of(const key_shape& s, int k, int w, int r) {
  push_data p;
  std::mt19937_64 rng(static_cast<std::uint64_t>(k) * 1000003u +
                      static_cast<std::uint64_t>(w) * 7919u + static_cast<std::uint64_t>(r));
  const bool sparse = s.cols > 1 && rng() % 2;
  const index_t n =
      sparse ? 1 + static_cast<index_t>(rng() % static_cast<std::uint64_t>(s.rows)) : s.rows;
  for (index_t i = 0; sparse && i < n; ++i)
    p.rows.push_back(static_cast<index_t>(rng() % static_cast<std::uint64_t>(s.rows)));
  p.values.resize(static_cast<std::size_t>(n * s.cols));
  for (auto& v : p.values) v = static_cast<double>(rng() % 7) - 3;
  return p;
}

void apply(std::vector<double>& value, const key_shape& s, const push_data& p) {
  if (p.rows.empty()) {
    for (std::size_t i = 0; i < value.size(); ++i) value[i] += p.values[i];
    return;
  }
  for (std::size_t i = 0; i < p.rows.size(); ++i)
    for (index_t c = 0; c < s.cols; ++c)
      value[static_cast<std::size_t>(p.rows[i] * s.cols + c)] +=
          p.values[i * static_cast<std::size_t>(s.cols) + static_cast<std::size_t>(c)];
}

std::vector<double> initial(const key_shape& s, int k) {
  std::vector<double> v(static_cast<std::size_t>(s.size()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((i * 3 + static_cast<std::size_t>(k)) % 5);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  meld::mpi_session mpi(argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: ps_soak MODE ROUNDS [--save K PATH --die | --resume K PATH]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int rounds = std::atoi(argv[2]);
  int save_at = -1, resume_at = 0;
  long inflight = 0;
  bool die = false;
  std::string path;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--save" || a == "--resume") && i + 2 < argc) {
      (a == "--save" ? save_at : resume_at) = std::atoi(argv[i + 1]);
      path = argv[i + 2];
      i += 2;
    } else if (a == "--inflight" && i + 1 < argc) {
      inflight = std::atol(argv[++i]);
    } else if (a == "--die") {
      die = true;
    }
  }
  meld::ps_options o;
  o.servers = 1;
  o.mode = meld::ps_mode::parse(mode);
  o.timeout = std::chrono::seconds(2);
  o.slice_elements = 40;
  if (resume_at > 0) o.restore = path;
  int server_pid = static_cast<int>(getpid());
  MPI_Bcast(&server_pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  meld::param_server<double> ps(MPI_COMM_WORLD, o,
                                {[](const meld::ps_update<double>& u) {
                                   for (std::size_t i = 0; i < u.value.size(); ++i)
                                     u.value[i] += u.grad[i];
                                 },
                                 0});
  MPI_Comm workers;
  MPI_Comm_split(MPI_COMM_WORLD, ps.is_worker() ? 0 : MPI_UNDEFINED, ps.rank(), &workers);
  if (!ps.is_worker()) {
    try {
      ps.serve();
    } catch (const std::exception& e) {
      std::printf("server: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  const auto keys = make_keys();
  const int W = ps.workers(), w = ps.worker_index();
  // The reference: every worker's pushes of every round, applied in order.
  std::vector<std::vector<double>> want;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    want.push_back(initial(keys[k], static_cast<int>(k)));
    for (int r = 1; r <= rounds; ++r)
      for (int v = 0; v < W; ++v)
        apply(want.back(), keys[k], push_of(keys[k], static_cast<int>(k), v, r));
  }
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const auto v = initial(keys[k], static_cast<int>(k));
    ps.init(static_cast<int>(k), v, keys[k].cols > 1 ? keys[k].cols : 0).wait();
  }
  const int small = static_cast<int>(keys.size()) - 1;
  for (int r = 1; r <= rounds; ++r) {
    // Restored: the servers hold these rounds (and count this run's rounds from 1 again).
    if (r <= resume_at) continue;
    std::vector<meld::ps_handle> ops;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto p = push_of(keys[k], static_cast<int>(k), w, r);
      if (p.rows.empty())
        ops.push_back(ps.push(static_cast<int>(k), p.values));
      else
        ops.push_back(ps.push_rows(static_cast<int>(k), p.rows, p.values));
    }
    for (auto& h : ops) h.wait();
    {  // a pull a round keeps the workers within the mode's staleness of each other
      std::vector<double> v(static_cast<std::size_t>(keys[0].size()));
      ps.pull(0, v).wait();
    }
    if (r == rounds / 3) std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    if (r == save_at) {
      for (std::size_t k = 0; k < keys.size(); ++k) {  // sync: round K of every worker applied
        std::vector<double> v(static_cast<std::size_t>(keys[k].size()));
        ps.pull(static_cast<int>(k), v).wait();
      }
      MPI_Barrier(workers);
      if (w == 0) ps.checkpoint(path).wait();
      MPI_Barrier(workers);
      if (die && w == 0) std::printf("checkpointed %d\n", r);
    }
    if (die && r == save_at + 3) {  // the server dies with rounds after the checkpoint
      if (w == 0) {
        std::printf("killing the server\n");
        std::fflush(stdout);
        kill(server_pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::seconds(30));  // mpirun ends the job first
      return 5;
    }
  }
  // Every push applied (async and stale may lag): pull until the values equal the reference.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::uint64_t checksum = 0;
  bool ok = false;
  while (!ok && std::chrono::steady_clock::now() < deadline) {
    ok = true;
    checksum = 1469598103934665603ull;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      std::vector<double> v(static_cast<std::size_t>(keys[k].size()));
      ps.pull(static_cast<int>(k), v).wait();
      ok = ok && v == want[k];
      for (double x : v)
        checksum = (checksum ^ static_cast<std::uint64_t>(static_cast<std::int64_t>(x))) *
                   1099511628211ull;
    }
  }
  // Operations in flight at once, every push applied: each must see the final value.
  if (inflight > 0 && w == 0) {
    std::vector<double> out(static_cast<std::size_t>(inflight), std::nan(""));
    std::vector<meld::ps_handle> pulls;
    pulls.reserve(out.size());
    for (std::size_t i = 0; i < out.size(); ++i)
      pulls.push_back(ps.pull(small, std::span<double>(&out[i], 1)));
    for (auto& h : pulls) h.wait();
    for (double x : out)
      if (x != want.back()[0]) {
        std::printf("worker 0: a pull in flight came back with %g, not %g\n", x, want.back()[0]);
        return 4;
      }
  }
  // Together: a close waits at most twice the timeout for the other workers to close.
  MPI_Barrier(workers);
  ps.close();
  MPI_Comm_free(&workers);
  std::printf("worker %d: final %016llx %s\n", w, static_cast<unsigned long long>(checksum),
              ok ? "equals the reference" : "DIFFERS from the reference");
  return ok ? 0 : 3;
}
