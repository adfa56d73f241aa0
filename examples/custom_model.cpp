// A model of your own, written with forward only: a residual MLP with GELU (784-256-256-10, the
// GELU a meld expression), trained on Fashion-MNIST with SGD, on one worker or several
// (data_parallel over threads). No backward anywhere: autograd derives it. Each linear layer is one
// node (its weight and bias gradients added in place), and each elementwise part of forward (the
// GELU, the residual sum) has a fused backward of its own.
//
//   custom_model [--model residual|mlp|lenet] [--epochs N] [--workers K] [--threads N] [--seed N]
//                [--batch N] [--lr X] [--limit N] [--data DIR]
//
// Its last line: test_accuracy=<0.xxxx> samples_per_sec=<number>.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <meld/autograd/autograd.hpp>
#include <meld/distributed.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

#include "batch_pipeline.hpp"
#include "fashion_mnist.hpp"

namespace ag = meld::autograd;
namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;

namespace {

// ---- the model and its loss: everything a user writes ------------------------------------------

// GELU (tanh form) as an expression: its derivative comes from the tree.
template <class X>
auto gelu(const X& x) {
  return 0.5f * x * (1.f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

struct residual_gelu_mlp {  // float on cpu<>: Net may name value_type and backend_type otherwise
  ag::layers::linear<float> fc1{784, 256}, fc2{256, 256}, fc3{256, 10};

  ag::variable<float> forward(const ag::variable<float>& images) {
    ag::variable<float> h = gelu(fc1(ag::reshape(images, {-1, 784})));
    return fc3(h + gelu(fc2(h)));
  }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "fc1", fc1, "fc2", fc2, "fc3", fc3);
  }
};

// ---- the training example's models, written with forward only ----------------------------------
// (--model mlp|lenet: the same layers as train_fashion_mnist's hand-written ones, for comparing the
// two and PyTorch side by side: benchmarks/lenet_vs_torch.sh)

struct mlp {
  ag::layers::linear<float> fc1{784, 256}, fc2{256, 128}, fc3{128, 10};

  ag::variable<float> forward(const ag::variable<float>& images) {
    return fc3(relu(fc2(relu(fc1(ag::reshape(images, {-1, 784}))))));
  }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "fc1", fc1, "fc2", fc2, "fc3", fc3);
  }
};

struct lenet {
  ag::layers::conv2d<float> c1{1, 20, 3}, c2{20, 50, 5};
  ag::layers::avg_pool2d<float> pool{2};
  ag::layers::linear<float> fc1{800, 128}, fc2{128, 10};

  ag::variable<float> forward(const ag::variable<float>& images) {
    ag::variable<float> h = pool(relu(c1(ag::reshape(images, {-1, 1, 28, 28}))));
    h = pool(relu(c2(h)));
    return fc2(relu(fc1(ag::reshape(h, {h.shape()[0], -1}))));
  }
  template <class F>
  void parameters(F&& f) {
    ag::parameters(f, "c1", c1, "c2", c2, "fc1", fc1, "fc2", fc2);
  }
};

// ---- training: as in train_fashion_mnist, with data_parallel -----------------------------------

struct options {
  std::string model = "residual";
  int epochs = 10, workers = 1, threads = 0;
  std::uint64_t seed = 1;
  index_t batch = 256, limit = 0;
  double lr = 0;  // 0: the model's default (0.1; LeNet 0.05, as in train_fashion_mnist)
  std::string data = fashion_mnist::default_directory;
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(error.empty() ? stdout : stderr,
               "%s%susage: custom_model [--model residual|mlp|lenet] [--epochs N] [--workers K]\n"
               "                    [--threads N] [--seed N] [--batch N] [--lr X] [--limit N]\n"
               "                    [--data DIR]\n",
               error.c_str(), error.empty() ? "" : "\n");
  std::exit(error.empty() ? 0 : 2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") usage("");
    if (const auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(flag + " needs a value");
    }
    try {
      if (flag == "--model")
        o.model = value;
      else if (flag == "--epochs")
        o.epochs = std::stoi(value);
      else if (flag == "--workers")
        o.workers = std::stoi(value);
      else if (flag == "--threads")
        o.threads = std::stoi(value);
      else if (flag == "--seed")
        o.seed = std::stoull(value);
      else if (flag == "--batch")
        o.batch = std::stoll(value);
      else if (flag == "--lr")
        o.lr = std::stod(value);
      else if (flag == "--limit")
        o.limit = std::stoll(value);
      else if (flag == "--data")
        o.data = value;
      else
        usage("unknown flag " + flag);
    } catch (const std::logic_error&) {
      usage(flag + ": not a number: '" + value + "'");
    }
  }
  if (o.epochs < 1 || o.workers < 1 || o.threads < 0 || o.batch < 1 || !(o.lr >= 0))
    usage("--epochs, --workers and --batch must be positive, --threads >= 0, --lr > 0");
  if (o.model != "residual" && o.model != "mlp" && o.model != "lenet")
    usage("--model: residual, mlp or lenet, not " + o.model);
  if (o.lr == 0) o.lr = o.model == "lenet" ? 0.05 : 0.1;
  return o;
}

