// Models written with forward only (autograd::module): the same gradients as the hand-written
// layers on the same parameters, nn::model for optimizers, checkpoints and data_parallel (one
// worker on the full batch equals two workers on halves, over threads and over two sim devices).
#include <unistd.h>

#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/nn/nn.hpp>

#include "autograd_support.hpp"

namespace ag = meld::autograd;
namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;

namespace {

// relu(x W1^T + b1) W2^T + b2 with a residual tanh block, written with forward only.
template <class B>
struct residual_mlp {
  using value_type = float;
  using backend_type = B;
  using variable = ag::variable<float, B>;
  variable w1, b1, w2, b2, w3, b3;

  residual_mlp(index_t in, index_t width, index_t out, std::uint64_t seed)
      : w1(meld::uniform<float, B>({width, in}, -0.5f, 0.5f, seed), true),
        b1(meld::uniform<float, B>({width}, -0.1f, 0.1f, seed + 1), true),
        w2(meld::uniform<float, B>({width, width}, -0.3f, 0.3f, seed + 2), true),
        b2(meld::uniform<float, B>({width}, -0.1f, 0.1f, seed + 3), true),
        w3(meld::uniform<float, B>({out, width}, -0.3f, 0.3f, seed + 4), true),
        b3(meld::uniform<float, B>({out}, -0.1f, 0.1f, seed + 5), true) {}

  variable forward(const variable& x) {
    variable h = relu(ag::matmul(x, ag::transpose(w1)) + b1);
    variable r = h + tanh(ag::matmul(h, ag::transpose(w2)) + b2);
    return ag::matmul(r, ag::transpose(w3)) + b3;
  }
  template <class F>
  void parameters(F&& f) {
    f("w1", w1), f("b1", b1), f("w2", w2), f("b2", b2), f("w3", w3), f("b3", b3);
  }
};

// relu(x W1^T + b1) W2^T + b2, named as nn::sequential names the same layers.
template <class B>
struct plain_mlp {
  using value_type = float;
  using backend_type = B;
  using variable = ag::variable<float, B>;
  variable w1, b1, w2, b2;
  const void* input_storage = nullptr;  // the storage of the last forward's input
  variable forward(const variable& x) {
    input_storage = x.value().storage_ptr().get();
    return ag::matmul(relu(ag::matmul(x, ag::transpose(w1)) + b1), ag::transpose(w2)) + b2;
  }
  template <class F>
  void parameters(F&& f) {
    f("0.weight", w1), f("0.bias", b1), f("2.weight", w2), f("2.bias", b2);
  }
};

// The same with autograd's layer objects (one linear node per layer, gradients in place).
template <class B>
struct layer_mlp {
  using value_type = float;
  using backend_type = B;
  ag::layers::linear<float, B> fc1{6, 16}, fc2{16, 3};
  ag::variable<float, B> forward(const ag::variable<float, B>& x) { return fc2(relu(fc1(x))); }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "0", fc1, "2", fc2);
  }
};

static_assert(nn::model<ag::module<residual_mlp<meld::cpu<>>>>);
// A Net that names no types is float on cpu<>; one that does keeps them.
struct untyped_net {
  ag::layers::linear<float> fc{2, 1};
  ag::variable<float> forward(const ag::variable<float>& x) { return fc(x); }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "fc", fc);
  }
};
static_assert(nn::model<ag::module<untyped_net>>);
static_assert(std::is_same_v<ag::module<untyped_net>::backend_type, meld::cpu<>>);
static_assert(std::is_same_v<ag::module<layer_mlp<meld::sim<>>>::backend_type, meld::sim<>>);
static_assert(nn::reports_ready_gradients<ag::module<residual_mlp<meld::cpu<>>>>);

template <class M>
std::vector<tensor<float>> host_tensors(M& m, bool grads) {
  std::vector<tensor<float>> out;
  m.visit_parameters([&](std::string_view, auto& p, auto& g) {
    out.push_back(meld::to<meld::cpu<>>(grads ? g : p));
  });
  return out;
}

void require_close(const std::vector<tensor<float>>& got, const std::vector<tensor<float>>& want,
                   double rel, double abs) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].shape() == want[i].shape());
    for (index_t e = 0; e < want[i].size(); ++e)
      REQUIRE(got[i].data()[e] == Approx(want[i].data()[e]).epsilon(rel).margin(abs));
  }
}

}  // namespace

