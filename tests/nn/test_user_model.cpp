// A model of our own (not nn::sequential): a residual MLP that satisfies nn::model, trains with
// SGD and Adam, round-trips through a checkpoint and replicates. Also: the compile-time check
// names what a type misses.
#include <cmath>
#include <filesystem>

#include "nn_support.hpp"

namespace nn = meld::nn;
namespace optim = meld::optim;
using meld::index_t;
using meld::tensor;

namespace {

// out(relu(h + relu(hidden(h)))) with h = relu(in(x)): a skip connection, so not a chain.
struct residual_mlp {
  using value_type = float;
  using backend_type = meld::cpu<>;

  nn::linear<float> in, hidden, out;
  nn::relu<float> act_in, act_hidden, act_sum;

  residual_mlp(index_t inputs, index_t width, index_t classes)
      : in(inputs, width), hidden(width, width), out(width, classes) {}

  tensor<float> forward(const tensor<float>& x) {
    const tensor<float> h = act_in.forward(in.forward(x));
    const tensor<float> r = act_hidden.forward(hidden.forward(h));
    return out.forward(act_sum.forward(h + r));
  }
  tensor<float> backward(const tensor<float>& g) {
    const tensor<float> gs = act_sum.backward(out.backward(g));
    const tensor<float> gh = gs + hidden.backward(act_hidden.backward(gs));
    return in.backward(act_in.backward(gh));
  }
  template <class F>
  void visit_parameters(F&& f) {
    auto prefixed = [&](const char* prefix, auto& layer) {
      layer.visit_parameters([&](std::string_view name, tensor<float>& p, tensor<float>& gr) {
        f(std::string_view(std::string(prefix) + std::string(name)), p, gr);
      });
    };
    prefixed("in.", in);
    prefixed("hidden.", hidden);
    prefixed("out.", out);
  }
  template <class F>
  void visit_buffers(F&&) {}
  void zero_grad() {
    in.zero_grad();
    hidden.zero_grad();
    out.zero_grad();
  }
  void train(bool) {}
  residual_mlp replica() const {
    residual_mlp r(in.in_features(), in.out_features(), out.out_features());
    r.in = in.replica();
    r.hidden = hidden.replica();
    r.out = out.replica();
    return r;
  }
};
static_assert(nn::model<residual_mlp>);
static_assert(nn::require_model<residual_mlp>());

// Three interleaved spirals in the plane (not linearly separable).
struct spirals {
  tensor<float> x;
  tensor<std::int64_t> y;
};
spirals make_spirals(index_t per_class) {
  spirals s{tensor<float>({3 * per_class, 2}), tensor<std::int64_t>({3 * per_class})};
  const auto noise = test::random_tensor<float>({3 * per_class, 2}, 99, -0.1, 0.1);
  for (index_t c = 0; c < 3; ++c)
    for (index_t i = 0; i < per_class; ++i) {
      const index_t k = c * per_class + i;
      const double r = double(i) / per_class, t = 4.0 * c + 4.0 * r;
      s.x(k, 0) = static_cast<float>(r * std::sin(t)) + noise(k, 0);
      s.x(k, 1) = static_cast<float>(r * std::cos(t)) + noise(k, 1);
      s.y(k) = c;
    }
  return s;
}

template <class Opt>
std::pair<double, double> fit(residual_mlp& model, Opt& opt, const spirals& data, int steps) {
  tensor<float> grad;
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    const double loss = nn::cross_entropy(model.forward(data.x), data.y, grad);
    if (s == 0) first = loss;
    last = loss;
    model.backward(grad);
    opt.step();
    opt.zero_grad();
  }
  (void)last;
  const double acc = static_cast<double>(nn::correct_predictions(model.forward(data.x), data.y)) /
                     static_cast<double>(data.y.size());
  return {first, acc};
}

}  // namespace

TEST_CASE("a user-defined residual model trains with SGD and with Adam", "[nn]") {
  const spirals data = make_spirals(100);
  residual_mlp a(2, 64, 3);
  nn::initialize(a, nn::kaiming_uniform{}, 1);
  optim::sgd sgd(a, {.lr = 0.1, .momentum = 0.9});
  const auto [first_sgd, acc_sgd] = fit(a, sgd, data, 600);
  REQUIRE(first_sgd > 0.9);  // about log(3) at the start
  REQUIRE(acc_sgd > 0.95);

  residual_mlp b(2, 64, 3);
  nn::initialize(b, nn::kaiming_uniform{}, 1);
  optim::adam adam(b, {.lr = 0.01});
  const auto [first_adam, acc_adam] = fit(b, adam, data, 400);
  REQUIRE(first_adam == Approx(first_sgd));  // the same seed: the same start
  REQUIRE(acc_adam > 0.95);
  tensor<float> grad;
  REQUIRE(nn::cross_entropy(b.forward(data.x), data.y, grad) < 0.2);
}

TEST_CASE("a user-defined model: checkpoints and replicas", "[nn]") {
  residual_mlp m(2, 8, 3);
  nn::initialize(m, nn::xavier_normal{}, 3);
  optim::adam opt(m, {.lr = 0.01});
  const spirals data = make_spirals(10);
  fit(m, opt, data, 3);
  const auto path = std::filesystem::temp_directory_path() / "meld_test_user_model.ckpt";
  nn::save_checkpoint(path, m, opt);
  residual_mlp other(2, 8, 3);
  optim::adam other_opt(other, {.lr = 0.01});
  nn::load_checkpoint(path, other, other_opt);
  REQUIRE(nn_test::snapshot(other) == nn_test::snapshot(m));
  const tensor<float> y1 = m.forward(data.x), y2 = other.forward(data.x);
  REQUIRE(meld::sum(meld::abs(y1 - y2)) == 0.f);

  residual_mlp copy = m.replica();
  REQUIRE(nn_test::snapshot(copy) == nn_test::snapshot(m));
  copy.out.weight() += 1.f;
  REQUIRE(nn_test::snapshot(copy) != nn_test::snapshot(m));
  std::vector<std::string> names;
  m.visit_parameters(
      [&](std::string_view n, tensor<float>&, tensor<float>&) { names.emplace_back(n); });
  REQUIRE(names == std::vector<std::string>{"in.weight", "in.bias", "hidden.weight", "hidden.bias",
                                            "out.weight", "out.bias"});
  std::filesystem::remove(path);
}
