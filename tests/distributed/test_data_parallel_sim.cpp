// data_parallel on the simulated device, as it would run on GPUs: replica r on sim device r, the
// shards and rank 0's parameters moved device to device, the gradient buckets allreduced in place
// on the devices (thread_comm through sim's host alias, as NCCL on GPU memory) while backward
// runs, and no host transfer in a step but the loss that is logged. Checked against one CPU
// worker training on the full batch; sim<async> runs under ThreadSanitizer in CI.
#include <cmath>
#include <string>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/meld.hpp>  // meld::sim
#include <meld/nn/nn.hpp>

#include "catch.hpp"
#include "dp_suite.hpp"

namespace {

namespace nn = meld::nn;
using meld::index_t;

using dp_suite::batch;
using dp_suite::host_parameters;
using dp_suite::make_net;

meld::comm_options comm_opts() {
  meld::comm_options o;
  o.timeout = std::chrono::seconds(30);
  o.slice_bytes = 128;
  return o;
}

// dp_suite's contract on two sim devices, with what is sim's to check: replica 1 lives on device 1,
// every bucket's allreduce starts while backward runs, and replica 1 takes rank 0's parameters.
template <class B>
void two_sim_devices_match_one_cpu_worker() {
  auto model = make_net<B>();
  meld::thread_group group(2, comm_opts());
  meld::data_parallel dp(model, group, {.bucket_bytes = 256});
  REQUIRE(dp.buckets().size() > 2);
  bool on_device_1 = true;
  dp.replica(1).visit_parameters(
      [&](std::string_view, auto& p, auto&) { on_device_1 = on_device_1 && p.device() == 1; });
  REQUIRE(on_device_1);
  meld::optim::sgd opt(model, dp_suite::sgd_options());
  dp_suite::run_result got;
  for (int s = 0; s < dp_suite::steps; ++s) {
    const batch b = dp_suite::make_batch(s);  // shards of 14 and 15 rows
    const double loss = dp.step(meld::to<B>(b.x), meld::to<B>(b.y), nn::cross_entropy);
    REQUIRE(dp.last_timing().buckets_during_backward == dp.last_timing().buckets);
    opt.step();
    got.losses.push_back(loss);
  }
  got.parameters = host_parameters(model);
  dp_suite::require_matches_one_worker(got);
  // The replica on device 1 took rank 0's parameters at the start of the last step.
  const batch b = dp_suite::make_batch(0, 4);
  dp.step(meld::to<B>(b.x), meld::to<B>(b.y), nn::cross_entropy);
  const auto p0 = host_parameters(model), p1 = host_parameters(dp.replica(1));
  for (std::size_t i = 0; i < p0.size(); ++i)
    REQUIRE(std::equal(p0[i].begin(), p0[i].end(), p1[i].begin(), p1[i].end()));
}

// One worker more than sim devices: the last replica is on rank 0's device and shares its
// parameters' elements (the others copy them device to device), reading them while rank 0's queued
// update is ordered before its step; the training matches one CPU worker all the same.
template <class B>
void a_replica_on_rank_0s_device_shares_its_parameters() {
  auto model = make_net<B>();
  const int k = meld::device_count<B>() + 1;
  meld::thread_group group(k, comm_opts());
  meld::data_parallel dp(model, group, {.bucket_bytes = 256});
  dp_suite::require_matches_one_worker(dp_suite::train<B>(dp, model));
  auto elements = [](auto& m) {
    std::vector<const float*> out;
    m.visit_parameters([&](std::string_view, auto& p, auto&) { out.push_back(p.raw_data()); });
    return out;
  };
  REQUIRE(elements(dp.replica(k - 1)) == elements(model));
  REQUIRE(elements(dp.replica(1)) != elements(model));
}

// Run with MELD_SIM_DEVICES=1 (its own CTest entry, test_data_parallel_sim_one_device): every
// replica on device 0, so the sharded replicas share rank 0's parameters and each worker's
// optimizer writes its shard of them, with no allgather; the unsharded bits all the same.
template <class B>
void sharded_replicas_share_one_sim_device() {
  REQUIRE(meld::device_count<B>() == 1);
  for (int k : {2, 3}) {
    INFO(k << " workers");
    const auto c = dp_suite::sharded_threads_mode<B>(k, 256, comm_opts());
    dp_suite::require_sharded_matches(c, k);
    REQUIRE(c.replicas_share);
  }
}

template <class B>
void a_step_reads_nothing_back_but_the_logged_loss() {
  auto model = make_net<B>();
  meld::thread_group group(2, comm_opts());
  meld::data_parallel dp(model, group, {.bucket_bytes = 256});
  meld::optim::sgd opt(model, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  std::vector<meld::tensor<float, B>> xs;
  std::vector<meld::tensor<std::int64_t, B>> ys;
  for (int s = 0; s < 4; ++s) {
    const batch b = dp_suite::make_batch(s, 32);
    xs.push_back(meld::to<B>(b.x));
    ys.push_back(meld::to<B>(b.y));
  }
  dp.step(xs[0], ys[0], nn::cross_entropy);  // warm-up: buffers and scratch exist from here on
  opt.step();
  meld::synchronize();
  meld::reset_sim_transfers();
  nn::loss_value<float, B> epoch_loss;
  for (int s = 1; s < 4; ++s) {
    epoch_loss += dp.step(xs[static_cast<std::size_t>(s)], ys[static_cast<std::size_t>(s)],
                          nn::cross_entropy);
    opt.step();
  }
  meld::synchronize();
  const meld::transfer_counts during = meld::sim_transfers();
  INFO("to host " << during.to_host_calls << " calls, to device " << during.to_device_calls);
  REQUIRE(during.to_host_calls == 0);
  REQUIRE(during.to_device_calls == 0);
  REQUIRE(during.device_to_device_calls > 0);  // rank 1's shards and parameters
  const double mean = epoch_loss;              // the logged value: one transfer
  REQUIRE(meld::sim_transfers().to_host_calls == 1);
  REQUIRE(std::isfinite(mean));
  REQUIRE(epoch_loss.samples() == 96);
}

template <class B>
void bad_class_indices_surface_when_the_loss_is_read() {
  auto model = make_net<B>();
  meld::thread_group group(2, comm_opts());
  meld::data_parallel dp(model, group);
  batch b = dp_suite::make_batch(3, 10);
  b.y(7) = 5;  // 5 classes: 0..4
  const auto loss = dp.step(meld::to<B>(b.x), meld::to<B>(b.y), nn::cross_entropy);
  REQUIRE_THROWS_WITH(loss.get(), Catch::Matchers::Contains("1 class indices were outside [0, 5)"));
}

// Collectives on tensors a host communicator cannot reach in place (CUDA tensors through
// thread_comm or mpi_comm) go through a host copy of each, written back when they complete: on sim
// that path runs when an argument is wrapped in meld::through_host. Each staged tensor costs one
// counted transfer each way (none for an input back), and the results equal a naive reduction.
template <class B>
void collectives_stage_through_host() {
  meld::thread_group group(2, comm_opts());
  const index_t n = 1001;
  auto rank_values = [&](int r) { return meld::uniform<float>({n}, -1.f, 1.f, 10 + r); };
  const meld::tensor<float> a0 = rank_values(0), a1 = rank_values(1);
  meld::reset_sim_transfers();
  std::vector<meld::tensor<float>> summed(2), gathered(2), scattered(2), broadcast(2);
  group.run([&](meld::thread_comm& comm) {
    const int r = comm.rank();
    meld::device_guard<B> on(r);
    meld::tensor<float, B> x = meld::to<B>(r == 0 ? a0 : a1);
    comm.allreduce(meld::through_host(x));
    auto request = comm.allreduce_async(meld::through_host(x), meld::reduce_op::max);
    request.wait();
    summed[static_cast<std::size_t>(r)] = meld::to<meld::cpu<>>(x);
    meld::tensor<float, B> whole({2 * n}), part({n});
    const meld::tensor<float, B> mine = meld::to<B>(r == 0 ? a0 : a1);
    comm.allgather(meld::through_host(mine), meld::through_host(whole));
    gathered[static_cast<std::size_t>(r)] = meld::to<meld::cpu<>>(whole);
    comm.reduce_scatter(meld::through_host(whole), meld::through_host(part));
    scattered[static_cast<std::size_t>(r)] = meld::to<meld::cpu<>>(part);
    meld::tensor<float, B> v = meld::full<float, B>({5}, static_cast<float>(r + 7));
    comm.broadcast(meld::through_host(v), 1);
    broadcast[static_cast<std::size_t>(r)] = meld::to<meld::cpu<>>(v);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    for (index_t i = 0; i < n; ++i) {
      // max over ranks of (a0 + a1) is the sum itself: both ranks hold it after the allreduce.
      REQUIRE(summed[r](i) == Approx(a0(i) + a1(i)).margin(1e-6));
      REQUIRE(gathered[r](i) == a0(i));
      REQUIRE(gathered[r](n + i) == a1(i));
      // reduce_scatter of the gathered {a0, a1}: rank r gets 2 x a_r.
      REQUIRE(scattered[r](i) == 2 * (r == 0 ? a0(i) : a1(i)));
    }
    for (index_t i = 0; i < 5; ++i) REQUIRE(broadcast[r](i) == 8.f);
  }
  // One rank: each staged argument is one counted transfer to the host, and one back if written;
  // without through_host the collective moves sim memory in place, with no transfer.
  meld::thread_group one(1, comm_opts());
  one.run([&](meld::thread_comm& comm) {
    meld::tensor<float, B> x = meld::to<B>(a0), y({n});
    meld::synchronize();  // (under async the copy to the device is counted when it runs)
    meld::reset_sim_transfers();
    comm.allreduce(x);
    CHECK(meld::sim_transfers().to_host_calls == 0);
    CHECK(meld::sim_transfers().to_device_calls == 0);
    comm.allreduce(meld::through_host(x));
    meld::synchronize();  // the copy back is enqueued on x's stream
    CHECK(meld::sim_transfers().to_host_calls == 1);
    CHECK(meld::sim_transfers().to_host_bytes == n * sizeof(float));
    CHECK(meld::sim_transfers().to_device_calls == 1);
    comm.reduce_scatter(meld::through_host(x), meld::through_host(y));
    meld::synchronize();
    CHECK(meld::sim_transfers().to_host_calls == 3);
    CHECK(meld::sim_transfers().to_device_calls == 2);
    REQUIRE(meld::to<meld::cpu<>>(y)(n - 1) == a0(n - 1));
  });
}

// A staged collective that fails leaves the device tensor as it was.
template <class B>
void a_failed_staged_collective_changes_nothing() {
  meld::comm_options o = comm_opts();
  o.timeout = std::chrono::milliseconds(200);
  meld::thread_group group(2, o);
  std::vector<meld::tensor<float>> after(2);
  group.run([&](meld::thread_comm& comm) {
    meld::device_guard<B> on(comm.rank());
    meld::tensor<float, B> x = meld::full<float, B>({64}, static_cast<float>(comm.rank() + 1));
    if (comm.rank() == 0)  // rank 1 never joins: rank 0 times out
      REQUIRE_THROWS_AS(comm.allreduce(meld::through_host(x)), meld::comm_error);
    after[static_cast<std::size_t>(comm.rank())] = meld::to<meld::cpu<>>(x);
  });
  for (index_t i = 0; i < 64; ++i) REQUIRE(after[0](i) == 1.f);
}

}  // namespace

TEST_CASE("collectives stage tensors through host copies where asked (sim<sync>)", "[sim][dist]") {
  collectives_stage_through_host<meld::sim<meld::sync>>();
  a_failed_staged_collective_changes_nothing<meld::sim<meld::sync>>();
}

#if !defined(MELD_TEST_ASYNC_ONLY)
TEST_CASE("data_parallel on two sim devices equals one CPU worker (sim<sync>)", "[sim][dist]") {
  two_sim_devices_match_one_cpu_worker<meld::sim<meld::sync>>();
}
TEST_CASE("a data-parallel step on sim reads nothing back but the logged loss (sim<sync>)",
          "[sim][dist]") {
  a_step_reads_nothing_back_but_the_logged_loss<meld::sim<meld::sync>>();
}
TEST_CASE("no_sync on sim devices accumulates the window's mean gradient (sim<sync>)",
          "[sim][dist]") {
  dp_suite::require_window_gradient(
      dp_suite::no_sync_window<meld::sim<meld::sync>>(3, comm_opts()));
}
TEST_CASE("sharded replicas on one sim device share its parameters (sim<sync>)",
          "[.][one_device][sim][dist]") {
  sharded_replicas_share_one_sim_device<meld::sim<meld::sync>>();
}
TEST_CASE("class indices out of range throw when the sim loss is read (sim<sync>)", "[sim][dist]") {
  bad_class_indices_surface_when_the_loss_is_read<meld::sim<meld::sync>>();
}
#endif

// The asynchronous cases (not in the AddressSanitizer build, which runs the synchronous ones:
// MELD_TEST_SYNC_ONLY; ThreadSanitizer runs these).
#if !defined(MELD_TEST_SYNC_ONLY)
TEST_CASE("collectives stage tensors through host copies where asked (sim<async>)",
          "[sim][dist][async]") {
  collectives_stage_through_host<meld::sim<meld::async>>();
}
TEST_CASE("data_parallel on two sim devices equals one CPU worker (sim<async>)",
          "[sim][dist][async]") {
  two_sim_devices_match_one_cpu_worker<meld::sim<meld::async>>();
}
TEST_CASE("a sim replica on rank 0's device shares its parameters (sim<async>)",
          "[sim][dist][async]") {
  a_replica_on_rank_0s_device_shares_its_parameters<meld::sim<meld::async>>();
}
TEST_CASE("sharded optimizer on sim devices: the unsharded bits, 1/k of the state (sim<async>)",
          "[sim][dist][async]") {
  for (int k : {2, 3}) {  // each replica on a device of its own: the allgather writes them
    INFO(k << " workers");
    const auto c = dp_suite::sharded_threads_mode<meld::sim<meld::async>>(k, 256, comm_opts());
    dp_suite::require_sharded_matches(c, k);
    REQUIRE(!c.replicas_share);
  }
}
TEST_CASE("sharded replicas on one sim device share its parameters (sim<async>)",
          "[.][one_device][sim][dist][async]") {
  sharded_replicas_share_one_sim_device<meld::sim<meld::async>>();
}
TEST_CASE("no_sync on sim devices accumulates the window's mean gradient (sim<async>)",
          "[sim][dist][async]") {
  dp_suite::require_window_gradient(
      dp_suite::no_sync_window<meld::sim<meld::async>>(3, comm_opts()));
}
TEST_CASE("a data-parallel step on sim reads nothing back but the logged loss (sim<async>)",
          "[sim][dist][async]") {
  a_step_reads_nothing_back_but_the_logged_loss<meld::sim<meld::async>>();
}
#endif
