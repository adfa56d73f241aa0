// data_parallel on thread_comm: the k-worker gradient equals the single-worker full-batch
// gradient (uneven shards, any bucket cap), replicas stay bit-identical (sharing rank 0's
// parameters on one device), runs repeat bit for bit, accumulation, uneven epochs (join),
// construction checks and broadcasts, failures.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/nn/nn.hpp>

#include "catch.hpp"
#include "dp_suite.hpp"
#include "toy_models.hpp"
#include "worker_assertions.hpp"

namespace {

using meld::index_t;
using model_t = toy::mlp<float>;
using tensor_t = meld::tensor<float>;

const std::vector<index_t> widths{6, 16, 8, 3};

tensor_t inputs(index_t n, std::uint64_t seed) {
  return meld::uniform<float>({n, 6}, -1.f, 1.f, seed);
}
tensor_t targets(index_t n, std::uint64_t seed) {
  return meld::uniform<float>({n, 3}, -1.f, 1.f, seed);
}

meld::comm_options comm_opts() {
  meld::comm_options o;
  o.debug = true;
  o.timeout = std::chrono::seconds(20);
  o.slice_bytes = 128;
  return o;
}

// The single-worker full-batch gradient.
template <class M, class X, class Y, class L>
std::vector<meld::tensor<typename M::value_type>> reference_gradient(M& m, const X& x, const Y& y,
                                                                     const L& loss) {
  m.zero_grad();
  auto out = m.forward(x);
  meld::tensor<typename M::value_type> g;
  loss(out, y, g);
  m.backward(g);
  return toy::gradients(m);
}

template <class T>
void require_close(const std::vector<meld::tensor<T>>& got,
                   const std::vector<meld::tensor<T>>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].shape() == want[i].shape());
    double scale = 0;
    for (index_t e = 0; e < want[i].size(); ++e)
      scale = std::max(scale, std::abs(static_cast<double>(want[i].data()[e])));
    for (index_t e = 0; e < want[i].size(); ++e) {
      INFO("parameter " << i << " element " << e);
      REQUIRE(static_cast<double>(got[i].data()[e]) ==
              Approx(static_cast<double>(want[i].data()[e])).margin(tol * (scale + 1e-3)));
    }
  }
}

template <class T>
bool identical(const std::vector<meld::tensor<T>>& a, const std::vector<meld::tensor<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i].shape() == b[i].shape()) ||
        (a[i].size() > 0 &&
         std::memcmp(a[i].data(), b[i].data(), static_cast<std::size_t>(a[i].size()) * sizeof(T))))
      return false;
  return true;
}

}  // namespace

TEST_CASE("data_parallel gradient equals the full-batch gradient for uneven shards", "[dist]") {
  for (std::size_t cap : {std::size_t(25) << 20, std::size_t(200)}) {
    for (int k : {1, 2, 3, 5, 8}) {
      for (index_t n : {index_t(37), index_t(3)}) {  // 3 < k: some shards are empty
        INFO("workers " << k << " batch " << n << " cap " << cap);
        model_t ref(widths, 1), model(widths, 1);
        const tensor_t x = inputs(n, 2), y = targets(n, 3);
        const auto want = reference_gradient(ref, x, y, toy::mse{});
        meld::thread_group group(k, comm_opts());
        meld::data_parallel dp(model, group, {.bucket_bytes = cap});
        REQUIRE(dp.world_size() == k);
        const double loss = dp.step(x, y, toy::mse{});
        REQUIRE(loss ==
                Approx(toy::mse{}(ref.forward(x), y, *std::make_unique<tensor_t>())).epsilon(1e-5));
        require_close(toy::gradients(model), want, 1e-5);
        for (int r = 1; r < k; ++r) {
          REQUIRE(identical(toy::gradients(dp.replica(r)), toy::gradients(model)));
          REQUIRE(identical(toy::parameters(dp.replica(r)), toy::parameters(model)));
        }
        // With hooks every bucket starts inside backward.
        if (n >= k) REQUIRE(dp.last_timing().buckets_during_backward == dp.last_timing().buckets);
      }
    }
  }
}

