// Gradients against PyTorch's autograd (tests/autograd/torch_reference.py through
// /usr/bin/python3): a residual GELU MLP, d2l's LeNet, and a LeNet with batch normalization and max
// pooling; reported as skipped, with a warning, where torch is not installed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "autograd_support.hpp"
#include "lenet.hpp"

#ifndef MELD_TORCH_REFERENCE
#define MELD_TORCH_REFERENCE "tests/autograd/torch_reference.py"
#endif

namespace ag = meld::autograd;
using meld::tensor;

namespace {

template <class X>
auto gelu(const X& x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

void write(std::ostream& out, const std::string& name, const tensor<double>& t) {
  out << name << ' ' << t.rank();
  for (meld::index_t e : t.shape()) out << ' ' << e;
  out.precision(17);
  for (double v : t) out << ' ' << v;
  out << '\n';
}

using results = std::map<std::string, std::vector<double>>;

// PyTorch's results for `model` (torch_reference.py) from the named host tensors, or nothing where
// /usr/bin/python3 cannot import torch (with a warning; the test then passes as skipped).
std::optional<results> torch_results(const std::map<std::string, tensor<double>>& inputs,
                                     const char* model) {
  const auto dir = std::filesystem::temp_directory_path();
  // Files of this process and call alone: test_autograd and test_autograd_sim run side by side
  // (an unseeded std::rand() gave both the same name, and one removed the other's input).
  static int calls = 0;
  const std::string stem =
      "meld_torch_" + std::to_string(::getpid()) + "_" + std::to_string(calls++);
  const auto in_path = dir / (stem + ".in"), out_path = dir / (stem + ".out");
  {
    std::ofstream f(in_path);
    for (const auto& [name, t] : inputs) write(f, name, t);
  }
  const std::string command = std::string("/usr/bin/python3 ") + MELD_TORCH_REFERENCE + " " +
                              in_path.string() + " " + out_path.string() + " " + model;
  const int status = std::system(command.c_str());
  std::filesystem::remove(in_path);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    WARN("skipped: /usr/bin/python3 cannot import torch");
    return std::nullopt;
  }
  REQUIRE(status == 0);
  results want;
  {
    std::ifstream f(out_path);
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream s(line);
      std::string name;
      int rank = 0;
      s >> name >> rank;
      for (int i = 0; i < rank; ++i) {
        meld::index_t e;
        s >> e;
      }
      double v;
      std::vector<double>& values = want[name];
      while (s >> v) values.push_back(v);
    }
  }
  std::filesystem::remove(out_path);
  return want;
}

// Every element of t (any backend) equals PyTorch's `name` within rel (and a margin of abs).
template <class X>
void require_torch(const X& t, const results& want, const std::string& name, double rel,
                   double abs) {
  INFO(name);
  const tensor<double> g = test::host(t);
  REQUIRE(want.count(name) == 1);
  const auto& w = want.at(name);
  REQUIRE(static_cast<std::size_t>(g.size()) == w.size());
  for (meld::index_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    REQUIRE(g.data()[i] == Approx(w[static_cast<std::size_t>(i)]).epsilon(rel).margin(abs));
  }
}

// Class indices (i * 3) % classes for n samples.
tensor<std::int64_t> class_indices(meld::index_t n, meld::index_t classes) {
  tensor<std::int64_t> t({n});
  for (meld::index_t i = 0; i < n; ++i) t(i) = (i * 3) % classes;
  return t;
}

