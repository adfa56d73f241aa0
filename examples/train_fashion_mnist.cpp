// Trains an MLP or LeNet on Fashion-MNIST with meld on one or many workers, reporting progress,
// per-epoch summaries, an optional CSV log, and, as its last line,
//   test_accuracy=<0.xxxx> samples_per_sec=<number>
//
//   train_fashion_mnist [--model mlp|lenet] [--epochs N] [--batch N] [--lr X] [--seed N]
//                       [--threads N] [--optimizer sgd|adam] [--log FILE] [--data DIR]
//                       [--limit N] [--workers K]
//   mpirun -np K train_fashion_mnist --backend mpi [...]
//
// Every step goes through meld::data_parallel: K worker threads in this process (thread_comm;
// K = 1 is plain single-worker training), or one worker per MPI process. The global batch is split
// K ways and the gradients averaged, so the update is that of the whole batch; samples/s counts
// all workers together. The same seed and worker and thread counts give the same numbers on every
// run (initialization, shuffling, shards and every reduction are deterministic).
// examples/plot_training.py turns the CSV into a PNG.
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <meld/dist.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

#include "fashion_mnist.hpp"

namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;

namespace {

struct options {
  std::string model = "mlp";
  int epochs = 10;
  index_t batch = 256;
  std::optional<double> lr;
  std::uint64_t seed = 0;
  int threads = 0;  // 0: meld's default (MELD_NUM_THREADS or every core)
  std::string optimizer = "sgd";
  std::string log;
  std::string data = fashion_mnist::default_directory;
  index_t limit = 0;
  int workers = 1;
  std::string backend = "threads";
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "train_fashion_mnist: %s\n", problem.c_str());
  std::fprintf(
      stderr,
      "usage: train_fashion_mnist [--model mlp|lenet] [--epochs N] [--batch N] [--lr X]\n"
      "                           [--seed N] [--threads N] [--optimizer sgd|adam]\n"
      "                           [--log FILE.csv] [--data DIR] [--limit N]\n"
      "                           [--workers K] [--backend threads|mpi]\n"
      "  --model      mlp (784-256-128-10, ReLU) or lenet (d2l's LeNet: two conv +\n"
      "               average-pooling layers, dense 128, 10); default mlp\n"
      "  --epochs     passes over the training set (default 10)\n"
      "  --batch      minibatch size (default 256)\n"
      "  --lr         learning rate (default: sgd 0.1 for mlp, 0.05 for lenet; adam 0.001)\n"
      "  --seed       seed of initialization and shuffling (default 0)\n"
      "  --threads    threads meld uses per worker (default: MELD_NUM_THREADS, else the\n"
      "               cores divided among the workers)\n"
      "  --optimizer  sgd (momentum 0.9, cosine learning-rate decay) or adam\n"
      "  --log        write a CSV line per epoch (epoch, train loss, train and test\n"
      "               accuracy, samples/s, seconds)\n"
      "  --data       directory of the four gzip IDX files (default %s)\n"
      "  --limit      train on the first N samples only (quick checks)\n"
      "  --workers    data-parallel worker threads (default 1)\n"
      "  --backend    threads (--workers K in this process) or mpi (one worker per\n"
      "               process: mpirun -np K train_fashion_mnist --backend mpi)\n",
      fashion_mnist::default_directory);
  std::exit(2);
}

template <class Int>
Int parse_int(const std::string& flag, const std::string& v, Int lo, Int hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < static_cast<long long>(lo) ||
      x > static_cast<long long>(hi))
    usage(flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "], not '" + v + "'");
  return static_cast<Int>(x);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("");
    if (i + 1 >= argc)
      usage(flag == "--model" || flag.rfind("--", 0) == 0 ? flag + " needs a value"
                                                          : "unknown argument '" + flag + "'");
    const std::string v = argv[++i];
    if (flag == "--model") {
      if (v != "mlp" && v != "lenet") usage("--model must be mlp or lenet, not '" + v + "'");
      o.model = v;
    } else if (flag == "--epochs") {
      o.epochs = parse_int<int>(flag, v, 1, 100000);
    } else if (flag == "--batch") {
      o.batch = parse_int<index_t>(flag, v, 1, 1 << 20);
    } else if (flag == "--lr") {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x > 0) || !std::isfinite(x))
        usage("--lr expects a positive number, not '" + v + "'");
      o.lr = x;
    } else if (flag == "--seed") {
      o.seed = parse_int<std::uint64_t>(flag, v, 0, std::uint64_t(1) << 62);
    } else if (flag == "--threads") {
      o.threads = parse_int<int>(flag, v, 1, 1024);
    } else if (flag == "--optimizer") {
      if (v != "sgd" && v != "adam") usage("--optimizer must be sgd or adam, not '" + v + "'");
      o.optimizer = v;
    } else if (flag == "--log") {
      o.log = v;
    } else if (flag == "--data") {
      o.data = v;
    } else if (flag == "--limit") {
      o.limit = parse_int<index_t>(flag, v, 1, index_t(1) << 40);
    } else if (flag == "--workers") {
      o.workers = parse_int<int>(flag, v, 1, 64);
    } else if (flag == "--backend") {
      if (v != "threads" && v != "mpi") {
        if (v == "nccl")
          usage(
              "--backend nccl: this example's layers run on the CPU backend; meld::nccl_comm "
              "needs a model whose tensors live on a CUDA device");
        usage("--backend must be threads or mpi, not '" + v + "'");
      }
      o.backend = v;
    } else {
      usage("unknown option '" + flag + "'");
    }
  }
  if (o.backend == "mpi" && o.workers != 1)
    usage("--workers is for --backend threads; under mpi the worker count is mpirun's -np");
  return o;
}