TEST_CASE("data_parallel: double precision, relu, a model without hooks", "[dist]") {
  using dmodel = toy::mlp<double, false>;
  const index_t n = 29;
  dmodel ref({5, 7, 4}, 9, toy::activation::relu), model({5, 7, 4}, 9, toy::activation::relu);
  const auto x = meld::uniform<double>({n, 5}, -1, 1, 4);
  const auto y = meld::uniform<double>({n, 4}, -1, 1, 5);
  const auto want = reference_gradient(ref, x, y, toy::mse{});
  meld::thread_group group(4, comm_opts());
  meld::data_parallel dp(model, group, {.bucket_bytes = 64});
  REQUIRE(dp.buckets().size() == 4);  // every parameter alone: no two fit in 64 bytes
  dp.step(x, y, toy::mse{});
  require_close(toy::gradients(model), want, 1e-12);
  REQUIRE(dp.last_timing().buckets_during_backward == 0);  // no hooks: launched after backward
}

TEST_CASE("data_parallel: cross-entropy against class indices", "[dist]") {
  const index_t n = 45;
  model_t ref({6, 10, 5}, 9, toy::activation::relu), model({6, 10, 5}, 9, toy::activation::relu);
  const tensor_t x = inputs(n, 7);
  const auto y = meld::rng(5).integers<std::int64_t>({n}, 0, 5);
  const auto want = reference_gradient(ref, x, y, toy::cross_entropy{});
  meld::thread_group group(4, comm_opts());
  meld::data_parallel dp(model, group);
  dp.step(x, y, toy::cross_entropy{});
  require_close(toy::gradients(model), want, 1e-5);
}

TEST_CASE("data_parallel trains nn::sequential, its buckets starting inside backward", "[dist]") {
  namespace nn = meld::nn;
  auto make = [] {
    auto net = nn::sequential(nn::linear<float>(6, 12), nn::relu<float>(), nn::linear<float>(12, 8),
                              nn::tanh<float>(), nn::linear<float>(8, 4));
    nn::initialize(net, nn::kaiming_uniform{}, 3);
    return net;
  };
  auto ref = make(), model = make();
  const index_t n = 29;  // shards of 9, 10, 10
  const tensor_t x = inputs(n, 11);
  const auto y = meld::rng(12).integers<std::int64_t>({n}, 0, 4);
  const auto loss = [](const tensor_t& z, const meld::tensor<std::int64_t>& t, tensor_t& g) {
    return nn::cross_entropy(z, t, g);
  };
  const auto want = reference_gradient(ref, x, y, loss);
  meld::thread_group group(3, comm_opts());
  meld::data_parallel dp(model, group, {.bucket_bytes = 256});
  REQUIRE(dp.buckets().size() > 2);
  dp.step(x, y, loss);
  require_close(toy::gradients(model), want, 1e-5);
  for (int r = 1; r < 3; ++r)
    REQUIRE(identical(toy::gradients(dp.replica(r)), toy::gradients(model)));
  // sequential reports each layer's gradients when its backward is done: every bucket's
  // allreduce starts before backward returns.
  REQUIRE(dp.last_timing().buckets_during_backward == dp.last_timing().buckets);
}

TEST_CASE("dp_suite on the CPU: threads mode and thread_comm ranks equal one worker", "[dist]") {
  dp_suite::one_cpu_worker();  // computed before the ranks' threads start
  for (int k : {1, 2, 3}) {
    INFO(k << " workers");
    dp_suite::require_matches_one_worker(
        dp_suite::threads_mode<meld::cpu<>>(k, {.bucket_bytes = 512}, comm_opts()));
    std::vector<dp_suite::run_result> results(static_cast<std::size_t>(k));
    meld::thread_group group(k, comm_opts());
    group.run([&](meld::thread_comm& comm) {
      results[static_cast<std::size_t>(comm.rank())] = dp_suite::rank_mode<meld::cpu<>>(comm);
    });
    for (const auto& r : results) dp_suite::require_matches_one_worker(r);
  }
}

