// Training on a GPU (run where one is present, reported skipped otherwise), against dp_suite's
// one CPU worker (tests/distributed/dp_suite.hpp): a model on cuda<async> (linear, convolution,
// pooling, dropout-free) takes the same SGD steps as on the CPU; data_parallel over nccl_comm with
// one rank equals one CPU worker on the full batch; with two (four) GPUs, two (four) NCCL ranks on
// as many threads do too; and two workers sharing one GPU through thread_comm. The same model
// written with forward only (autograd's layers) trains on cuda<async> as nn's layers do on the CPU.
#include <thread>
#include <vector>

#include <meld/autograd/autograd.hpp>
#include <meld/distributed.hpp>
#include <meld/distributed/nccl_comm.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

#include "../distributed/dp_suite.hpp"
#include "../support.hpp"

namespace {

namespace nn = meld::nn;
using gpu = meld::cuda<meld::async>;

// dp_suite's network with forward only; nn::initialize draws its weights in the same order.
template <class B>
struct autograd_net {
  using value_type = float;
  using backend_type = B;
  meld::autograd::layers::conv2d<float, B> conv{1, 4, 3, {.padding = 1}};
  meld::autograd::layers::max_pool2d<float, B> pool{2};
  meld::autograd::layers::linear<float, B> fc1{4 * 4 * 4, 16}, fc2{16, 5};
  meld::autograd::variable<float, B> forward(const meld::autograd::variable<float, B>& x) {
    meld::autograd::variable<float, B> h = pool(relu(conv(x)));
    return fc2(tanh(fc1(meld::autograd::reshape(h, {h.shape()[0], -1}))));
  }
  template <class F>
  void parameters(F&& f) {
    meld::autograd::parameters(f, "0", conv, "4", fc1, "6", fc2);
  }
};

// dp_suite's steps with one worker on the GPU, without data_parallel.
template <class M>
dp_suite::run_result train_alone(M& model) {
  meld::optim::sgd opt(model, dp_suite::sgd_options());
  dp_suite::run_result out;
  for (int s = 0; s < dp_suite::steps; ++s) {
    const dp_suite::batch b = dp_suite::make_batch(s);
    model.zero_grad();
    meld::tensor<float, gpu> g;
    const auto loss = nn::cross_entropy(model.forward(meld::to<gpu>(b.x)), meld::to<gpu>(b.y), g);
    model.backward(g);
    opt.step();
    out.losses.push_back(loss.get());
  }
  out.parameters = dp_suite::host_parameters(model);
  return out;
}

// per_rank(comm) on each of `ranks` NCCL ranks, one thread and one GPU each; what each returned.
template <class Result, class F>
std::vector<Result> on_nccl_ranks(int ranks, F per_rank) {
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<Result> results(static_cast<std::size_t>(ranks));
  auto rank_main = [&](int r) {
    meld::device_guard<gpu> on(r);
    meld::nccl_comm comm(ranks, r, id, r);
    results[static_cast<std::size_t>(r)] = per_rank(comm);
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < ranks; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace

TEST_CASE("a model on cuda<async> trains like the CPU", "[cuda][nn]") {
  auto model = dp_suite::make_net<gpu>();
  dp_suite::require_matches_one_worker(train_alone(model), dp_suite::cuda_tolerance);
}

TEST_CASE("a forward-only model (autograd) on cuda<async> trains like nn's layers on the CPU",
          "[cuda][autograd]") {
  meld::autograd::module model{autograd_net<gpu>{}};
  nn::initialize(model, nn::kaiming_uniform{}, 7);
  model.requires_input_grad(false);
  dp_suite::require_matches_one_worker(train_alone(model), dp_suite::cuda_tolerance);
}

TEST_CASE("data_parallel over nccl_comm equals one CPU worker", "[cuda][dist]") {
  dp_suite::one_cpu_worker();  // computed before the ranks' threads start
  for (int ranks : {1, 2, 4}) {
    if (ranks > meld::device_count<gpu>()) continue;  // NCCL refuses two ranks on one GPU
    INFO(ranks << " NCCL ranks");
    const auto results = on_nccl_ranks<dp_suite::run_result>(
        ranks, [](meld::nccl_comm& comm) { return dp_suite::rank_mode<gpu>(comm); });
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r);
      dp_suite::require_matches_one_worker(results[static_cast<std::size_t>(r)],
                                           dp_suite::cuda_tolerance);
    }
  }
}

TEST_CASE("sharded optimizer over nccl_comm: the unsharded parameters, 1/k of the state",
          "[cuda][dist]") {
  for (int ranks : {1, 2, 4}) {
    if (ranks > meld::device_count<gpu>()) continue;
    INFO(ranks << " NCCL ranks");
    const auto results = on_nccl_ranks<dp_suite::sharded_comparison>(
        ranks, [](meld::nccl_comm& comm) { return dp_suite::sharded_rank_mode<gpu>(comm, 512); });
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r);
      // At 1 or 2 ranks every element's sum is one addition at most: the same bits; beyond, NCCL
      // may sum its reduce-scatter and its allreduce in different orders.
      dp_suite::require_sharded_matches(results[static_cast<std::size_t>(r)], ranks, ranks <= 2);
    }
  }
}

TEST_CASE("data_parallel over thread_comm: two workers sharing one GPU equal one CPU worker",
          "[cuda][dist]") {
  // thread_comm moves host memory: the gradient buckets, the loss and the counts of CUDA tensors
  // are staged through host copies (collectives.hpp), and both replicas live on GPU 0 when there
  // is one GPU (replica r on device r modulo the count).
  dp_suite::require_matches_one_worker(dp_suite::threads_mode<gpu>(2, {.bucket_bytes = 1024}),
                                       dp_suite::cuda_tolerance);
  INFO("sharded optimizer: the reduce-scatter and allgather staged too");
  dp_suite::require_sharded_matches(dp_suite::sharded_threads_mode<gpu>(2, 1024), 2);
}