// A LeNet's gradients (parameters and input) and its loss against PyTorch's `model`, in double,
// with random biases (they start at 0); `extra` checks what else the model reports.
template <class B, class Net, class Extra>
void require_lenet_matches(Net net, const char* model, std::uint32_t seed, Extra&& extra) {
  using V = ag::variable<double, B>;
  std::map<std::string, tensor<double>> host;
  host.emplace("x", test::random_tensor<double>({4, 1, 28, 28}, seed, -1, 1));
  const tensor<std::int64_t> ht = class_indices(4, 10);
  host.emplace("t", tensor<double>(meld::cast<double>(ht)));
  net.parameters([&](std::string_view name, V& p) {
    if (name.ends_with("bias"))
      p.value() = test::random_tensor<double, B>(p.shape(), ++seed, -0.2, 0.2);
    host.emplace(std::string(name), test::host(p.value()));
  });
  const std::optional<results> want = torch_results(host, model);
  if (!want) return;
  const V x(meld::to<B>(host.at("x")), true);
  V loss = ag::cross_entropy(net.forward(x), meld::to<B>(ht));
  loss.backward();
  REQUIRE(test::host(loss.value()).item() == Approx(want->at("loss").at(0)).epsilon(1e-10));
  net.parameters([&](std::string_view name, V& p) {
    require_torch(p.grad(), *want, std::string(name), 1e-8, 1e-12);
  });
  require_torch(x.grad(), *want, "x", 1e-8, 1e-12);
  extra(net, *want);
}

}  // namespace

SYNC_BACKEND_TEST_CASE("a residual GELU MLP's gradients equal PyTorch's", "[autograd][torch]") {
  using V = ag::variable<double, B>;
  std::map<std::string, tensor<double>> host;
  host.emplace("x", test::random_tensor<double>({8, 6}, 200, -1, 1));
  host.emplace("w1", test::random_tensor<double>({6, 10}, 201, -0.5, 0.5));
  host.emplace("b1", test::random_tensor<double>({10}, 202, -0.1, 0.1));
  host.emplace("w2", test::random_tensor<double>({10, 10}, 203, -0.5, 0.5));
  host.emplace("b2", test::random_tensor<double>({10}, 204, -0.1, 0.1));
  host.emplace("w3", test::random_tensor<double>({10, 4}, 205, -0.5, 0.5));
  host.emplace("b3", test::random_tensor<double>({4}, 206, -0.1, 0.1));
  const tensor<std::int64_t> ht = class_indices(8, 4);
  host.emplace("t", tensor<double>(meld::cast<double>(ht)));
  const std::optional<results> want = torch_results(host, "mlp");
  if (!want) return;

  std::map<std::string, V> p;
  for (const char* name : {"w1", "b1", "w2", "b2", "w3", "b3"})
    p.emplace(name, V(meld::to<B>(host.at(name)), true));
  const V x(meld::to<B>(host.at("x")));
  V h = gelu(ag::matmul(x, p.at("w1")) + p.at("b1"));
  V r = h + gelu(ag::matmul(h, p.at("w2")) + p.at("b2"));
  V loss = ag::cross_entropy(V(ag::matmul(r, p.at("w3")) + p.at("b3")), meld::to<B>(ht));
  loss.backward();
  REQUIRE(test::host(loss.value()).item() == Approx(want->at("loss").at(0)).epsilon(1e-10));
  for (auto& [name, v] : p) require_torch(v.grad(), *want, name, 1e-9, 1e-12);
}

SYNC_BACKEND_TEST_CASE("LeNet's gradients equal PyTorch's", "[autograd][torch]") {
  require_lenet_matches<B>(test::lenet<double, B>{}, "lenet", 210, [](auto&, const results&) {});
}

SYNC_BACKEND_TEST_CASE(
    "a LeNet with batch norm and max pooling: gradients and statistics as "
    "PyTorch's",
    "[autograd][torch]") {
  require_lenet_matches<B>(test::lenet_bn<double, B>(0), "lenet_bn", 220,
                           [](auto& net, const results& want) {
                             require_torch(net.bn1.running_mean, want, "bn1.mean", 1e-10, 1e-14);
                             require_torch(net.bn1.running_var, want, "bn1.var", 1e-10, 1e-14);
                             require_torch(net.bn2.running_mean, want, "bn2.mean", 1e-10, 1e-14);
                             require_torch(net.bn2.running_var, want, "bn2.var", 1e-10, 1e-14);
                           });
}
