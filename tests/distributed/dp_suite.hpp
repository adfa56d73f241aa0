// data_parallel's contract, written once and checked on every backend and communicator: replicas
// that take SGD steps on shards of each batch report the losses of, and end with the parameters
// of, one CPU worker training on the whole batches. The model has every kind of parameter and
// window operation a step moves (convolution, pooling, flatten, linear); the batch of 29 rows
// splits unevenly over 2, 3 and 4 ranks. Checked by
//   test_data_parallel.cpp       cpu<sync>: a thread_group (threads mode), thread_comm ranks;
//   test_data_parallel_sim.cpp   sim<sync|async>: replica r on sim device r, thread_comm in place;
//   test_mpi.cpp                 cpu<sync>: mpi_comm across processes;
//   gpu/test_cuda_training.cu    cuda<async> (a GPU, or the emulated device): nccl_comm ranks, and
//                                thread_comm staging device tensors through the host.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/nn/nn.hpp>

#include "catch.hpp"

namespace dp_suite {

using meld::index_t;

constexpr int steps = 5;
constexpr index_t batch_rows = 29;

template <class B>
auto make_net() {
  namespace nn = meld::nn;
  auto net = nn::sequential(nn::conv2d<float, B>(1, 4, 3, {.padding = 1}), nn::relu<float, B>(),
                            nn::max_pool2d<float, B>(2), nn::flatten<float, B>(),
                            nn::linear<float, B>(4 * 4 * 4, 16), nn::tanh<float, B>(),
                            nn::linear<float, B>(16, 5));
  nn::initialize(net, meld::nn::kaiming_uniform{}, 7);
  return net;
}

inline meld::optim::sgd_options sgd_options() {
  return {.lr = 0.1, .momentum = 0.9};
}

struct batch {
  meld::tensor<float> x;
  meld::tensor<std::int64_t> y;
};

// Step s's batch, the same in every rank and process.
inline batch make_batch(int s, index_t rows = batch_rows) {
  const auto seed = 50 + static_cast<std::uint64_t>(s);
  return {meld::uniform<float>({rows, 1, 8, 8}, -1.f, 1.f, seed),
          meld::rng(seed + 1).integers<std::int64_t>({rows}, 0, 5)};
}

// Every parameter of a model, copied to the host.
template <class M>
std::vector<meld::tensor<float>> host_parameters(M& m) {
  std::vector<meld::tensor<float>> out;
  m.visit_parameters(
      [&](std::string_view, auto& p, auto&) { out.push_back(meld::to<meld::cpu<>>(p)); });
  return out;
}

// What a run reports: the loss of every step and the parameters at the end.
struct run_result {
  std::vector<double> losses;
  std::vector<meld::tensor<float>> parameters;
};

// One CPU worker on the whole batches (computed once per process).
inline const run_result& one_cpu_worker() {
  static const run_result r = [] {
    auto ref = make_net<meld::cpu<>>();
    meld::optim::sgd opt(ref, sgd_options());
    run_result out;
    for (int s = 0; s < steps; ++s) {
      const batch b = make_batch(s);
      ref.zero_grad();
      meld::tensor<float> g;
      out.losses.push_back(meld::nn::cross_entropy(ref.forward(b.x), b.y, g));
      ref.backward(g);
      opt.step();
    }
    out.parameters = host_parameters(ref);
    return out;
  }();
  return r;
}

// How close a run must come to one CPU worker's: the shards' gradients are summed in another
// order (host backends: float rounding of the CPU's kernels; CUDA: other kernels, other orders).
struct tolerance {
  double loss = 1e-5;       // relative
  double parameter = 2e-5;  // absolute
};
inline constexpr tolerance cuda_tolerance{1e-4, 1e-4};

// On the calling thread (Catch's assertions are not thread-safe): got equals one CPU worker's run.
inline void require_matches_one_worker(const run_result& got, tolerance tol = {}) {
  const run_result& want = one_cpu_worker();
  REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    INFO("step " << s);
    REQUIRE(got.losses[s] == Approx(want.losses[s]).epsilon(tol.loss));
  }
  REQUIRE(got.parameters.size() == want.parameters.size());
  for (std::size_t i = 0; i < want.parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(got.parameters[i].shape() == want.parameters[i].shape());
    for (index_t e = 0; e < want.parameters[i].size(); ++e)
      REQUIRE(got.parameters[i].data()[e] ==
              Approx(want.parameters[i].data()[e]).margin(tol.parameter));
  }
}

// The suite's SGD steps through data_parallel `dp` over `model` (rank 0's in threads mode).
template <class B, class DP, class M>
run_result train(DP& dp, M& model) {
  meld::optim::sgd opt(model, sgd_options());
  run_result out;
  for (int s = 0; s < steps; ++s) {
    const batch b = make_batch(s);
    const double loss = dp.step(meld::to<B>(b.x), meld::to<B>(b.y), meld::nn::cross_entropy);
    opt.step();
    out.losses.push_back(loss);
  }
  out.parameters = host_parameters(model);
  return out;
}

// Threads mode: one data_parallel drives a thread_group's k replicas (replica r on device r of B,
// modulo the device count). Run on the calling thread.
template <class B>
run_result threads_mode(int k, meld::data_parallel_options options, meld::comm_options comm = {}) {
  auto model = make_net<B>();
  meld::thread_group group(k, comm);
  meld::data_parallel dp(model, group, options);
  return train<B>(dp, model);
}

// Rank mode: this rank's part, with its own model and data_parallel over its communicator
// (a process under MPI, or one of several threads each holding a communicator). The ranks after
// the first start from other weights: data_parallel broadcasts rank 0's.
template <class B, class Comm>
run_result rank_mode(Comm& comm, meld::data_parallel_options options = {}) {
  meld::device_guard<B> on(comm.rank() % meld::device_count<B>());
  auto model = make_net<B>();
  if (comm.rank() > 0)
    meld::nn::initialize(model, meld::nn::kaiming_uniform{},
                         100 + static_cast<std::uint64_t>(comm.rank()));
  meld::data_parallel dp(model, comm, options);
  return train<B>(dp, model);
}

}  // namespace dp_suite