TEST_CASE("bucket layout: reverse order, the cap, oversized parameters alone", "[dist]") {
  const std::vector<index_t> sizes{100, 10, 50, 5, 400, 1};
  auto b = meld::make_buckets(sizes, 4, 256);  // 64 floats per bucket
  REQUIRE(b.size() == 5);
  REQUIRE(b[0].params == std::vector<int>{5});     // 1 (+400 would exceed)
  REQUIRE(b[1].params == std::vector<int>{4});     // 400 floats: alone
  REQUIRE(b[2].params == std::vector<int>{3, 2});  // 5 + 50
  REQUIRE(b[3].params == std::vector<int>{1});     // 10 (+100 would exceed)
  REQUIRE(b[4].params == std::vector<int>{0});
  REQUIRE(b[2].offsets == std::vector<index_t>{0, 5});
  REQUIRE(b[2].size == 55);
  auto one = meld::make_buckets(sizes, 4, std::size_t(25) << 20);
  REQUIRE(one.size() == 1);
  REQUIRE(one[0].params == std::vector<int>{5, 4, 3, 2, 1, 0});
  REQUIRE(one[0].size == 566);
  REQUIRE(meld::make_buckets({}, 4, 100).empty());
}

TEST_CASE("training with data_parallel: replicas identical, runs repeat bit for bit", "[dist]") {
  auto train = [](int k, int steps) {
    model_t model(widths, 11);
    meld::thread_group group(k, comm_opts());
    meld::data_parallel dp(model, group, {.bucket_bytes = 300});
    for (int s = 0; s < steps; ++s) {
      dp.step(inputs(41, 100 + static_cast<std::uint64_t>(s)),
              targets(41, 200 + static_cast<std::uint64_t>(s)), toy::mse{});
      for (int r = 1; r < k; ++r)
        REQUIRE(identical(toy::gradients(dp.replica(r)), toy::gradients(model)));
      toy::sgd(model, 0.1f);
    }
    dp.step(inputs(8, 1), targets(8, 1), toy::mse{});  // the replicas take the last update
    for (int r = 1; r < k; ++r)
      REQUIRE(identical(toy::parameters(dp.replica(r)), toy::parameters(model)));
    return toy::parameters(model);
  };
  // The serial reference: the same training on one model with full batches.
  model_t ref(widths, 11);
  for (int s = 0; s < 6; ++s) {
    reference_gradient(ref, inputs(41, 100 + static_cast<std::uint64_t>(s)),
                       targets(41, 200 + static_cast<std::uint64_t>(s)), toy::mse{});
    toy::sgd(ref, 0.1f);
  }
  const auto three = train(3, 6);
  require_close(three, toy::parameters(ref), 1e-5);
  REQUIRE(identical(three, train(3, 6)));  // same k: the same bits
}

TEST_CASE("threads mode on one device: replicas share rank 0's parameters, sharded or not",
          "[dist]") {
  auto elements = [](auto& m) {
    std::vector<const float*> out;
    m.visit_parameters([&](std::string_view, tensor_t& p, tensor_t&) { out.push_back(p.data()); });
    return out;
  };
  for (const bool sharded : {false, true}) {
    INFO("sharded " << sharded);
    model_t model(widths, 11);
    meld::thread_group group(3, comm_opts());
    meld::data_parallel dp(model, group, {.bucket_bytes = 300, .shard_optimizer = sharded});
    for (int r = 1; r < 3; ++r) REQUIRE(elements(dp.replica(r)) != elements(model));
    dp.step(inputs(41, 100), targets(41, 200), toy::mse{});
    for (int r = 1; r < 3; ++r) REQUIRE(elements(dp.replica(r)) == elements(model));
    // A parameter replaced on rank 0 (as loading a checkpoint may): broadcast_parameters hands the
    // new tensor on, shared, with the values rank 0 gave it.
    const float* before = elements(model)[0];
    model.visit_parameters([&](std::string_view name, tensor_t& p, tensor_t&) {
      if (name == "0.weight") p = meld::full<float>(p.shape(), 0.25f);
    });
    REQUIRE(elements(model)[0] != before);
    dp.broadcast_parameters();
    for (int r = 1; r < 3; ++r) {
      REQUIRE(elements(dp.replica(r)) == elements(model));
      REQUIRE(identical(toy::parameters(dp.replica(r)), toy::parameters(model)));
    }
    // Steps go on from the shared parameters as from copies: every replica's gradient is rank 0's
    // (sharded, each holds its own sums: the sharded optimizer suite checks its updates).
    dp.step(inputs(41, 101), targets(41, 201), toy::mse{});
    for (int r = 1; r < 3 && !sharded; ++r)
      REQUIRE(identical(toy::gradients(dp.replica(r)), toy::gradients(model)));
  }
}

