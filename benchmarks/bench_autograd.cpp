// Autograd against the hand-written layers, side by side (benchmarks/RESULTS.md, "Autograd"):
//
//   1. the training example's MLP (784-256-128-10, ReLU, batch 256, SGD with momentum) and LeNet:
//      samples/s of a step (forward, cross-entropy, backward, update) with nn::sequential's
//      hand-written backward and with the same model written with forward only (autograd::module),
//      interleaved rounds, the best of each;
//   2. the backward of a 5-input elementwise expression, y = a*x + exp(z)*sigmoid(w) - v*v: the
//      fused backward (one pass writing every input's gradient) against the same forward and
//      backward written as separate eager operations (each intermediate a tensor), and the STREAM
//      triad's bandwidth over the same data, to express both as bytes moved;
//   3. the peak resident memory of the process after the runs.
//
//   bench_autograd [--steps N] [--n ELEMENTS] [--threads N]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <meld/autograd/autograd.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

namespace ag = meld::autograd;
namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The best of `repeats` timings of f (seconds per call).
template <class F>
double best_of(int repeats, int calls, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    for (int c = 0; c < calls; ++c) f();
    best = std::min(best, seconds(t0) / calls);
  }
  return best;
}

struct mlp {
  using value_type = float;
  using backend_type = meld::cpu<>;
  using variable = ag::variable<float>;
  variable w1, b1, w2, b2, w3, b3;  // {out, in} as nn::linear's, so both start equal
  variable forward(const variable& x) {
    variable h1 = relu(ag::matmul(x, ag::transpose(w1)) + b1);
    variable h2 = relu(ag::matmul(h1, ag::transpose(w2)) + b2);
    return ag::matmul(h2, ag::transpose(w3)) + b3;
  }
  template <class F>
  void parameters(F&& f) {
    f("1.weight", w1), f("1.bias", b1), f("3.weight", w2), f("3.bias", b2), f("5.weight", w3),
        f("5.bias", b3);
  }
};

// The same with autograd's layer objects: each product one linear node (no transposed copies,
// weight and bias gradients accumulated in place).
struct mlp_layers {
  using value_type = float;
  using backend_type = meld::cpu<>;
  ag::layers::linear<float> fc1{784, 256}, fc2{256, 128}, fc3{128, 10};
  ag::variable<float> forward(const ag::variable<float>& x) { return fc3(relu(fc2(relu(fc1(x))))); }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "1", fc1, "3", fc2, "5", fc3);
  }
};

// The training example's LeNet with autograd's layers, and the same from nn's layers (the same
// seeds draw the same parameters).
struct lenet {
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
auto hand_written_lenet() {
  return nn::sequential(nn::conv2d<float>(1, 20, 3, {.seed = 1}), nn::relu<float>(),
                        nn::avg_pool2d<float>(2), nn::conv2d<float>(20, 50, 5, {.seed = 2}),
                        nn::relu<float>(), nn::avg_pool2d<float>(2), nn::flatten<float>(),
                        nn::linear<float>(800, 128, {.seed = 3}), nn::relu<float>(),
                        nn::linear<float>(128, 10, {.seed = 4}));
}

template <class Model>
double train_rate(Model& model, int steps, const tensor<float>& x, const tensor<std::int64_t>& y) {
  meld::optim::sgd opt(model, {.lr = 0.05, .momentum = 0.9});
  tensor<float> g;
  auto step = [&] {
    model.zero_grad();
    (void)nn::cross_entropy(model.forward(x), y, g);
    model.backward(g);
    opt.step();
  };
  for (int i = 0; i < 5; ++i) step();  // warm-up
  const double t = best_of(3, steps, step);
  return static_cast<double>(x.shape()[0]) / t;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, threads = 0;
  index_t n = 1 << 22;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (f == "--n")
      n = std::atoll(argv[i + 1]);
    else if (f == "--threads")
      threads = std::atoi(argv[i + 1]);
  }
  if (threads > 0) meld::set_num_threads(threads);
  std::printf("threads %d\n\n", meld::num_threads());

