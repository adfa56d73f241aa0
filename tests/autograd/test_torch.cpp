// A residual GELU MLP's gradients against PyTorch's autograd (tests/autograd/torch_reference.py
// through /usr/bin/python3); reported as skipped, with a warning, where torch is not installed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "autograd_support.hpp"

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

}  // namespace

SYNC_BACKEND_TEST_CASE("a residual GELU MLP's gradients equal PyTorch's", "[autograd][torch]") {
  using V = ag::variable<double, B>;
  const auto dir = std::filesystem::temp_directory_path();
  // Files of this process and case alone: test_autograd and test_autograd_sim run side by side
  // (an unseeded std::rand() gave both the same name, and one removed the other's input).
  static int calls = 0;
  const std::string stem =
      "meld_torch_" + std::to_string(::getpid()) + "_" + std::to_string(calls++);
  const auto in_path = dir / (stem + ".in"), out_path = dir / (stem + ".out");
  std::map<std::string, tensor<double>> host;
  host.emplace("x", test::random_tensor<double>({8, 6}, 200, -1, 1));
  host.emplace("w1", test::random_tensor<double>({6, 10}, 201, -0.5, 0.5));
  host.emplace("b1", test::random_tensor<double>({10}, 202, -0.1, 0.1));
  host.emplace("w2", test::random_tensor<double>({10, 10}, 203, -0.5, 0.5));
  host.emplace("b2", test::random_tensor<double>({10}, 204, -0.1, 0.1));
  host.emplace("w3", test::random_tensor<double>({10, 4}, 205, -0.5, 0.5));
  host.emplace("b3", test::random_tensor<double>({4}, 206, -0.1, 0.1));
  tensor<std::int64_t> ht({8});
  for (meld::index_t i = 0; i < 8; ++i) ht(i) = (i * 3) % 4;
  {
    std::ofstream f(in_path);
    for (const auto& [name, t] : host) write(f, name, t);
    tensor<double> td(meld::cast<double>(ht));
    write(f, "t", td);
  }
  const std::string command = std::string("/usr/bin/python3 ") + MELD_TORCH_REFERENCE + " " +
                              in_path.string() + " " + out_path.string();
  const int status = std::system(command.c_str());
  std::filesystem::remove(in_path);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    WARN("skipped: /usr/bin/python3 cannot import torch");
    return;
  }
  REQUIRE(status == 0);
  std::map<std::string, std::vector<double>> want;
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
      while (s >> v) want[name].push_back(v);
    }
  }
  std::filesystem::remove(out_path);

  std::map<std::string, V> p;
  for (const char* name : {"w1", "b1", "w2", "b2", "w3", "b3"})
    p.emplace(name, V(meld::to<B>(host.at(name)), true));
  const V x(meld::to<B>(host.at("x")));
  V h = gelu(ag::matmul(x, p.at("w1")) + p.at("b1"));
  V r = h + gelu(ag::matmul(h, p.at("w2")) + p.at("b2"));
  V loss = ag::cross_entropy(V(ag::matmul(r, p.at("w3")) + p.at("b3")), meld::to<B>(ht));
  loss.backward();
  REQUIRE(test::host(loss.value()).item() == Approx(want.at("loss").at(0)).epsilon(1e-10));
  for (auto& [name, v] : p) {
    const tensor<double> g = test::host(v.grad());
    const auto& w = want.at(name);
    REQUIRE(static_cast<std::size_t>(g.size()) == w.size());
    for (meld::index_t i = 0; i < g.size(); ++i) {
      INFO(name << " element " << i);
      REQUIRE(g.data()[i] == Approx(w[static_cast<std::size_t>(i)]).epsilon(1e-9).margin(1e-12));
    }
  }
}