TEST_CASE("no_sync accumulates a window whose gradient is the mean over all its samples",
          "[dist]") {
  for (int k : {1, 3}) {
    INFO(k << " workers");
    dp_suite::require_window_gradient(dp_suite::no_sync_window<meld::cpu<>>(k, comm_opts()));
  }
}

TEST_CASE("process mode: uneven epochs finish with join, replicas stay identical", "[dist]") {
  // Each thread plays one process with its own model and data_parallel over a thread_comm rank.
  // Rank r has r + 1 batches of 6 + r samples.
  const int k = 3;
  auto batch_x = [](int r, int s) {
    return inputs(6 + r, 1000 + static_cast<std::uint64_t>(10 * r + s));
  };
  auto batch_y = [](int r, int s) {
    return targets(6 + r, 2000 + static_cast<std::uint64_t>(10 * r + s));
  };
  std::vector<std::vector<tensor_t>> finals(k);
  meld::thread_group group(k, comm_opts());
  group.run([&](meld::thread_comm& comm) {
    const int r = comm.rank();
    model_t model(widths, 5 + static_cast<std::uint64_t>(r));  // different seeds: rank 0's wins
    meld::data_parallel dp(model, comm, {.bucket_bytes = 300});
    for (int s = 0; s <= r; ++s) {
      dp.step_local(batch_x(r, s), batch_y(r, s), toy::mse{});
      toy::sgd(model, 0.05f);
    }
    dp.join([&] { toy::sgd(model, 0.05f); });
    finals[static_cast<std::size_t>(r)] = toy::parameters(model);
  });
  REQUIRE(identical(finals[0], finals[1]));
  REQUIRE(identical(finals[0], finals[2]));
  // Reference: step s averages over the samples of the ranks that still had a batch.
  model_t ref(widths, 5);
  for (int s = 0; s < k; ++s) {
    index_t rows = 0;
    for (int r = s; r < k; ++r) rows += 6 + r;
    tensor_t x({rows, 6}), y({rows, 3});
    index_t at = 0;
    for (int r = s; r < k; ++r) {
      x.slice(meld::range(at, at + 6 + r)) = batch_x(r, s);
      y.slice(meld::range(at, at + 6 + r)) = batch_y(r, s);
      at += 6 + r;
    }
    reference_gradient(ref, x, y, toy::mse{});
    toy::sgd(ref, 0.05f);
  }
  require_close(finals[0], toy::parameters(ref), 1e-5);
}

TEST_CASE("process mode: construction broadcasts rank 0's parameters and buffers", "[dist]") {
  meld::thread_group group(3, comm_opts());
  std::vector<std::vector<tensor_t>> params(3), buffers(3);
  group.run([&](meld::thread_comm& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    model_t model(widths, 100 + r);
    model.forward(inputs(4, r));  // a different buffer on every rank
    meld::data_parallel dp(model, comm);
    params[r] = toy::parameters(model);
    model.visit_buffers([&](std::string_view, tensor_t& b) { buffers[r].emplace_back(b); });
  });
  model_t zero(widths, 100);
  REQUIRE(identical(params[0], toy::parameters(zero)));
  for (std::size_t r = 1; r < 3; ++r) {
    REQUIRE(identical(params[r], params[0]));
    REQUIRE(identical(buffers[r], buffers[0]));
  }
}

