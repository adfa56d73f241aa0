// data_parallel's contract, written once and checked on every backend and communicator: replicas
// that take SGD steps on shards of each batch report the losses of, and end with the parameters
// of, one CPU worker training on the whole batches. The model has every kind of parameter and
// window operation a step moves (convolution, pooling, flatten, linear); the batch of 29 rows
// splits unevenly over 2, 3 and 4 ranks; a window of steps under no_sync accumulates the gradient
// of all its samples. Checked by
//   test_data_parallel.cpp       cpu<sync>: a thread_group (threads mode), thread_comm ranks;
//   test_data_parallel_sim.cpp   sim<sync|async>: replica r on sim device r, thread_comm in place;
//   test_mpi.cpp                 cpu<sync>: mpi_comm across processes;
//   gpu/test_cuda_training.cu    cuda<async> (a GPU, or the emulated device): nccl_comm ranks, and
//                                thread_comm staging device tensors through the host.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/sharded_optimizer.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/nn/nn.hpp>
#include <meld/tensor/join.hpp>

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

// On the calling thread (Catch's assertions are not thread-safe): got equals want to the
// tolerance.
inline void require_matches(const run_result& got, const run_result& want, tolerance tol = {}) {
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

// On the calling thread: got equals one CPU worker's run.
inline void require_matches_one_worker(const run_result& got, tolerance tol = {}) {
  require_matches(got, one_cpu_worker(), tol);
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

// ---- accumulation without communication --------------------------------------------------------

// The rows of the three steps of a no_sync window: with 3 replicas the 5-row step leaves none
// empty, the 7 a remainder, the 12 an even split.
inline constexpr index_t window_rows[3] = {7, 5, 12};

// Every parameter's gradient of a model, copied to the host.
template <class M>
std::vector<meld::tensor<float>> host_gradients(M& m) {
  std::vector<meld::tensor<float>> out;
  m.visit_parameters(
      [&](std::string_view, auto&, auto& g) { out.push_back(meld::to<meld::cpu<>>(g)); });
  return out;
}

// One CPU worker's gradient of the mean loss over the window's samples together.
inline const std::vector<meld::tensor<float>>& window_gradient() {
  static const std::vector<meld::tensor<float>> g = [] {
    batch parts[3];
    for (int s = 0; s < 3; ++s) parts[s] = make_batch(10 + s, window_rows[s]);
    auto ref = make_net<meld::cpu<>>();
    ref.zero_grad();
    meld::tensor<float> dout;
    meld::nn::cross_entropy(ref.forward(meld::concatenate(0, parts[0].x, parts[1].x, parts[2].x)),
                            meld::concatenate(0, parts[0].y, parts[1].y, parts[2].y), dout);
    ref.backward(dout);
    return host_gradients(ref);
  }();
  return g;
}

// Threads mode over k replicas of B: two steps under no_sync, then one that communicates, from
// stale gradients that the window's first step must replace. Returns each replica's gradients.
// Run on the calling thread.
template <class B>
std::vector<std::vector<meld::tensor<float>>> no_sync_window(int k, meld::comm_options comm = {}) {
  auto model = make_net<B>();
  meld::thread_group group(k, comm);
  meld::data_parallel dp(model, group, {.bucket_bytes = 1024});
  model.visit_parameters([](std::string_view, auto&, auto& g) { g.fill(7.f); });  // stale
  auto step = [&](int s) {
    const batch b = make_batch(10 + s, window_rows[s]);
    dp.step(meld::to<B>(b.x), meld::to<B>(b.y), meld::nn::cross_entropy);
  };
  {
    auto guard = dp.no_sync();
    step(0);
    step(1);
  }
  step(2);
  std::vector<std::vector<meld::tensor<float>>> out{host_gradients(model)};
  for (int r = 1; r < k; ++r) out.push_back(host_gradients(dp.replica(r)));
  return out;
}

// On the calling thread: every replica holds one CPU worker's gradient over the whole window, to
// the tolerance (the shards' sums in another order), and the same bits as every other replica.
inline void require_window_gradient(const std::vector<std::vector<meld::tensor<float>>>& got,
                                    double tol = 2e-5) {
  const auto& want = window_gradient();
  for (std::size_t r = 0; r < got.size(); ++r) {
    INFO("replica " << r);
    REQUIRE(got[r].size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("parameter " << i);
      REQUIRE(got[r][i].shape() == want[i].shape());
      for (index_t e = 0; e < want[i].size(); ++e) {
        REQUIRE(got[r][i].data()[e] == Approx(want[i].data()[e]).margin(tol));
        REQUIRE(got[r][i].data()[e] == got[0][i].data()[e]);
      }
    }
  }
}

// ---- the sharded optimizer ----------------------------------------------------------------------

// The optimizers whose sharded updates must give the unsharded bits: SGD with Nesterov momentum
// and weight decay, and AdamW.
inline meld::optim::sgd_options sharded_sgd() {
  return {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true};
}
inline meld::optim::adam_options sharded_adam() {
  return {.lr = 1e-2, .weight_decay = 1e-2, .decoupled_weight_decay = true};
}

// The suite's steps through dp over `model` with Opt: a sharded_optimizer where dp shards its
// gradients, else Opt over the model. `state` receives the optimizer state's elements per worker.
template <template <class> class Opt, class DP, class M, class Options>
run_result train_with(DP& dp, M& model, const Options& options, index_t* state = nullptr) {
  using B = typename DP::backend_type;
  run_result out;
  auto run = [&](auto& opt) {
    for (int s = 0; s < steps; ++s) {
      const batch b = make_batch(s);
      out.losses.push_back(dp.step(meld::to<B>(b.x), meld::to<B>(b.y), meld::nn::cross_entropy));
      opt.step();
    }
    index_t elements = 0;
    opt.visit_state([&](std::string_view, auto& x) {
      if constexpr (!std::is_integral_v<std::remove_cvref_t<decltype(x)>>) elements += x.size();
    });
    if (state) *state = dp.sharded() ? elements / dp.local_workers() : elements;
  };
  if (dp.sharded()) {
    meld::sharded_optimizer<Opt, DP> opt(dp, options);
    run(opt);
  } else {
    Opt<M> opt(model, options);
    run(opt);
  }
  out.parameters = host_parameters(model);
  return out;
}

// On the calling thread: the same parameters, bit for bit, and the same losses to rounding (the
// sharded path sums the losses in an allreduce of their own, in another order).
inline void require_identical(const run_result& got, const run_result& want) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    INFO("step " << s);
    REQUIRE(got.losses[s] == Approx(want.losses[s]).epsilon(1e-6));
  }
  REQUIRE(got.parameters.size() == want.parameters.size());
  for (std::size_t i = 0; i < want.parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(got.parameters[i].shape() == want.parameters[i].shape());
    for (index_t e = 0; e < want.parameters[i].size(); ++e)
      REQUIRE(got.parameters[i].data()[e] == want.parameters[i].data()[e]);
  }
}

