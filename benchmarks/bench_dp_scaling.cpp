// Data-parallel scaling: samples per second of one training step (data_parallel::step + an SGD
// update) of an MLP 784-256-128-10 (relu, softmax cross-entropy) at global batch 256 and 1024,
// with 1 and 2 workers, and the share of the step spent waiting for communication (blocked after
// backward until the gradient allreduces finish).
//
//   bench_dp_scaling threads                 1 and 2 workers as threads (thread_comm), and the
//                                            plain model without data_parallel
//   mpirun -np K bench_dp_scaling mpi        K processes (mpi_comm)
// Each worker computes on one core (meld::set_num_threads(1)): a worker is one CPU "device".
// Options: --steps N (default 20 timed steps after 3 warm-up steps).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#if defined(MELD_ENABLE_MPI)
#include <meld/distributed/mpi_comm.hpp>
#endif

#include "toy_models.hpp"

namespace {

using clk = std::chrono::steady_clock;
using model_t = toy::mlp<float>;
const std::vector<meld::index_t> widths{784, 256, 128, 10};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct result {
  double step_s, wait_share, forward_s, backward_s, wait_s;
};

struct batch {
  meld::tensor<float> x;
  meld::tensor<std::int64_t> y;
};

std::vector<batch> make_batches(meld::index_t b, int count) {
  std::vector<batch> out;
  for (int i = 0; i < count; ++i)
    out.push_back(
        {meld::uniform<float>({b, 784}, 0.f, 1.f, 10 + static_cast<std::uint64_t>(i)),
         meld::rng(50 + static_cast<std::uint64_t>(i)).integers<std::int64_t>({b}, 0, 10)});
  return out;
}

template <class DP>
result measure(DP& dp, model_t& model, const std::vector<batch>& batches, int steps) {
  std::vector<double> t, share, f, bw, w;
  for (int s = -3; s < steps; ++s) {
    const batch& b = batches[static_cast<std::size_t>((s + 3) % static_cast<int>(batches.size()))];
    const auto t0 = clk::now();
    dp.step(b.x, b.y, toy::cross_entropy{});
    toy::sgd(model, 0.01f);
    const double dt = std::chrono::duration<double>(clk::now() - t0).count();
    if (s < 0) continue;
    const auto& timing = dp.last_timing();
    t.push_back(dt);
    share.push_back(timing.comm_wait_s / dt);
    f.push_back(timing.forward_s);
    bw.push_back(timing.backward_s);
    w.push_back(timing.comm_wait_s);
  }
  return {median(t), median(share), median(f), median(bw), median(w)};
}

result measure_plain(model_t& model, const std::vector<batch>& batches, int steps) {
  std::vector<double> t;
  meld::tensor<float> g;
  for (int s = -3; s < steps; ++s) {
    const batch& b = batches[static_cast<std::size_t>((s + 3) % static_cast<int>(batches.size()))];
    const auto t0 = clk::now();
    model.zero_grad();
    toy::cross_entropy{}(model.forward(b.x), b.y, g);
    model.backward(g);
    toy::sgd(model, 0.01f);
    if (s >= 0) t.push_back(std::chrono::duration<double>(clk::now() - t0).count());
  }
  return {median(t), 0, 0, 0, 0};
}

void print_header(const char* mode) {
  std::printf("# data-parallel step, MLP 784-256-128-10, %s\n", mode);
  std::printf("#%9s %7s %8s %12s %10s %10s %10s %10s %9s\n", "workers", "batch", "step(ms)",
              "samples/s", "speedup", "fwd(ms)", "bwd(ms)", "wait(ms)", "wait%");
}

void print_row(const char* workers, meld::index_t b, const result& r, double base) {
  const double sps = static_cast<double>(b) / r.step_s;
  std::printf(" %9s %7ld %8.2f %12.0f %10.2f %10.2f %10.2f %10.3f %8.1f%%\n", workers,
              static_cast<long>(b), r.step_s * 1e3, sps, base > 0 ? sps / base : 1.0,
              r.forward_s * 1e3, r.backward_s * 1e3, r.wait_s * 1e3, r.wait_share * 100);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "threads";
  int steps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else
      mode = a;
  }
  meld::set_num_threads(1);
  if (mode == "threads") {
    print_header("thread_comm (threads of one process)");
    for (meld::index_t b : {256, 1024}) {
      const auto batches = make_batches(b, 4);
      model_t plain(widths, 1, toy::activation::relu);
      plain.input_gradient = false;
      const result p = measure_plain(plain, batches, steps);
      const double base = static_cast<double>(b) / p.step_s;
      print_row("plain", b, p, base);
      for (int k : {1, 2}) {
        model_t model(widths, 1, toy::activation::relu);
        model.input_gradient = false;
        meld::thread_group group(k);
        meld::data_parallel dp(model, group);
        print_row(std::to_string(k).c_str(), b, measure(dp, model, batches, steps), base);
      }
    }
    return 0;
  }
#if defined(MELD_ENABLE_MPI)
  meld::mpi_session mpi(argc, argv);
  meld::mpi_comm comm;
  if (comm.rank() == 0)
    print_header(meld::detail::cat("mpi_comm, ", comm.size(), " processes").c_str());
  for (meld::index_t b : {256, 1024}) {
    const auto batches = make_batches(b, 4);
    model_t model(widths, 1, toy::activation::relu);
    model.input_gradient = false;
    meld::data_parallel dp(model, comm);
    const result r = measure(dp, model, batches, steps);
    if (comm.rank() == 0) print_row(std::to_string(comm.size()).c_str(), b, r, 0);
  }
  return 0;
#else
  std::fprintf(stderr, "bench_dp_scaling: built without MPI (MELD_ENABLE_MPI)\n");
  return 1;
#endif
}