TEST_CASE("threads mode: batch-norm-like buffers are per worker unless broadcast", "[dist]") {
  for (bool broadcast : {false, true}) {
    model_t model(widths, 3);
    meld::thread_group group(2, comm_opts());
    meld::data_parallel dp(model, group, {.broadcast_buffers = broadcast});
    const tensor_t x1 = inputs(8, 1), x2 = inputs(8, 2), y = targets(8, 3);
    dp.step(x1, y, toy::mse{});
    tensor_t b0, b1;
    dp.replica(0).visit_buffers([&](std::string_view, tensor_t& b) { b0 = b; });
    dp.replica(1).visit_buffers([&](std::string_view, tensor_t& b) { b1 = b; });
    // Each worker saw its own half of the batch.
    const tensor_t want0 = 0.1f * meld::mean(x1.slice(meld::range(0, 4)), 0);
    const tensor_t want1 = 0.1f * meld::mean(x1.slice(meld::range(4, 8)), 0);
    for (index_t i = 0; i < 6; ++i) {
      REQUIRE(b0(i) == Approx(want0(i)));
      REQUIRE(b1(i) == Approx(want1(i)));
    }
    dp.step(x2, y, toy::mse{});
    dp.replica(1).visit_buffers([&](std::string_view, tensor_t& b) { b1 = b; });
    const tensor_t start = broadcast ? tensor_t(want0) : tensor_t(want1);
    const tensor_t want = 0.9f * start + 0.1f * meld::mean(x2.slice(meld::range(4, 8)), 0);
    for (index_t i = 0; i < 6; ++i) REQUIRE(b1(i) == Approx(want(i)));
  }
}

TEST_CASE("data_parallel refuses ranks whose models differ, naming the difference", "[dist]") {
  meld::thread_group group(3, comm_opts());
  std::vector<std::string> errors(3);
  group.run([&](meld::thread_comm& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    model_t model(r == 1 ? std::vector<index_t>{6, 12, 8, 3} : widths, 1);
    try {
      meld::data_parallel dp(model, comm);
    } catch (const meld::shape_error& e) {
      errors[r] = e.what();
    }
  });
  INFO(errors[1]);
  for (const auto& e : errors)
    REQUIRE(e.find("ranks hold different models (rank 1 differs") != std::string::npos);
  REQUIRE(errors[1].find("rank 0 has parameter '0.weight' float32 {16, 6}, rank 1 has parameter "
                         "'0.weight' float32 {12, 6}") != std::string::npos);
  // A different bucket cap would give a different collective schedule: refused as well.
  REQUIRE(group.aborted());  // a failed construction fails the group
  meld::thread_group fresh(3, comm_opts());
  fresh.run([&](meld::thread_comm& comm) {
    model_t model(widths, 1);
    WORKER_REQUIRE_THROWS_AS(
        meld::data_parallel(model, comm, {.bucket_bytes = comm.rank() == 2 ? 100u : 200u}),
        meld::shape_error);
  });
}

TEST_CASE("a worker that throws fails the step with its exception; no worker hangs", "[dist]") {
  struct picky_loss {
    double operator()(const tensor_t& y, const tensor_t& t, tensor_t& g) const {
      if (y.shape()[0] == 5) throw std::runtime_error("bad shard");
      return toy::mse{}(y, t, g);
    }
  };
  model_t model(widths, 1);
  meld::thread_group group(3, comm_opts());
  meld::data_parallel dp(model, group);
  // 16 rows over 3 workers: shards of 6, 5, 5.
  REQUIRE_THROWS_WITH(dp.step(inputs(16, 1), targets(16, 2), picky_loss{}), "bad shard");
  REQUIRE_THROWS_AS(dp.step(inputs(16, 1), targets(16, 2), toy::mse{}), std::logic_error);
}