// The elements of one rank's shard: ceil(size / k) of every bucket of dp, the last one's size
// counting the two loss sums that ride with it unsharded.
template <class DP>
index_t shard_elements(const DP& dp) {
  index_t n = 0;
  for (const auto& b : dp.buckets())
    n += (b.size + (&b == &dp.buckets().back() ? 2 : 0) + dp.world_size() - 1) / dp.world_size();
  return n;
}

// A sharded run and an unsharded one, each with SGD and AdamW: what each reports and the
// optimizer state per worker.
struct sharded_comparison {
  run_result sgd, sgd_sharded, adam, adam_sharded;
  index_t sgd_state = 0, sgd_sharded_state = 0, adam_state = 0, adam_sharded_state = 0;
  index_t shard = 0;           // elements of a shard
  bool replicas_equal = true;  // sharded threads mode: every replica ends with rank 0's parameters
  bool replicas_share = true;  // ... and holds the same elements (every replica on one device)
};

// The four runs (SGD and AdamW, each unsharded and sharded) of one mode: with_dp(sharded, body)
// builds a model and its data_parallel and calls body(dp, model), which trains them and returns
// the run's result.
template <class WithDP>
sharded_comparison compare_sharded(WithDP&& with_dp) {
  sharded_comparison c;
  auto run = [&](bool sharded, auto adam, run_result& out, index_t& state) {
    with_dp(sharded, [&](auto& dp, auto& model) -> const run_result& {
      if constexpr (decltype(adam)::value)
        out = train_with<meld::optim::adam>(dp, model, sharded_adam(), &state);
      else
        out = train_with<meld::optim::sgd>(dp, model, sharded_sgd(), &state);
      if (sharded) c.shard = shard_elements(dp);
      return out;
    });
  };
  run(false, std::false_type{}, c.sgd, c.sgd_state);
  run(true, std::false_type{}, c.sgd_sharded, c.sgd_sharded_state);
  run(false, std::true_type{}, c.adam, c.adam_state);
  run(true, std::true_type{}, c.adam_sharded, c.adam_sharded_state);
  return c;
}