  // ---- 1. the example's MLP ----
  const index_t batch = 256;
  const tensor<float> x = meld::uniform<float>({batch, 784}, -1.f, 1.f, 1);
  const tensor<std::int64_t> y = meld::rng(2).integers<std::int64_t>({batch}, 0, 10);
  auto layers =
      nn::sequential(nn::linear<float>(784, 256), nn::relu<float>(), nn::linear<float>(256, 128),
                     nn::relu<float>(), nn::linear<float>(128, 10));
  nn::initialize(layers, nn::kaiming_uniform{}, 3);
  layers.requires_input_grad(false);
  auto leaf = [](tensor<float>& t) { return ag::variable<float>(tensor<float>(t), true); };
  ag::module model(mlp{leaf(layers.layer<0>().weight()), leaf(layers.layer<0>().bias()),
                       leaf(layers.layer<2>().weight()), leaf(layers.layer<2>().bias()),
                       leaf(layers.layer<4>().weight()), leaf(layers.layer<4>().bias())});
  model.requires_input_grad(false);
  ag::module with_layers{mlp_layers{}};
  with_layers.requires_input_grad(false);
  {
    mlp_layers& net = with_layers.net();  // the same parameters as the other two
    meld::copy(net.fc1.weight.value(), layers.layer<0>().weight());
    meld::copy(net.fc2.weight.value(), layers.layer<2>().weight());
    meld::copy(net.fc3.weight.value(), layers.layer<4>().weight());
  }
  // Interleaved rounds, the best of each side.
  double hand = 0, derived = 0, derived_layers = 0;
  for (int round = 0; round < 3; ++round) {
    hand = std::max(hand, train_rate(layers, steps, x, y));
    derived = std::max(derived, train_rate(model, steps, x, y));
    derived_layers = std::max(derived_layers, train_rate(with_layers, steps, x, y));
  }
  std::printf("| MLP 784-256-128-10, batch 256 | samples/s |\n| --- | --- |\n");
  std::printf("| hand-written backward (nn::sequential) | %.0f |\n", hand);
  std::printf("| autograd, matmul(x, transpose(w)) + b | %.0f (%.2fx) |\n", derived,
              derived / hand);
  std::printf("| autograd, layers::linear | %.0f (%.2fx) |\n\n", derived_layers,
              derived_layers / hand);

  // ---- 1b. the example's LeNet ----
  {
    const tensor<float> images = meld::uniform<float>({batch, 1, 28, 28}, -1.f, 1.f, 1);
    auto lenet_layers = hand_written_lenet();
    lenet_layers.requires_input_grad(false);
    ag::module lenet_model{lenet{}};
    lenet_model.requires_input_grad(false);
    const int lenet_steps = std::max(1, steps / 4);
    double lenet_hand = 0, lenet_derived = 0;
    for (int round = 0; round < 3; ++round) {
      lenet_hand = std::max(lenet_hand, train_rate(lenet_layers, lenet_steps, images, y));
      lenet_derived = std::max(lenet_derived, train_rate(lenet_model, lenet_steps, images, y));
    }
    std::printf("| LeNet, batch 256, 28 x 28 | samples/s |\n| --- | --- |\n");
    std::printf("| hand-written backward (nn::sequential) | %.0f |\n", lenet_hand);
    std::printf("| autograd, layers::conv2d, avg_pool2d, linear | %.0f (%.2fx) |\n\n",
                lenet_derived, lenet_derived / lenet_hand);
  }