TEST_CASE("data_parallel rejects inputs and targets without a shared batch axis", "[dist]") {
  model_t model(widths, 1);
  meld::thread_group group(2, comm_opts());
  meld::data_parallel dp(model, group);
  REQUIRE_THROWS_AS(dp.step(inputs(4, 1), targets(5, 2), toy::mse{}), meld::shape_error);
  REQUIRE_THROWS_AS(dp.step_local(inputs(4, 1), targets(4, 2), toy::mse{}), std::logic_error);
}

TEST_CASE("step_gathered: each worker gathers its own rows, the same bits as step()", "[dist]") {
  // A shuffled order over a 50-sample "data set"; the batch is order[0, n). Reference: step() on
  // the batch gathered first.
  const tensor_t data_x = inputs(50, 11), data_y = targets(50, 12);
  std::vector<index_t> order(50);
  for (index_t i = 0; i < 50; ++i) order[static_cast<std::size_t>(i)] = (i * 17 + 5) % 50;
  const auto gather_rows = [&](index_t lo, index_t hi, tensor_t& x, tensor_t& y) {
    x = tensor_t({hi - lo, 6}, meld::uninitialized);
    y = tensor_t({hi - lo, 3}, meld::uninitialized);
    for (index_t i = lo; i < hi; ++i) {
      const index_t s = order[static_cast<std::size_t>(i)];
      x.slice(meld::range(i - lo, i - lo + 1)) = data_x.slice(meld::range(s, s + 1));
      y.slice(meld::range(i - lo, i - lo + 1)) = data_y.slice(meld::range(s, s + 1));
    }
  };
  for (int k : {1, 3, 4}) {
    for (index_t n : {index_t(37), index_t(2)}) {  // 2 < k: some shards are empty
      INFO("workers " << k << " batch " << n);
      tensor_t bx, by;
      gather_rows(0, n, bx, by);
      model_t a(widths, 1), b(widths, 1);
      meld::thread_group ga(k, comm_opts()), gb(k, comm_opts());
      meld::data_parallel dpa(a, ga), dpb(b, gb);
      std::mutex m;
      std::vector<std::pair<index_t, index_t>> calls;
      for (int s = 0; s < 2; ++s) {  // the second step reuses the workers' shard tensors
        const double la = dpa.step(bx, by, toy::mse{});
        calls.clear();
        const double lb = dpb.step_gathered<tensor_t>(
            n,
            [&](index_t lo, index_t hi, tensor_t& x, tensor_t& y) {
              {
                std::lock_guard lock(m);
                calls.emplace_back(lo, hi);
              }
              gather_rows(lo, hi, x, y);
            },
            toy::mse{});
        REQUIRE(la == lb);
        REQUIRE(identical(toy::gradients(a), toy::gradients(b)));
        for (int r = 1; r < k; ++r)
          REQUIRE(identical(toy::gradients(dpb.replica(r)), toy::gradients(b)));
        toy::sgd(a, 0.1f);
        toy::sgd(b, 0.1f);
        // Called once per non-empty shard, with rank r's rows: n / k of them, one more for the
        // first n mod k ranks.
        std::sort(calls.begin(), calls.end());
        std::vector<std::pair<index_t, index_t>> want;
        for (index_t r = 0, lo = 0; r < k; ++r) {
          const index_t rows = n / k + (r < n % k ? 1 : 0);
          if (rows > 0) want.emplace_back(lo, lo + rows);
          lo += rows;
        }
        REQUIRE(calls == want);
      }
      REQUIRE(identical(toy::parameters(a), toy::parameters(b)));
    }
  }
}

TEST_CASE("step_gathered: a shard gathered with the wrong rows is an error that names it",
          "[dist]") {
  model_t model(widths, 1);
  meld::thread_group group(2, comm_opts());
  meld::data_parallel dp(model, group);
  REQUIRE_THROWS_WITH(dp.step_gathered<tensor_t>(
                          8,
                          [](index_t lo, index_t hi, tensor_t& x, tensor_t& y) {
                            x = inputs(hi - lo + (lo > 0 ? 1 : 0), 1);  // rank 1: a row too many
                            y = targets(hi - lo, 2);
                          },
                          toy::mse{}),
                      Catch::Contains("rows [4, 8) of rank 1") && Catch::Contains("{5, 6}") &&
                          Catch::Contains("axis 0 must be 4"));
  model_t other(widths, 1);
  meld::thread_group group2(2, comm_opts());
  meld::data_parallel dp2(other, group2);
  REQUIRE_THROWS_AS(dp2.step_gathered<tensor_t>(
                        -1, [](index_t, index_t, tensor_t&, tensor_t&) {}, toy::mse{}),
                    std::invalid_argument);
}