template <class Model>
double accuracy(Model& model, const fashion_mnist::dataset& d) {
  ag::no_grad off;
  std::int64_t correct = 0;
  for (index_t first = 0; first < d.size(); first += 1000) {
    const index_t count = std::min<index_t>(1000, d.size() - first);
    const tensor<float> images(d.images.slice(meld::range(first, first + count)));
    const tensor<std::int64_t> labels(d.labels.slice(meld::range(first, first + count)));
    correct += nn::correct_predictions(model.forward(images), labels);
  }
  return static_cast<double>(correct) / static_cast<double>(d.size());
}

template <class Net>
int run(const options& o, Net net) {
  if (o.threads > 0) meld::set_num_threads(o.threads);
  fashion_mnist::dataset train_set =
      fashion_mnist::load(o.data, fashion_mnist::split::train, o.limit);
  fashion_mnist::dataset test_set = fashion_mnist::load(o.data, fashion_mnist::split::test);
  const auto s = fashion_mnist::standardization_of(train_set);
  fashion_mnist::standardize(train_set, s);
  fashion_mnist::standardize(test_set, s);

  ag::module model(std::move(net));
  // Every weight drawn from one seed, as PyTorch draws its layers' (U(+-1/sqrt(fan_in))); biases 0.
  nn::initialize(model, nn::kaiming_uniform{1 / std::sqrt(3.0)}, o.seed);
  model.requires_input_grad(false);  // the data needs no gradient
  meld::thread_group group(o.workers);
  meld::data_parallel dp(model, group);
  meld::optim::sgd opt(model, {.lr = o.lr, .momentum = 0.9, .nesterov = true});

  const index_t n = train_set.size(), batches = (n + o.batch - 1) / o.batch;
  fashion_mnist::batch_pipeline pipeline(train_set, o.batch, true);
  double train_seconds = 0, test_acc = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    std::vector<index_t> order(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    std::mt19937_64 gen(o.seed * 1000003 + static_cast<std::uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), gen);
    pipeline.start_epoch(order);
    const auto start = std::chrono::steady_clock::now();
    nn::loss_value<float, meld::cpu<>> epoch_loss;
    for (index_t b = 0; b < batches; ++b) {
      const double progress = static_cast<double>((epoch - 1) * batches + b) / (batches * o.epochs);
      opt.set_lr(o.lr * 0.5 * (1 + std::cos(3.141592653589793 * progress)));  // cosine decay
      const auto& batch = pipeline.next();
      epoch_loss += dp.step(batch.images, batch.labels, nn::cross_entropy);
      opt.step();
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    train_seconds += took;
    test_acc = accuracy(model, test_set);
    std::printf("epoch %d/%d  train_loss %.4f  test_acc %.4f  samples/s %.1f\n", epoch, o.epochs,
                epoch_loss.get(), test_acc, static_cast<double>(n) / took);
    std::fflush(stdout);
  }
  std::printf("test_accuracy=%.4f samples_per_sec=%.1f\n", test_acc,
              static_cast<double>(n) * o.epochs / train_seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    if (o.model == "mlp") return run(o, mlp{});
    if (o.model == "lenet") return run(o, lenet{});
    return run(o, residual_gelu_mlp{});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