// The MLP of the issue: 784-256-128-10 with ReLU.
auto make_mlp() {
  return nn::sequential(nn::flatten<float>(), nn::linear<float>(784, 256), nn::relu<float>(),
                        nn::linear<float>(256, 128), nn::relu<float>(), nn::linear<float>(128, 10));
}

// The LeNet of d2l's multi-GPU chapter: conv 3x3 (20) - ReLU - avg pool 2 - conv 5x5 (50) -
// ReLU - avg pool 2 - dense 128 - ReLU - dense 10.
auto make_lenet() {
  return nn::sequential(nn::conv2d<float>(1, 20, 3), nn::relu<float>(), nn::avg_pool2d<float>(2),
                        nn::conv2d<float>(20, 50, 5), nn::relu<float>(), nn::avg_pool2d<float>(2),
                        nn::flatten<float>(), nn::linear<float>(800, 128), nn::relu<float>(),
                        nn::linear<float>(128, 10));
}

// A permutation of [0, n) from a seeded stream (Fisher-Yates).
std::vector<index_t> shuffled(index_t n, std::uint64_t seed) {
  std::vector<index_t> p(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) p[i] = i;
  if (n < 2) return p;
  const tensor<double> u = meld::rng(seed).uniform<double>({n});
  for (index_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<index_t>(u(i) * static_cast<double>(i + 1));
    std::swap(p[i], p[std::min(j, i)]);
  }
  return p;
}