TEST_CASE(
    "sharded optimizer on one device: a step before any data-parallel step updates every shard",
    "[dist]") {
  // Weight decay moves every parameter even with zero gradients: each worker's shard must land in
  // the parameters that every replica reads, as the unsharded optimizer's update would.
  auto model = dp_suite::make_net<meld::cpu<>>(), ref = dp_suite::make_net<meld::cpu<>>();
  meld::thread_group group(3, comm_opts());
  meld::data_parallel dp(model, group, {.bucket_bytes = 512, .shard_optimizer = true});
  const meld::optim::sgd_options o{.lr = 0.1, .weight_decay = 0.5};
  auto opt = meld::shard_optimizer<meld::optim::sgd>(dp, o);
  meld::optim::sgd plain(ref, o);
  ref.zero_grad();
  opt.step();
  plain.step();
  const auto want = dp_suite::host_parameters(ref);
  for (int r = 0; r < 3; ++r) REQUIRE(identical(dp_suite::host_parameters(dp.replica(r)), want));
}

TEST_CASE("sharded optimizer (ZeRO stage 1): the unsharded bits with 1/k of the state", "[dist]") {
  // Caps of 512 bytes make buckets of 85, 16, 1024, 40 elements: none a multiple of 3 or 4.
  for (std::size_t cap : {std::size_t(512), std::size_t(25) << 20})
    for (int k : {1, 2, 3, 4}) {
      INFO(k << " workers, buckets of at most " << cap << " bytes, threads mode");
      const auto c = dp_suite::sharded_threads_mode<meld::cpu<>>(k, cap, comm_opts());
      dp_suite::require_sharded_matches(c, k);
      REQUIRE(c.replicas_share);  // one device: no allgather, each worker writes its shard
    }
  const int k = 3;
  std::vector<dp_suite::sharded_comparison> results(k);
  meld::thread_group group(k, comm_opts());
  group.run([&](meld::thread_comm& comm) {
    results[static_cast<std::size_t>(comm.rank())] =
        dp_suite::sharded_rank_mode<meld::cpu<>>(comm, 512);
  });
  for (const auto& r : results) {
    INFO("thread_comm ranks");
    dp_suite::require_sharded_matches(r, k);
  }
}

TEST_CASE("sharded_optimizer: needs sharded gradients; one rate for every shard", "[dist]") {
  auto model = dp_suite::make_net<meld::cpu<>>();
  {
    meld::thread_group group(2, comm_opts());
    meld::data_parallel plain(model, group);
    REQUIRE_THROWS_WITH(meld::shard_optimizer<meld::optim::sgd>(plain, {.lr = 0.1}),
                        Catch::Contains("shard_optimizer = true"));
  }
  meld::thread_group group(2, comm_opts());
  meld::data_parallel dp(model, group, {.shard_optimizer = true});
  auto opt = meld::shard_optimizer<meld::optim::adam>(dp, {.lr = 1e-3});
  opt.set_lr(0.5);
  REQUIRE_THROWS_AS(opt.set_lr(-1), std::invalid_argument);
  REQUIRE(opt.shard(0).lr() == 0.5);
  REQUIRE(opt.shard(1).lr() == 0.5);
  // Two moments for each element of both local shards; a step count per shard, named apart.
  index_t elements = 0;
  opt.visit_state([&](std::string_view name, auto& x) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, std::int64_t>)
      REQUIRE((name == "adam.steps" || name == "adam.steps.shard1"));
    else
      elements += x.size();
  });
  REQUIRE(elements == 2 * 2 * dp_suite::shard_elements(dp));
}