// Threads mode: k replicas of B, sharded and not. Run on the calling thread.
template <class B>
sharded_comparison sharded_threads_mode(int k, std::size_t bucket_bytes,
                                        meld::comm_options comm = {}) {
  bool replicas_equal = true, replicas_share = true;
  sharded_comparison c = compare_sharded([&](bool sharded, auto&& body) {
    auto model = make_net<B>();
    meld::thread_group group(k, comm);
    meld::data_parallel dp(model, group,
                           {.bucket_bytes = bucket_bytes, .shard_optimizer = sharded});
    const run_result& out = body(dp, model);
    // Unsharded, replicas take rank 0's parameters when the next step starts; sharded, they
    // share them (all on one device: each worker's optimizer wrote its shard of them), or the
    // optimizer's allgather wrote them all.
    auto elements = [](auto& m) {
      std::vector<const float*> out;
      m.visit_parameters([&](std::string_view, auto& p, auto&) { out.push_back(p.raw_data()); });
      return out;
    };
    for (int r = 1; r < k && sharded; ++r) {
      replicas_share = replicas_share && elements(dp.replica(r)) == elements(model);
      const auto ps = host_parameters(dp.replica(r));
      for (std::size_t i = 0; i < out.parameters.size(); ++i)
        for (index_t e = 0; e < ps[i].size(); ++e)
          replicas_equal = replicas_equal && ps[i].data()[e] == out.parameters[i].data()[e];
    }
  });
  c.replicas_equal = replicas_equal;
  c.replicas_share = replicas_share;
  return c;
}

// Rank mode: this rank's part of the same four runs (a process under MPI, or a thread).
template <class B, class Comm>
sharded_comparison sharded_rank_mode(Comm& comm, std::size_t bucket_bytes) {
  meld::device_guard<B> on(comm.rank() % meld::device_count<B>());
  return compare_sharded([&](bool sharded, auto&& body) {
    auto model = make_net<B>();
    meld::data_parallel dp(model, comm, {.bucket_bytes = bucket_bytes, .shard_optimizer = sharded});
    body(dp, model);
  });
}

// On the calling thread: sharded equals unsharded bit for bit (or, where the communicator's
// reduce-scatter sums in another order than its allreduce, to rounding), and each worker keeps
// the state of its shard alone (SGD: one momentum element, Adam: two moments per shard element),
// about 1/k of the unsharded optimizer's.
inline void require_sharded_matches(const sharded_comparison& c, int k, bool bitwise = true) {
  {
    INFO("SGD");
    if (bitwise)
      require_identical(c.sgd_sharded, c.sgd);
    else
      require_matches(c.sgd_sharded, c.sgd);
  }
  {
    INFO("AdamW");
    if (bitwise)
      require_identical(c.adam_sharded, c.adam);
    else
      require_matches(c.adam_sharded, c.adam);
  }
  REQUIRE(c.replicas_equal);
  index_t n = 0;
  for (const auto& p : c.sgd.parameters) n += p.size();
  REQUIRE(c.sgd_state == n);
  REQUIRE(c.adam_state == 2 * n);
  REQUIRE(c.sgd_sharded_state == c.shard);
  REQUIRE(c.adam_sharded_state == 2 * c.shard);
  REQUIRE(c.shard * k >= n);
  REQUIRE(c.shard * k < n + 8 * k);  // padding: under k elements per bucket
}

}  // namespace dp_suite