  // ---- 2. a 5-input elementwise expression ----
  auto input = [&](std::uint64_t seed) { return meld::uniform<float>({n}, -1.f, 1.f, seed); };
  ag::variable<float> a(input(10), true), xv(input(11), true), z(input(12), true),
      w(input(13), true), v(input(14), true);
  const tensor<float> g = input(15);
  auto fused_backward = [&] {
    ag::variable<float> out = a * xv + exp(z) * sigmoid(w) - v * v;
    out.backward(tensor<float>(g));
  };
  // The same, one eager operation at a time (each intermediate a tensor), as an eager framework
  // evaluates it; its backward hand-written in eager operations too.
  tensor<float> ga({n}), gx({n}), gz({n}), gw({n}), gv({n});
  const tensor<float>&A = a.value(), &X = xv.value(), &Z = z.value(), &W = w.value(),
        &V = v.value();
  auto eager = [&] {
    tensor<float> t1 = A * X, t2 = exp(Z), t3 = sigmoid(W), t4 = t2 * t3, t5 = V * V, t6 = t1 + t4,
                  out = t6 - t5;
    tensor<float> d_ax = g * X;  // backward, one operation per line
    ga += d_ax;
    tensor<float> d_xa = g * A;
    gx += d_xa;
    tensor<float> d_t4z = g * t3;
    tensor<float> d_z = d_t4z * t2;
    gz += d_z;
    tensor<float> d_t4w = g * t2;
    tensor<float> one_minus = 1.f - t3;
    tensor<float> s_prime = t3 * one_minus;
    tensor<float> d_w = d_t4w * s_prime;
    gw += d_w;
    tensor<float> two_v = 2.f * V;
    tensor<float> d_v = g * two_v;
    gv -= d_v;
    (void)out;
  };
  // Arithmetic alone (memory-bound): y = a*x + z*w - v, whose backward reads g, four inputs and
  // the five gradients and writes the five gradients.
  auto fused_arithmetic = [&] {
    ag::variable<float> out = a * xv + z * w - v;
    out.backward(tensor<float>(g));
  };
  tensor<float> ta({n}), tb = input(20), tc = input(21);
  auto triad = [&] { ta = tb + 3.f * tc; };
  fused_backward();
  eager();
  triad();
  fused_arithmetic();
  const double t_arithmetic = best_of(5, 3, fused_arithmetic);
  const double t_fused = best_of(5, 3, fused_backward), t_eager = best_of(5, 3, eager),
               t_triad = best_of(5, 10, triad);
  const double bandwidth = 3.0 * 4.0 * static_cast<double>(n) / t_triad;  // bytes/s
  // The least a forward + backward must move: read 5 inputs, write y; read g and the 5 inputs,
  // read and write 5 gradients (accumulated).
  const double least = 4.0 * static_cast<double>(n) * (5 + 1 + 1 + 5 + 10);
  std::printf(
      "| y = a*x + exp(z)*sigmoid(w) - v*v, n = %lld floats | ms | GB moved at triad "
      "bandwidth | vs the least (%.0f MB) |\n| --- | --- | --- | --- |\n",
      static_cast<long long>(n), least / 1e6);
  std::printf("| STREAM triad (%.1f GB/s) | %.2f | %.3f | |\n", bandwidth / 1e9, t_triad * 1e3,
              3.0 * 4.0 * static_cast<double>(n) / 1e9);
  std::printf("| autograd, fused forward + backward | %.2f | %.3f | %.2fx |\n", t_fused * 1e3,
              t_fused * bandwidth / 1e9, t_fused * bandwidth / least);
  std::printf("| eager operations, forward + backward | %.2f | %.3f | %.2fx |\n", t_eager * 1e3,
              t_eager * bandwidth / 1e9, t_eager * bandwidth / least);
  // y = a*x + z*w - v: the forward reads 5 and writes 1; the backward reads g, 4 inputs and 5
  // gradients and writes 5 gradients.
  const double least_arithmetic = 4.0 * static_cast<double>(n) * (5 + 1 + 1 + 4 + 10);
  std::printf(
      "| autograd, y = a*x + z*w - v (arithmetic; least %.0f MB) | %.2f | %.3f | %.2fx |\n\n",
      least_arithmetic / 1e6, t_arithmetic * 1e3, t_arithmetic * bandwidth / 1e9,
      t_arithmetic * bandwidth / least_arithmetic);

  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("peak resident memory %.1f MB\n", static_cast<double>(u.ru_maxrss) / 1024.0);
  return 0;
}
