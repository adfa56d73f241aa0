// Run by cluster_test.sh under mpirun on a cluster of namespaces (scripts/cluster.sh): every rank
// allreduces 1 MB again and again, checking the sums, until a collective fails. The driver kills
// a host or takes its link down once rank 0 has printed the "running" marker; each rank that sees
// the failure must then print one comm_error line naming the lost rank, for the driver to check.
//
//   cluster_fault TIMEOUT_S    the communicator's timeout, in seconds
//   cluster_fault TIMEOUT_S ps a meld::param_server instead: ranks 0 and 1 serve a 1 MB key
//                              sliced over both, the other ranks push and pull it (a server's
//                              timeout of TIMEOUT_S / 2, so that a worker waits TIMEOUT_S)
//
// Prints "rank R of P on HOST" at the start (the driver checks that every rank runs on its own
// host), "running" once rank 0 is mid-run, "rank R: comm_error after S s: MESSAGE" where S is the
// time since the failed collective began. Ends the job (MPI_Abort, code 4) twice the timeout
// after a comm_error; exits 2 if none came within a minute, 3 on a wrong sum.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/mpi_comm.hpp>
#include <meld/distributed/param_server.hpp>

namespace {

// The parameter-server form: the workers push and pull until an operation fails.
int parameter_server(meld::mpi_session& mpi, double timeout_s) {
  meld::ps_options o;
  o.servers = 2;
  o.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 500));
  meld::param_server<float> ps(MPI_COMM_WORLD, o, meld::ps_sgd<float>(0.01f));
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("rank %d of %d on %s\n", ps.rank(), size, host);
  std::fflush(stdout);
  if (!ps.is_worker()) {
    try {
      ps.serve();
    } catch (const meld::comm_error& e) {
      std::printf("rank %d: server error: %s\n", ps.rank(), e.what());
      std::fflush(stdout);
    }
    return 0;
  }
  std::vector<float> w(1 << 18, 1.f), g(1 << 18, 0.5f);  // sliced over both servers
  ps.init(0, w).wait();
  const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (long step = 0; std::chrono::steady_clock::now() < end; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      ps.push(0, g).wait();
      ps.pull(0, w).wait();
    } catch (const meld::comm_error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("rank %d: comm_error after %.3f s: %s\n", ps.rank(), s, e.what());
      std::fflush(stdout);
      std::this_thread::sleep_for(4 * o.timeout);  // as below: then end the job
      mpi.abort(4);
    }
    if (step == 3 && ps.worker_index() == 0) {
      std::printf("running\n");
      std::fflush(stdout);
    }
  }
  std::printf("rank %d: no error within a minute\n", ps.rank());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  meld::mpi_session mpi(argc, argv);
  const double timeout_s = argc > 1 ? std::atof(argv[1]) : 2.0;
  if (argc > 2 && std::string(argv[2]) == "ps") return parameter_server(mpi, timeout_s);
  meld::mpi_comm_options o;
  o.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  meld::mpi_comm comm(MPI_COMM_WORLD, o);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("rank %d of %d on %s\n", comm.rank(), comm.size(), host);
  std::fflush(stdout);

  const int p = comm.size();
  const float expected = static_cast<float>(p * (p + 1) / 2);  // the sum of rank + 1
  std::vector<float> buf(1 << 18);  // 1 MB: the ring's messages are not eager
  const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (long step = 0; std::chrono::steady_clock::now() < end; ++step) {
    std::fill(buf.begin(), buf.end(), static_cast<float>(comm.rank() + 1));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comm.allreduce(buf);
    } catch (const meld::comm_error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("rank %d: comm_error after %.3f s: %s\n", comm.rank(), s, e.what());
      std::fflush(stdout);
      // Not MPI_Finalize: after a lost peer, Open MPI 4.1 can crash or hang in it (it did, in
      // mca_btl_tcp_frag_recv, after a link went down). MPI_Abort ends the job, the other
      // survivors too; so first twice the timeout, within which each of them has its own timeout
      // or this rank's abort notice and has printed its report (one second was too short on a
      // loaded machine: a survivor was killed before it printed).
      std::this_thread::sleep_for(2 * o.timeout);
      mpi.abort(4);
    }
    for (const float x : buf) {
      if (x != expected) {
        std::printf("rank %d: step %ld: sum %g, expected %g\n", comm.rank(), step, x, expected);
        return 3;
      }
    }
    // The driver injects its fault after this line: the job is past its start, every link used.
    if (step == 3 && comm.rank() == 0) {
      std::printf("running\n");
      std::fflush(stdout);
    }
  }
  std::printf("rank %d: no error within a minute\n", comm.rank());
  return 2;
}
