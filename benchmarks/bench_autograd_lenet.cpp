// LeNet written with autograd's layers against the same network with nn's hand-written backward:
// samples/s of a training step (forward, cross-entropy, backward, SGD with momentum) of the
// training example's LeNet (d2l's: conv 3x3 (20) - ReLU - avg pool 2 - conv 5x5 (50) - ReLU - avg
// pool 2 - dense 128 - ReLU - dense 10) at batch 256 on 28 x 28 inputs, both with the same
// parameters. The two run in interleaved rounds and each reports its best; the ratio is autograd's
// over the hand-written path's (the goal: at least 0.9).
//
//   bench_autograd_lenet [--steps N] [--rounds N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <meld/autograd/autograd.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

namespace ag = meld::autograd;
namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;
using clock_type = std::chrono::steady_clock;

namespace {

struct lenet {
  using value_type = float;
  using backend_type = meld::cpu<>;
  using variable = ag::variable<float>;
  ag::layers::conv2d<float> c1{1, 20, 3, {.seed = 1}}, c2{20, 50, 5, {.seed = 2}};
  ag::layers::avg_pool2d<float> pool{2};
  ag::layers::linear<float> fc1{800, 128, {.seed = 3}}, fc2{128, 10, {.seed = 4}};

  variable forward(const variable& x) {
    variable h = pool(relu(c1(x)));
    h = pool(relu(c2(h)));
    return fc2(relu(fc1(ag::reshape(h, {h.shape()[0], -1}))));
  }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "c1", c1, "c2", c2, "fc1", fc1, "fc2", fc2);
  }
};

// The same network from nn's layers (the same seeds draw the same parameters).
auto hand_written() {
  return nn::sequential(nn::conv2d<float>(1, 20, 3, {.seed = 1}), nn::relu<float>(),
                        nn::avg_pool2d<float>(2), nn::conv2d<float>(20, 50, 5, {.seed = 2}),
                        nn::relu<float>(), nn::avg_pool2d<float>(2), nn::flatten<float>(),
                        nn::linear<float>(800, 128, {.seed = 3}), nn::relu<float>(),
                        nn::linear<float>(128, 10, {.seed = 4}));
}

// Samples/s of `steps` training steps of model (after two warm-up steps).
template <class Model, class Optimizer>
double train_rate(Model& model, Optimizer& opt, int steps, const tensor<float>& x,
                  const tensor<std::int64_t>& y) {
  tensor<float> g;
  auto step = [&] {
    model.zero_grad();
    (void)nn::cross_entropy(model.forward(x), y, g);
    model.backward(g);
    opt.step();
  };
  for (int i = 0; i < 2; ++i) step();
  const auto t0 = clock_type::now();
  for (int i = 0; i < steps; ++i) step();
  const double t = std::chrono::duration<double>(clock_type::now() - t0).count();
  return static_cast<double>(x.shape()[0]) * steps / t;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10, rounds = 3, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (f == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (f == "--threads")
      threads = std::atoi(argv[i + 1]);
  }
  if (threads > 0) meld::set_num_threads(threads);
  std::printf("threads %d, %d steps per round, best of %d interleaved rounds\n\n",
              meld::num_threads(), steps, rounds);

  const index_t batch = 256;
  const tensor<float> x = meld::uniform<float>({batch, 1, 28, 28}, -1.f, 1.f, 1);
  const tensor<std::int64_t> y = meld::rng(2).integers<std::int64_t>({batch}, 0, 10);
  auto layers = hand_written();
  layers.requires_input_grad(false);
  ag::module model{lenet{}};
  model.requires_input_grad(false);
  meld::optim::sgd layers_opt(layers, {.lr = 0.05, .momentum = 0.9});
  meld::optim::sgd model_opt(model, {.lr = 0.05, .momentum = 0.9});
  double hand = 0, derived = 0;
  for (int round = 0; round < rounds; ++round) {
    hand = std::max(hand, train_rate(layers, layers_opt, steps, x, y));
    derived = std::max(derived, train_rate(model, model_opt, steps, x, y));
  }
  std::printf("| LeNet, batch 256, 28 x 28 | samples/s |\n| --- | --- |\n");
  std::printf("| hand-written backward (nn::sequential) | %.0f |\n", hand);
  std::printf("| autograd, forward only (autograd::layers) | %.0f (%.2fx) |\n", derived,
              derived / hand);
  return 0;
}