// Copies samples order[first, first + count) of the data set into a batch.
void gather(const fashion_mnist::dataset& d, const std::vector<index_t>& order, index_t first,
            index_t count, tensor<float>& images, tensor<std::int64_t>& labels) {
  constexpr index_t pixels = fashion_mnist::rows * fashion_mnist::cols;
  if (images.shape()[0] != count) {
    images =
        tensor<float>({count, 1, fashion_mnist::rows, fashion_mnist::cols}, meld::uninitialized);
    labels = tensor<std::int64_t>({count}, meld::uninitialized);
  }
  for (index_t i = 0; i < count; ++i) {
    const index_t s = order[first + i];
    std::memcpy(images.data() + i * pixels, d.images.data() + s * pixels, pixels * sizeof(float));
    labels.data()[i] = d.labels.data()[s];
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  else
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

// Accuracy of the model on a data set, in evaluation mode, in batches.
template <class Model>
double accuracy(Model& model, const fashion_mnist::dataset& d) {
  model.train(false);
  constexpr index_t batch = 256;  // activations stay small enough to be reused, not re-faulted
  std::int64_t correct = 0;
  for (index_t first = 0; first < d.size(); first += batch) {
    const index_t count = std::min(batch, d.size() - first);
    const tensor<float> images(d.images.slice(meld::range(first, first + count)));
    const tensor<std::int64_t> labels(d.labels.slice(meld::range(first, first + count)));
    correct += nn::correct_predictions(model.forward(images), labels);
  }
  model.train(true);
  return static_cast<double>(correct) / static_cast<double>(d.size());
}

// The training loop, the same for every backend. dp is a meld::data_parallel over `model` (this
// process's replica); sum_over_processes adds a number over the processes (identity with
// threads); only the leader prints and logs.
template <class DP, class Model, class Optimizer, class SumOverProcesses>
int train(DP& dp, Model& model, Optimizer& opt, double base_lr, bool cosine, const options& o,
          const fashion_mnist::dataset& train_set, const fashion_mnist::dataset& test_set,
          SumOverProcesses&& sum_over_processes, bool leader) {
  std::FILE* log = nullptr;
  if (leader && !o.log.empty()) {
    log = std::fopen(o.log.c_str(), "w");
    if (!log) throw std::runtime_error("cannot write " + o.log + ": " + std::strerror(errno));
    std::fprintf(log, "epoch,train_loss,train_acc,test_acc,samples_per_sec,seconds\n");
  }
  const bool tty = leader && isatty(fileno(stderr));
  const index_t n = train_set.size();
  const index_t batches = (n + o.batch - 1) / o.batch;
  const index_t total_batches = batches * o.epochs;
  tensor<float> images({0});
  tensor<std::int64_t> labels({0});
  // The loss each worker runs on its shard: softmax cross-entropy, counting correct predictions
  // on the way (workers are threads: an atomic count).
  std::atomic<std::int64_t> correct{0};
  const auto loss = [&correct](const tensor<float>& logits, const tensor<std::int64_t>& targets,
                               tensor<float>& grad) {
    correct += nn::correct_predictions(logits, targets);
    return nn::cross_entropy(logits, targets, grad);
  };
  double train_seconds = 0, test_acc = 0;
  index_t trained = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    const std::vector<index_t> order =
        shuffled(n, o.seed * 1000003 + static_cast<std::uint64_t>(epoch));
    double loss_sum = 0, epoch_train = 0, last_report = 0;
    correct = 0;
    for (index_t b = 0; b < batches; ++b) {
      if (cosine) {  // cosine decay over the whole run, per step
        const double progress = static_cast<double>((epoch - 1) * batches + b) / total_batches;
        opt.set_lr(base_lr * 0.5 * (1 + std::cos(3.141592653589793 * progress)));
      }
      const auto step_start = std::chrono::steady_clock::now();
      const index_t first = b * o.batch, count = std::min(o.batch, n - first);
      gather(train_set, order, first, count, images, labels);
      // Shards, forward and backward on every worker, gradients averaged over the whole batch.
      loss_sum += dp.step(images, labels, loss) * static_cast<double>(count);
      opt.step();
      epoch_train += seconds_since(step_start);
      const index_t done = first + count;
      // Progress: in place on a terminal, four lines per epoch otherwise.
      const bool report =
          leader && (tty ? (epoch_train - last_report > 0.25 || b + 1 == batches)
                         : (4 * (b + 1) / batches != 4 * b / batches && b + 1 != batches));
      if (report) {
        last_report = epoch_train;
        const double rate = static_cast<double>(done) / epoch_train;
        const double left =
            (static_cast<double>(n - done) + static_cast<double>(n) * (o.epochs - epoch)) / rate;
        std::fprintf(stderr, "%sepoch %d/%d  %3d%%  loss %.4f  %.0f samples/s  %s left%s",
                     tty ? "\r" : "", epoch, o.epochs, int(100 * done / n),
                     loss_sum / static_cast<double>(done), rate, format_duration(left).c_str(),
                     tty ? "   " : "\n");
        std::fflush(stderr);
      }
    }
    if (tty) std::fprintf(stderr, "\n");
    train_seconds += epoch_train;
    trained += n;
    test_acc = accuracy(model, test_set);
    const double train_loss = loss_sum / static_cast<double>(n);
    const double train_acc =
        sum_over_processes(static_cast<double>(correct.load())) / static_cast<double>(n);
    const double rate = static_cast<double>(n) / epoch_train, took = seconds_since(epoch_start);
    if (!leader) continue;
    std::printf(
        "epoch %d/%d  train_loss %.4f  train_acc %.4f  test_acc %.4f  samples/s %.1f  "
        "time %.1fs\n",
        epoch, o.epochs, train_loss, train_acc, test_acc, rate, took);
    std::fflush(stdout);
    if (log) {
      std::fprintf(log, "%d,%.6f,%.6f,%.6f,%.1f,%.3f\n", epoch, train_loss, train_acc, test_acc,
                   rate, took);
      std::fflush(log);
    }
  }
  if (log) std::fclose(log);
  std::fflush(stderr);
  if (leader)
    std::printf("test_accuracy=%.4f samples_per_sec=%.1f\n", test_acc,
                static_cast<double>(trained) / train_seconds);
  return 0;
}

// The optimizer updates `model` (this process's replica) from the averaged gradients.
template <class DP, class Model, class Sum>
int with_optimizer(DP& dp, Model& model, const options& o, const fashion_mnist::dataset& train_set,
                   const fashion_mnist::dataset& test_set, Sum&& sum, bool leader) {
  if (o.optimizer == "adam") {
    const double lr = o.lr.value_or(1e-3);
    meld::optim::adam opt(model, {.lr = lr});
    return train(dp, model, opt, lr, false, o, train_set, test_set, sum, leader);
  }
  const double lr = o.lr.value_or(o.model == "mlp" ? 0.1 : 0.05);
  meld::optim::sgd opt(model, {.lr = lr, .momentum = 0.9, .nesterov = true});
  return train(dp, model, opt, lr, true, o, train_set, test_set, sum, leader);
}

template <class Model>
int run(Model model, const options& o, const fashion_mnist::dataset& train_set,
        const fashion_mnist::dataset& test_set) {
  nn::initialize(model, nn::kaiming_uniform{}, o.seed);
  model.requires_input_grad(false);  // the data needs no gradient
  if (o.backend == "mpi") {
#if defined(MELD_WITH_MPI)
    meld::mpi_comm comm;                  // MPI_COMM_WORLD: one worker per process
    meld::data_parallel dp(model, comm);  // checks the shapes, broadcasts rank 0's parameters
    const auto sum = [&comm](double x) {
      comm.allreduce(std::span<double>(&x, 1));
      return x;
    };
    return with_optimizer(dp, model, o, train_set, test_set, sum, comm.rank() == 0);
#else
    throw std::runtime_error(
        "--backend mpi: this build has no MPI (configure with -DMELD_ENABLE_MPI=ON)");
#endif
  }
  meld::thread_group group(o.workers);   // K ranks of a thread_comm, one thread each
  meld::data_parallel dp(model, group);  // rank 0 trains `model`; 1..K-1 hold replicas
  return with_optimizer(
      dp, model, o, train_set, test_set, [](double x) { return x; }, true);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
#if defined(MELD_WITH_MPI)
  // Outside the try block: an error is printed before MPI ends (after a failed collective,
  // finalizing can crash, and the message would be lost).
  std::optional<meld::mpi_session> mpi;
  if (o.backend == "mpi") mpi.emplace(argc, argv);
#endif
  try {
#if defined(MELD_WITH_MPI)
    int processes = 1, rank = 0;
    if (mpi) {
      MPI_Comm_size(MPI_COMM_WORLD, &processes);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
#else
    const int processes = 1, rank = 0;
#endif
    // Each worker is one CPU "device": the cores are divided among the workers (this assumes the
    // processes of an MPI run share one machine; set --threads or MELD_NUM_THREADS otherwise).
    const int workers = o.workers * processes;
    if (o.threads > 0)
      meld::set_num_threads(o.threads);
    else if (workers > 1 && !std::getenv("MELD_NUM_THREADS"))
      meld::set_num_threads(std::max(1, meld::num_threads() / workers));
    const auto t0 = std::chrono::steady_clock::now();
    fashion_mnist::dataset train_set =
        fashion_mnist::load(o.data, fashion_mnist::split::train, o.limit);
    fashion_mnist::dataset test_set = fashion_mnist::load(o.data, fashion_mnist::split::test);
    // Standardize with the training set's mean and standard deviation.
    const fashion_mnist::standardization norm = fashion_mnist::standardization_of(train_set);
    if (norm.constant && rank == 0)
      std::fprintf(stderr,
                   "train_fashion_mnist: warning: every training pixel is %g; the images are "
                   "centred, not scaled (their standard deviation is 0), and there is nothing to "
                   "learn from them\n",
                   static_cast<double>(norm.mean));
    fashion_mnist::standardize(train_set, norm);
    fashion_mnist::standardize(test_set, norm);
    if (rank == 0)  // one report, from rank 0
      std::printf(
          "fashion-mnist: %lld training and %lld test images from %s (%.1fs); model %s, "
          "%d epochs, batch %lld, %s, seed %llu, %d worker%s (%s) of %d thread%s\n",
          static_cast<long long>(train_set.size()), static_cast<long long>(test_set.size()),
          o.data.c_str(), seconds_since(t0), o.model.c_str(), o.epochs,
          static_cast<long long>(o.batch), o.optimizer.c_str(),
          static_cast<unsigned long long>(o.seed), workers, workers == 1 ? "" : "s",
          o.backend.c_str(), meld::num_threads(), meld::num_threads() == 1 ? "" : "s");
    std::fflush(stdout);
    if (o.model == "mlp") return run(make_mlp(), o, train_set, test_set);
    return run(make_lenet(), o, train_set, test_set);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "train_fashion_mnist: error: %s\n", e.what());
    std::fflush(stderr);
#if defined(MELD_WITH_MPI)
    // Reported: now end every process (a peer may be waiting for this one).
    if (mpi) mpi->abort(1);
#endif
    return 1;
  }
}
