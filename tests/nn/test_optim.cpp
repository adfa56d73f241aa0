// SGD (plain, momentum, dampening, weight decay, Nesterov) and Adam (L2 and decoupled weight
// decay) against steps computed by hand, on a one-parameter model of our own.
#include "nn_support.hpp"

namespace nn = meld::nn;
namespace optim = meld::optim;
using meld::tensor;

namespace {

// The smallest model: y = x * w elementwise; its gradient is whatever the test sets.
struct toy {
  using value_type = double;
  using backend_type = meld::cpu<>;
  tensor<double> w, g;
  toy() : w({3}), g({3}) {
    w(0) = 1;
    w(1) = 2;
    w(2) = -3;
  }
  tensor<double> forward(const tensor<double>& x) { return x * w; }
  tensor<double> backward(const tensor<double>& gy) { return gy * w; }
  template <class F>
  void visit_parameters(F&& f) {
    f(std::string_view("w"), w, g);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad() { g = 0.0; }
  void train(bool) {}
  toy replica() const {
    toy t;
    t.w = w;
    t.g = g;
    return t;
  }
};
static_assert(nn::model<toy>);

const double g1[3] = {0.5, -1, 2}, g2[3] = {1, 1, -1};

template <class Opt>
void step_with(toy& m, Opt& opt, const double (&g)[3]) {
  for (int i = 0; i < 3; ++i) m.g(i) = g[i];
  opt.step();
}

void require_w(const toy& m, double a, double b, double c, double eps = 1e-12) {
  REQUIRE(m.w(0) == Approx(a).epsilon(eps));
  REQUIRE(m.w(1) == Approx(b).epsilon(eps));
  REQUIRE(m.w(2) == Approx(c).epsilon(eps));
}

}  // namespace

TEST_CASE("sgd: plain steps", "[nn]") {
  toy m;
  optim::sgd opt(m, {.lr = 0.1});
  step_with(m, opt, g1);  // w - 0.1 g
  require_w(m, 0.95, 2.1, -3.2);
  step_with(m, opt, g2);
  require_w(m, 0.85, 2.0, -3.1);
  REQUIRE(opt.steps() == 2);
}

TEST_CASE("sgd: momentum, then dampening", "[nn]") {
  toy m;
  optim::sgd opt(m, {.lr = 0.1, .momentum = 0.9});
  step_with(m, opt, g1);  // buf = g1; w = w0 - 0.1 g1
  require_w(m, 0.95, 2.1, -3.2);
  step_with(m, opt, g2);  // buf = 0.9 g1 + g2 = (1.45, 0.1, 0.8)
  require_w(m, 0.805, 2.09, -3.28);

  toy d;
  optim::sgd damp(d, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  step_with(d, damp, g1);  // the first step takes the gradient undamped
  require_w(d, 0.95, 2.1, -3.2);
  step_with(d, damp, g2);  // buf = 0.9 g1 + 0.5 g2 = (0.95, -0.4, 1.3)
  require_w(d, 0.855, 2.14, -3.33);
}

TEST_CASE("sgd: weight decay with Nesterov momentum", "[nn]") {
  toy m;
  optim::sgd opt(m, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  // d = g1 + 0.01 w0 = (0.51, -0.98, 1.97); buf = d; w1 = w0 - 0.1 (d + 0.9 buf) = w0 - 0.19 d
  step_with(m, opt, g1);
  require_w(m, 0.9031, 2.1862, -3.3743);
  // d = g2 + 0.01 w1 = (1.009031, 1.021862, -1.033743); buf = 0.9 (0.51, -0.98, 1.97) + d
  //   = (1.468031, 0.139862, 0.739257); w2 = w1 - 0.1 (d + 0.9 buf)
  step_with(m, opt, g2);
  require_w(m, 0.67007411, 2.07142622, -3.33745883);

  toy p;
  optim::sgd plain_decay(p, {.lr = 0.1, .weight_decay = 0.5});
  step_with(p, plain_decay, g1);  // w - 0.1 (g + 0.5 w)
  require_w(p, 0.9, 2.0, -3.05);
}

TEST_CASE("adam: bias-corrected steps", "[nn]") {
  toy m;
  optim::adam opt(m, {.lr = 0.1});
  // Step 1: m = 0.1 g, v = 0.001 g^2, so m^ = g and v^ = g^2: w -= 0.1 g / (|g| + 1e-8).
  step_with(m, opt, g1);
  require_w(m, 0.900000002, 2.099999999, -3.0999999995);
  // Step 2: m = 0.9 m + 0.1 g2 = (0.145, 0.01, 0.08); v = 0.999 v + 0.001 g2^2
  //   = (0.00124975, 0.001999, 0.004996); w -= 0.1 (m / 0.19) / (sqrt(v / 0.001999) + 1e-8)
  step_with(m, opt, g2);
  require_w(m, 0.8034818006385094, 2.0947368411578946, -3.1266337032975686);
  std::vector<std::string> names;
  opt.visit_state([&](std::string_view n, auto&) { names.emplace_back(n); });
  REQUIRE(names == std::vector<std::string>{"adam.steps", "adam.m.w", "adam.v.w"});
}

TEST_CASE("adam: L2 weight decay and decoupled weight decay (AdamW)", "[nn]") {
  toy m;
  optim::adam l2(m, {.lr = 0.1, .weight_decay = 0.1});  // g' = g + 0.1 w
  step_with(m, l2, g1);
  step_with(m, l2, g2);
  require_w(m, 0.8025029703202308, 2.074859045356938, -3.107630360321098);

  toy d;
  optim::adam adamw(d, {.lr = 0.1, .weight_decay = 0.1, .decoupled_weight_decay = true});
  step_with(d, adamw, g1);  // w *= 1 - 0.01 first, then the step 1 update
  require_w(d, 0.890000002, 2.079999999, -3.0699999995);
  step_with(d, adamw, g2);
  require_w(d, 0.7845818006185094, 2.0539368411678947, -3.0659337033025684);
}

TEST_CASE("optimizers: learning-rate changes, validation, changed models", "[nn]") {
  toy m;
  optim::sgd opt(m, {.lr = 0.1});
  opt.set_lr(0.2);
  REQUIRE(opt.lr() == 0.2);
  step_with(m, opt, g1);
  require_w(m, 0.9, 2.2, -3.4);
  REQUIRE_THROWS_AS(opt.set_lr(-1), std::invalid_argument);
  REQUIRE_THROWS_AS(optim::sgd(m, {.lr = 0.1, .nesterov = true}), std::invalid_argument);
  REQUIRE_THROWS_AS(optim::sgd(m, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(optim::adam(m, {.beta1 = 1.0}), std::invalid_argument);
  optim::sgd with_momentum(m, {.lr = 0.1, .momentum = 0.9});
  m.w = tensor<double>({4});  // the model changed under the optimizer
  m.g = tensor<double>({4});
  REQUIRE_THROWS_AS(with_momentum.step(), std::logic_error);
  // zero_grad goes to the model.
  m.g = 1.0;
  opt.zero_grad();
  REQUIRE(meld::sum(meld::abs(m.g)) == 0.0);
}

TEST_CASE("optimizers work in float on a sequential model", "[nn]") {
  auto net = nn::sequential(nn::linear<float>(3, 2, {.seed = 1}));
  optim::sgd opt(net, {.lr = 0.5, .momentum = 0.5});
  const tensor<float> w0(net.layer<0>().weight());
  net.layer<0>().weight_grad() = 1.f;
  net.layer<0>().bias_grad() = -2.f;
  opt.step();
  REQUIRE(meld::max(meld::abs(net.layer<0>().weight() - (w0 - 0.5f))) < 1e-6f);
  REQUIRE(meld::max(meld::abs(net.layer<0>().bias() - 1.f)) < 1e-6f);
  std::vector<std::string> names;
  opt.visit_state([&](std::string_view n, auto&) { names.emplace_back(n); });
  REQUIRE(names ==
          std::vector<std::string>{"sgd.steps", "sgd.momentum.0.weight", "sgd.momentum.0.bias"});
}