SYNC_BACKEND_TEST_CASE("a forward-only model has the gradients of the hand-written layers",
                       "[autograd]") {
  // A plain MLP both ways: autograd's and nn::sequential's, with the same parameters.
  using mlp = plain_mlp<B>;
  auto ref = nn::sequential(nn::linear<float, B>(6, 16), nn::relu<float, B>(),
                            nn::linear<float, B>(16, 3));
  nn::initialize(ref, nn::kaiming_uniform{}, 5);
  ref.template layer<0>().bias() = meld::uniform<float, B>({16}, -0.2f, 0.2f, 9);
  auto copy = [](tensor<float, B>& t) { return ag::variable<float, B>(tensor<float, B>(t), true); };
  ag::module model(mlp{copy(ref.template layer<0>().weight()), copy(ref.template layer<0>().bias()),
                       copy(ref.template layer<2>().weight()),
                       copy(ref.template layer<2>().bias())});
  ag::module with_layers{layer_mlp<B>{}};
  with_layers.visit_parameters([&](std::string_view name, tensor<float, B>& p, auto&) {
    ref.visit_parameters([&](std::string_view ref_name, tensor<float, B>& q, auto&) {
      if (name == ref_name) meld::copy(p, q);
    });
  });
  REQUIRE(host_tensors(with_layers, false).size() == 4);
  require_close(host_tensors(with_layers, false), host_tensors(ref, false), 0, 0);
  const tensor<float, B> x = test::random_tensor<float, B>({9, 6}, 170, -1, 1);
  const tensor<std::int64_t, B> y = meld::to<B>(meld::rng(4).integers<std::int64_t>({9}, 0, 3));
  for (int step = 0; step < 2; ++step) {  // twice: gradients accumulate the same way
    tensor<float, B> g_ref, g, g_layers;
    const double l_ref = nn::cross_entropy(ref.forward(x), y, g_ref);
    const tensor<float, B> dx_ref = ref.backward(g_ref);
    const double l = nn::cross_entropy(model.forward(x), y, g);
    // The input leaf holds x's elements, not a copy of them.
    REQUIRE(model.net().input_storage == x.storage_ptr().get());
    const tensor<float, B> dx = model.backward(g);
    const double l_layers = nn::cross_entropy(with_layers.forward(x), y, g_layers);
    const tensor<float, B> dx_layers = with_layers.backward(g_layers);
    REQUIRE(l == Approx(l_ref).epsilon(1e-6));
    REQUIRE(l_layers == Approx(l_ref).epsilon(1e-6));
    require_close(host_tensors(model, true), host_tensors(ref, true), 1e-5, 1e-7);
    require_close({test::host(dx)}, {test::host(dx_ref)}, 1e-5, 1e-7);
    require_close(host_tensors(with_layers, true), host_tensors(ref, true), 1e-5, 1e-7);
    require_close({test::host(dx_layers)}, {test::host(dx_ref)}, 1e-5, 1e-7);
  }
}

SYNC_BACKEND_TEST_CASE("a forward-only model trains with SGD and round-trips a checkpoint",
                       "[autograd]") {
  ag::module model(residual_mlp<B>(4, 12, 3, 20));
  meld::optim::sgd opt(model, {.lr = 0.1, .momentum = 0.9});
  const tensor<float, B> x = test::random_tensor<float, B>({32, 4}, 180, -1, 1);
  // Labels that a small network can learn: the largest of the first three features.
  const tensor<std::int64_t, B> y = meld::argmax(x.slice(meld::all, meld::range(0, 3)), 1);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    model.zero_grad();
    tensor<float, B> g;
    const double l = nn::cross_entropy(model.forward(x), y, g);
    model.backward(g);
    opt.step();
    if (step == 0) first = l;
    last = l;
  }
  INFO("loss " << first << " -> " << last);
  REQUIRE(last < 0.5 * first);
  // A replica is independent: training it leaves the model alone.
  auto r = model.replica();
  const auto before = host_tensors(model, false);
  require_close(host_tensors(r, false), before, 0, 0);
  r.visit_parameters([](std::string_view, auto& p, auto&) { p += 1.f; });
  require_close(host_tensors(model, false), before, 0, 0);
  // Checkpoints save and restore its parameters.
  const auto path = std::filesystem::temp_directory_path() /
                    ("meld_autograd_ckpt_" + std::to_string(::getpid()) + ".meld");
  meld::nn::save_checkpoint(path, model);
  ag::module other(residual_mlp<B>(4, 12, 3, 99));
  meld::nn::load_checkpoint(path, other);
  std::filesystem::remove(path);
  require_close(host_tensors(other, false), before, 0, 0);
}

BACKEND_TEST_CASE("data_parallel trains a forward-only model: two workers equal one",
                  "[autograd]") {
  constexpr int steps = 3;
  auto batch = [](int s) {
    const auto x = test::random_tensor<float>({22, 5}, 190 + static_cast<std::uint32_t>(s), -1, 1);
    return std::pair(meld::to<B>(x), meld::to<B>(meld::rng(s).integers<std::int64_t>({22}, 0, 3)));
  };
  ag::module ref(residual_mlp<B>(5, 10, 3, 30));
  meld::optim::sgd ref_opt(ref, {.lr = 0.2, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s);
    ref.zero_grad();
    tensor<float, B> g;
    (void)nn::cross_entropy(ref.forward(x), y, g);
    ref.backward(g);
    ref_opt.step();
  }
  ag::module model(residual_mlp<B>(5, 10, 3, 30));
  meld::comm_options o;
  o.timeout = std::chrono::seconds(30);
  meld::thread_group group(2, o);
  meld::data_parallel dp(model, group, {.bucket_bytes = 256});
  REQUIRE(dp.buckets().size() > 1);
  meld::optim::sgd opt(model, {.lr = 0.2, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s);
    (void)dp.step(x, y, nn::cross_entropy);
    // The gradient-ready hook fired during backward: buckets overlapped it.
    REQUIRE(dp.last_timing().buckets_during_backward == dp.last_timing().buckets);
    opt.step();
  }
  require_close(host_tensors(model, false), host_tensors(ref, false), 1e-4, 2e-5);
}
