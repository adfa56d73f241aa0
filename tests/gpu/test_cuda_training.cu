// Training on a GPU (run where one is present, reported skipped otherwise): a model on
// cuda<async> (linear, convolution, pooling, dropout-free) takes the same SGD steps as on the CPU;
// data_parallel over nccl_comm with one rank equals one CPU worker on the full batch; with two
// (four) GPUs, two (four) NCCL ranks on as many threads do too; and two workers sharing one GPU
// through thread_comm. The same model written with forward only (autograd's layers, a GELU as an
// expression) trains on cuda<async> as nn's layers do on the CPU.
#include <thread>
#include <vector>

#include <meld/autograd/autograd.hpp>
#include <meld/distributed.hpp>
#include <meld/distributed/nccl_comm.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

#include "../support.hpp"

namespace {

namespace nn = meld::nn;
using meld::index_t;
using gpu = meld::cuda<meld::async>;

template <class B>
auto make_net() {
  auto net = nn::sequential(nn::conv2d<float, B>(1, 4, 3, {.padding = 1}), nn::relu<float, B>(),
                            nn::max_pool2d<float, B>(2), nn::flatten<float, B>(),
                            nn::linear<float, B>(4 * 4 * 4, 16), nn::tanh<float, B>(),
                            nn::linear<float, B>(16, 5));
  nn::initialize(net, nn::kaiming_uniform{}, 7);
  return net;
}

template <class M>
std::vector<meld::tensor<float>> host_parameters(M& m) {
  std::vector<meld::tensor<float>> out;
  m.visit_parameters(
      [&](std::string_view, auto& p, auto&) { out.push_back(meld::to<meld::cpu<>>(p)); });
  return out;
}

void require_close(const std::vector<meld::tensor<float>>& got,
                   const std::vector<meld::tensor<float>>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    for (index_t e = 0; e < want[i].size(); ++e)
      REQUIRE(got[i].data()[e] == Approx(want[i].data()[e]).margin(tol));
}

// make_net's model with forward only; the weights are drawn by nn::initialize in the same order.
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

struct batch {
  meld::tensor<float> x;
  meld::tensor<std::int64_t> y;
};
batch make_batch(index_t n, std::uint64_t seed) {
  return {meld::uniform<float>({n, 1, 8, 8}, -1.f, 1.f, seed),
          meld::rng(seed + 1).integers<std::int64_t>({n}, 0, 5)};
}

// Five SGD steps of the CPU reference on full batches; returns the losses.
template <class M>
std::vector<double> train_reference(M& ref, int steps, index_t n) {
  meld::optim::sgd opt(ref, {.lr = 0.1, .momentum = 0.9});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const batch b = make_batch(n, 50 + static_cast<std::uint64_t>(s));
    ref.zero_grad();
    meld::tensor<float> g;
    losses.push_back(nn::cross_entropy(ref.forward(b.x), b.y, g));
    ref.backward(g);
    opt.step();
  }
  return losses;
}

// The same SGD steps on the GPU, each loss equal to the reference's.
template <class M>
void train_like_reference(M& model, const std::vector<double>& want) {
  meld::optim::sgd opt(model, {.lr = 0.1, .momentum = 0.9});
  for (std::size_t s = 0; s < want.size(); ++s) {
    const batch b = make_batch(24, 50 + static_cast<std::uint64_t>(s));
    model.zero_grad();
    meld::tensor<float, gpu> g;
    const auto loss = nn::cross_entropy(model.forward(meld::to<gpu>(b.x)), meld::to<gpu>(b.y), g);
    model.backward(g);
    opt.step();
    REQUIRE(loss.get() == Approx(want[s]).epsilon(1e-4));
  }
}

}  // namespace

TEST_CASE("a model on cuda<async> trains like the CPU", "[cuda][nn]") {
  auto ref = make_net<meld::cpu<>>();
  const auto want = train_reference(ref, 5, 24);
  auto model = make_net<gpu>();
  train_like_reference(model, want);
  require_close(host_parameters(model), host_parameters(ref), 1e-4);
}

TEST_CASE("a forward-only model (autograd) on cuda<async> trains like nn's layers on the CPU",
          "[cuda][autograd]") {
  auto ref = make_net<meld::cpu<>>();
  const auto want = train_reference(ref, 5, 24);
  meld::autograd::module model{autograd_net<gpu>{}};
  nn::initialize(model, nn::kaiming_uniform{}, 7);
  model.requires_input_grad(false);
  train_like_reference(model, want);
  require_close(host_parameters(model), host_parameters(ref), 1e-4);
}

TEST_CASE("data_parallel over nccl_comm equals one CPU worker", "[cuda][dist]") {
  auto ref = make_net<meld::cpu<>>();
  const auto want = train_reference(ref, 5, 24);
  const int gpus = meld::device_count<gpu>();
  for (int ranks : {1, 2, 4}) {
    if (ranks > gpus) continue;  // NCCL refuses two ranks on one GPU
    INFO(ranks << " NCCL ranks");
    ncclUniqueId id{};
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    std::vector<std::vector<meld::tensor<float>>> params(static_cast<std::size_t>(ranks));
    std::vector<std::vector<double>> losses(static_cast<std::size_t>(ranks));
    auto rank_main = [&](int r) {
      meld::device_guard<gpu> on(r);
      meld::nccl_comm comm(ranks, r, id, r);
      auto model = make_net<gpu>();
      meld::data_parallel dp(model, comm);
      meld::optim::sgd opt(model, {.lr = 0.1, .momentum = 0.9});
      for (int s = 0; s < 5; ++s) {
        const batch b = make_batch(24, 50 + static_cast<std::uint64_t>(s));
        losses[static_cast<std::size_t>(r)].push_back(
            dp.step(meld::to<gpu>(b.x), meld::to<gpu>(b.y), nn::cross_entropy));
        opt.step();
      }
      params[static_cast<std::size_t>(r)] = host_parameters(model);
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < ranks; ++r) threads.emplace_back(rank_main, r);
    rank_main(0);
    for (auto& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
      require_close(params[static_cast<std::size_t>(r)], host_parameters(ref), 1e-4);
      for (int s = 0; s < 5; ++s)
        REQUIRE(losses[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)] ==
                Approx(want[static_cast<std::size_t>(s)]).epsilon(1e-4));
    }
  }
}

TEST_CASE("data_parallel over thread_comm: two workers sharing one GPU equal one CPU worker",
          "[cuda][dist]") {
  // thread_comm moves host memory: the gradient buckets, the loss and the counts of CUDA tensors
  // are staged through host copies (collectives.hpp), and both replicas live on GPU 0 when there
  // is one GPU (replica r on device r modulo the count).
  auto ref = make_net<meld::cpu<>>();
  const auto want = train_reference(ref, 5, 24);
  auto model = make_net<gpu>();
  meld::thread_group group(2);
  meld::data_parallel dp(model, group, {.bucket_bytes = 1024});
  meld::optim::sgd opt(model, {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < 5; ++s) {
    const batch b = make_batch(24, 50 + static_cast<std::uint64_t>(s));
    const double loss = dp.step(meld::to<gpu>(b.x), meld::to<gpu>(b.y), nn::cross_entropy);
    opt.step();
    REQUIRE(loss == Approx(want[static_cast<std::size_t>(s)]).epsilon(1e-4));
  }
  require_close(host_parameters(model), host_parameters(ref), 1e-4);
}
