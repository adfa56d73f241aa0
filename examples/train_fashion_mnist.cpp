// Trains an MLP or LeNet on Fashion-MNIST with meld on one or many workers, reporting progress,
// per-epoch summaries, an optional CSV log, and, as its last line,
//   test_accuracy=<0.xxxx> samples_per_sec=<number>
//
//   train_fashion_mnist [--model mlp|lenet] [--epochs N] [--batch N] [--lr X] [--seed N]
//                       [--threads N] [--optimizer sgd|adam] [--log FILE] [--data DIR]
//                       [--limit N] [--workers K] [--no-prefetch] [--precision float|bf16]
//                       [--save PATH [--save-every N]] [--resume PATH] [--verbose]
//                       [--trace FILE] [--bucket-kb N] [--shard-optimizer] [--help]
//                       [--version]
//   mpirun -np K train_fashion_mnist --backend mpi [...]
//   mpirun -np S+W train_fashion_mnist --backend mpi --ps-servers S --ps-mode sync|async|stale:N
// (train_options.cpp parses them, with CLI11; --help says what each does.)
//
// On a terminal, progress is a bar redrawn in place (console.hpp); otherwise four plain
// lines per epoch. Either goes to stderr; the per-epoch summaries and the last line, to stdout.
// The backend is chosen when the example is compiled (MELD_EXAMPLE_BACKEND: CMake builds
// train_fashion_mnist for the CPU, train_fashion_mnist_sim for the simulated device and, with
// CUDA, train_fashion_mnist_cuda for a GPU, all from this file; MELD_EXAMPLE_BACKENDS picks them).
// The data set stays on the host; each batch is gathered there while the previous step computes
// (batch_pipeline.hpp) and copied to the device. On the CPU with several workers, each worker
// gathers its own shard instead, in parallel (data_parallel::step_gathered). A step reads nothing
// back on the host: the loss and the correct predictions are added up on the device and read when
// they are printed.
//
// Every step goes through meld::data_parallel: K worker threads in this process (thread_comm;
// on a device backend worker r uses device r; K = 1 is plain single-worker training), or one
// worker per MPI process. The global batch is split K ways and the gradients averaged, so the
// update is that of the whole batch; samples/s counts all workers together. The same seed and
// worker and thread counts give the same numbers on every run and on every backend
// (initialization, shuffling, shards and every reduction are deterministic).
// With --ps-servers S (under mpirun, CPU builds), training goes through meld::param_server
// instead: ranks 0 .. S-1 are servers, which keep the parameters (sliced by rows over the servers
// where large) and run SGD with momentum on them; the other ranks are workers, each computing the
// gradient of its shard of the global batch, pushing it and pulling the parameters back, with the
// consistency of --ps-mode (sync: the same update as data_parallel's; async; stale:N).
// --trace FILE records what meld did during the run (meld::trace; MELD_TRACE=FILE does the same for
// any meld program) and writes it as a Chrome trace that ui.perfetto.dev opens.
// examples/plot_training.py turns the CSV into a PNG.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <meld/distributed.hpp>
#include <meld/distributed/ps_mode.hpp>
#if defined(MELD_ENABLE_MPI)
#include <meld/distributed/param_server.hpp>
#endif
#if defined(MELD_ENABLE_NCCL)
#include <meld/distributed/nccl_comm.hpp>
#endif
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

#include "batch_pipeline.hpp"
#include "console.hpp"
#include "fashion_mnist.hpp"
#include "train_options.hpp"

namespace nn = meld::nn;
using meld::index_t;
using meld::tensor;

#ifndef MELD_EXAMPLE_BACKEND
#define MELD_EXAMPLE_BACKEND meld::cpu<>
#endif
#ifndef MELD_EXAMPLE_BACKEND_NAME
#define MELD_EXAMPLE_BACKEND_NAME "cpu"
#endif

namespace {

// Where this build trains: a compile-time choice, not a run-time switch.
using backend = MELD_EXAMPLE_BACKEND;
constexpr const char* backend_name = MELD_EXAMPLE_BACKEND_NAME;
constexpr const char* policy_name =
    std::is_same_v<backend::policy, meld::async> ? "asynchronous" : "synchronous";
using device_tensor = tensor<float, backend>;
using device_labels = tensor<std::int64_t, backend>;

// The host batch on the backend: a copy (a queued transfer on an asynchronous device), or the host
// tensor itself on the synchronous CPU backend, where a copy would be a serial pass over the batch
// before every step (3 MiB at batch 1024) that the data-parallel workers wait for.
template <class T>
decltype(auto) on_backend(const tensor<T>& host) {
  if constexpr (std::is_same_v<tensor<T, backend>, tensor<T>>)
    return (host);
  else
    return meld::to<backend>(host);
}
// Whether the host communicators (thread_comm, mpi_comm) reach the backend's memory in place
// (cpu, sim); a CUDA build moves gradients with NCCL, or stages them through host copies with
// --backend threads or mpi (workers sharing a GPU, clusters without NCCL).
constexpr bool host_comms = meld::detail::distributed::host_reachable<backend>;
#if defined(MELD_ENABLE_NCCL)
constexpr bool with_nccl = true;
#else
constexpr bool with_nccl = false;
#endif

using options = train_cli::options;

// data_parallel's options from the command line.
meld::data_parallel_options dp_options(const options& o) {
  meld::data_parallel_options d;
  d.bucket_bytes = o.bucket_bytes;
  d.shard_optimizer = o.shard_optimizer;
  return d;
}

// What the layers' products read (--precision).
nn::precision precision_of(const options& o) {
  return o.precision == "bf16" ? nn::precision::bfloat16 : nn::precision::float32;
}

// The MLP of the issue: 784-256-128-10 with ReLU.
auto make_mlp(const options& o) {
  using B = backend;
  const nn::linear_options l{.precision = precision_of(o)};
  return nn::sequential(nn::flatten<float, B>(), nn::linear<float, B>(784, 256, l),
                        nn::relu<float, B>(), nn::linear<float, B>(256, 128, l),
                        nn::relu<float, B>(), nn::linear<float, B>(128, 10, l));
}

// The LeNet of d2l's multi-GPU chapter: conv 3x3 (20) - ReLU - avg pool 2 - conv 5x5 (50) -
// ReLU - avg pool 2 - dense 128 - ReLU - dense 10. The convolutions apply their ReLU as they
// write their outputs (nn::activation: the same numbers as a relu layer, two passes over the
// largest activations fewer).
auto make_lenet(const options& o) {
  using B = backend;
  const nn::linear_options l{.precision = precision_of(o)};
  const nn::conv2d_options c{.precision = precision_of(o), .activation = nn::activation::relu};
  return nn::sequential(nn::conv2d<float, B>(1, 20, 3, c), nn::avg_pool2d<float, B>(2),
                        nn::conv2d<float, B>(20, 50, 5, c), nn::avg_pool2d<float, B>(2),
                        nn::flatten<float, B>(), nn::linear<float, B>(800, 128, l),
                        nn::relu<float, B>(), nn::linear<float, B>(128, 10, l));
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Correct predictions added up on the devices, one count per device (data_parallel's workers run
// the loss concurrently, each on its own device, or several on one: hence the lock around the
// enqueueing). Read when it is printed. The samples counted are known on the host: under MPI this
// process counts its own shards only, and the running accuracy is theirs.
class correct_counter {
 public:
  correct_counter() : counts_(static_cast<std::size_t>(meld::device_count<backend>())) {}
  void add(const device_tensor& logits, const device_labels& targets) {
    device_labels c = nn::correct_count(logits, targets);
    std::lock_guard lock(mutex_);
    auto& total = counts_[static_cast<std::size_t>(logits.device())];
    if (total.size() == 0)
      total = std::move(c);
    else
      total += c;
    samples_ += logits.shape()[0];
  }
  // The fraction counted correct so far (0 before any sample): one transfer per device.
  double accuracy() {
    std::lock_guard lock(mutex_);
    return samples_ > 0 ? static_cast<double>(sum()) / static_cast<double>(samples_) : 0.0;
  }
  // The sum over the devices, and a fresh start.
  std::int64_t take() {
    std::lock_guard lock(mutex_);
    const std::int64_t s = sum();
    for (auto& c : counts_) c = device_labels();
    samples_ = 0;
    return s;
  }

 private:
  std::int64_t sum() const {
    std::int64_t s = 0;
    for (const auto& c : counts_)
      if (c.size()) s += meld::to<meld::cpu<>>(c)(0);
    return s;
  }
  std::mutex mutex_;
  std::vector<device_labels> counts_;
  index_t samples_ = 0;
};

// Accuracy and mean loss of the model on a data set, in evaluation mode, in batches copied to the
// device; progress in place on a terminal.
struct evaluation {
  double accuracy, loss;
};
template <class Model>
evaluation evaluate(Model& model, const fashion_mnist::dataset& d, bool show_progress) {
  model.train(false);
  constexpr index_t batch = 256;  // activations stay small enough to be reused, not re-faulted
  correct_counter correct;
  nn::loss_value<float, backend> loss;
  console::line line(stderr);
  for (index_t first = 0; first < d.size(); first += batch) {
    const index_t count = std::min(batch, d.size() - first);
    const device_tensor images =
        meld::to<backend>(tensor<float>(d.images.slice(meld::range(first, first + count))));
    const device_labels labels =
        meld::to<backend>(tensor<std::int64_t>(d.labels.slice(meld::range(first, first + count))));
    const device_tensor logits = model.forward(images);
    correct.add(logits, labels);
    loss += nn::cross_entropy(logits, labels);
    if (show_progress && (first / batch) % 8 == 0) {
      const double done = static_cast<double>(first + count) / static_cast<double>(d.size());
      line.draw("evaluating", done, {std::to_string(static_cast<int>(100 * done)) + "%"});
    }
  }
  line.clear();
  model.train(true);
  return {static_cast<double>(correct.take()) / static_cast<double>(d.size()), loss.get()};
}

// The optimizer with the run's progress, which a checkpoint records beside the optimizer's state
// (so that --resume continues at the next epoch, with the same learning-rate schedule).
template <class O>
struct with_progress {
  using model_type = typename O::model_type;
  O* opt;
  std::int64_t epochs_done = 0, steps_done = 0;
  void step() { opt->step(); }
  void zero_grad() { opt->zero_grad(); }
  template <class F>
  void visit_state(F&& f) {
    opt->visit_state(f);
    f(std::string_view("train.epochs_done"), epochs_done);
    f(std::string_view("train.steps_done"), steps_done);
  }
};

// The training loop, the same for every backend. dp is a meld::data_parallel over `model` (this
// process's replica); sum_over_processes adds a number over the processes (identity with
// threads); only the leader prints and logs. The loss and the correct predictions stay on the
// device: they are read when progress is printed (a few times per epoch) and at each epoch's end.
template <class DP, class Model, class Optimizer, class SumOverProcesses>
int train(DP& dp, Model& model, Optimizer& opt, double base_lr, bool cosine, const options& o,
          const fashion_mnist::dataset& train_set, const fashion_mnist::dataset& test_set,
          SumOverProcesses&& sum_over_processes, bool leader) {
  std::FILE* log = nullptr;
  if (leader && !o.log.empty()) {
    log = std::fopen(o.log.c_str(), "w");
    if (!log) throw std::runtime_error("cannot write " + o.log + ": " + std::strerror(errno));
    std::fprintf(log, "epoch,train_loss,test_loss,train_acc,test_acc,samples_per_sec,seconds,lr\n");
  }
  const bool tty = leader && console::is_terminal(stderr);
  const index_t n = train_set.size();
  const index_t batches = (n + o.batch - 1) / o.batch;
  const index_t total_batches = batches * o.epochs;
  // On the synchronous CPU backend with several workers (threads or processes), each worker
  // gathers its own shard of the batch from the data set, on its own thread: every sample is
  // copied once, in parallel, and no pipeline thread competes with the workers for the cores
  // (benchmarks/RESULTS.md, "Data-parallel scaling in the training example").
  // Otherwise the pipeline gathers the next batch while a step computes: with one worker it runs
  // on a core the step leaves idle; on a device the copy to it overlaps the step too.
  // (DP is a meld::data_parallel here, or the parameter-server step, which has no world_size.)
  constexpr bool can_gather_in_workers = std::is_same_v<device_tensor, tensor<float>> && requires {
    dp.world_size();
  };
  bool gather_in_workers = false;
  if constexpr (can_gather_in_workers) gather_in_workers = dp.world_size() > 1;
  fashion_mnist::batch_pipeline pipeline(train_set, o.batch, o.prefetch && !gather_in_workers);
  std::vector<index_t> order;  // this epoch's, for the workers' gathering
  // The loss each worker runs on its shard: softmax cross-entropy, counting correct predictions
  // on the way (on the device).
  correct_counter correct;
  const auto loss = [&correct](const device_tensor& logits, const device_labels& targets,
                               device_tensor& grad) {
    correct.add(logits, targets);
    return nn::cross_entropy(logits, targets, grad);
  };
  double train_seconds = 0, test_acc = 0;
  index_t trained = 0;
  with_progress<Optimizer> progress{&opt};
  if (!o.resume.empty()) {  // every rank loads the same file (threads: rank 0's model)
    nn::load_checkpoint(o.resume, model, progress);
    // A sharded optimizer's replicas take rank 0's loaded parameters now (its allgathers, not
    // a copy at each step, keep them equal).
    if constexpr (requires { dp.sharded(); })
      if (dp.sharded()) dp.broadcast_parameters();
    if (leader)
      std::printf("resumed %s after epoch %lld (%lld steps)\n", o.resume.c_str(),
                  static_cast<long long>(progress.epochs_done),
                  static_cast<long long>(progress.steps_done));
    if (progress.epochs_done >= o.epochs)
      throw std::runtime_error(meld::detail::cat("--resume ", o.resume, ": the run there has ",
                                                 progress.epochs_done, " epochs; --epochs ",
                                                 o.epochs, " asks for no more"));
  }
  // The learning rate of a step: cosine decay over the whole run, per step, or constant.
  const auto lr_at = [&](int epoch, index_t b) {
    if (!cosine) return base_lr;
    const double t = static_cast<double>((epoch - 1) * batches + b) / total_batches;
    return base_lr * 0.5 * (1 + std::cos(3.141592653589793 * t));
  };
  // The time left counts the evaluations of the test set too: the last one measured, or before
  // any, a guess from the training rate (a forward pass is about a third of a training step's
  // forward, backward and update).
  double evaluation_seconds = -1;
  const auto run_start = std::chrono::steady_clock::now();
  console::line line(stderr);
  for (int epoch = static_cast<int>(progress.epochs_done) + 1; epoch <= o.epochs; ++epoch) {
    const meld::trace_range traced_epoch("epoch", "train", {"epoch", epoch});
    const auto epoch_start = std::chrono::steady_clock::now();
    order = shuffled(n, o.seed * 1000003 + static_cast<std::uint64_t>(epoch));
    if (!gather_in_workers) pipeline.start_epoch(order);
    typename DP::loss_type epoch_loss;
    double last_report = 0;
    index_t done = 0;
    const double epoch_lr = lr_at(epoch, 0);
    for (index_t b = 0; b < batches; ++b) {
      if (cosine) opt.set_lr(lr_at(epoch, b));
      const meld::trace_range traced_step("train step", "train", {"batch", b});
      const index_t first = b * o.batch, count = std::min(o.batch, n - first);
      // Shards, forward and backward on every worker, gradients averaged over the whole batch.
      if (gather_in_workers) {
        if constexpr (can_gather_in_workers)
          epoch_loss += dp.template step_gathered<device_labels>(
              count,
              // Generic: checked only where the tensors are host tensors (not in the sim and
              // CUDA builds, where gather's non-dependent call would be checked anyway).
              [&](index_t lo, index_t hi, auto& images, auto& labels) {
                fashion_mnist::gather(train_set, order, first + lo, hi - lo, images, labels);
              },
              loss);
      } else {
        const auto& batch = pipeline.next();  // gathered while the last step computed
        const device_tensor& images = on_backend(batch.images);  // valid until the next batch
        const device_labels& labels = on_backend(batch.labels);
        epoch_loss += dp.step(images, labels, loss);
      }
      progress.step();
      ++progress.steps_done;
      done += count;
      // Progress: in place on a terminal (four times a second), four plain lines per epoch
      // otherwise (logs).
      const double elapsed = seconds_since(epoch_start);
      const bool report =
          leader && (tty ? (elapsed - last_report > 0.25 || b + 1 == batches)
                         : (4 * (b + 1) / batches != 4 * b / batches && b + 1 != batches));
      if (!report) continue;
      last_report = elapsed;
      const double rate = static_cast<double>(done) / elapsed;
      const double evaluation_time = evaluation_seconds >= 0
                                         ? evaluation_seconds
                                         : static_cast<double>(test_set.size()) / (3 * rate);
      const double left =
          (static_cast<double>(n - done) + static_cast<double>(n) * (o.epochs - epoch)) / rate +
          evaluation_time * (o.epochs - epoch + 1);
      if (tty) {
        char step[48], times[64], loss_text[32], acc[32], speed[40];
        std::snprintf(step, sizeof step, "%lld/%lld", static_cast<long long>(b + 1),
                      static_cast<long long>(batches));
        std::snprintf(times, sizeof times, "%s elapsed, %s left",
                      console::duration(seconds_since(run_start)).c_str(),
                      console::duration(left).c_str());
        std::snprintf(loss_text, sizeof loss_text, "loss %.4f", epoch_loss.get());
        std::snprintf(acc, sizeof acc, "acc %.4f", correct.accuracy());
        std::snprintf(speed, sizeof speed, "%.0f samples/s", rate);
        line.draw("epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs),
                  static_cast<double>(done) / static_cast<double>(n),
                  {step, times, loss_text, acc, speed});
      } else {
        std::fprintf(stderr, "epoch %d/%d  %3d%%  loss %.4f  acc %.4f  %.0f samples/s  %s left\n",
                     epoch, o.epochs, int(100 * done / n), epoch_loss.get(), correct.accuracy(),
                     rate, console::duration(left).c_str());
        std::fflush(stderr);
      }
    }
    line.finish();
    // The step time includes the device's work: wait for it before stopping the clock.
    meld::synchronize();
    const double epoch_train = seconds_since(epoch_start);
    train_seconds += epoch_train;
    trained += n;
    const double train_loss = epoch_loss.get();
    const double train_acc =
        sum_over_processes(static_cast<double>(correct.take())) / static_cast<double>(n);
    const auto evaluation_start = std::chrono::steady_clock::now();
    const evaluation test = [&] {
      const meld::trace_range traced("evaluate", "train");
      return evaluate(model, test_set, tty);
    }();
    evaluation_seconds = seconds_since(evaluation_start);
    test_acc = test.accuracy;
    progress.epochs_done = epoch;
    if (leader && !o.save.empty() && (epoch % o.save_every == 0 || epoch == o.epochs))
      nn::save_checkpoint(o.save, model, progress);
    const double rate = static_cast<double>(n) / epoch_train, took = seconds_since(epoch_start);
    if (!leader) continue;
    std::printf(
        "epoch %d/%d  train_loss %.4f  test_loss %.4f  train_acc %.4f  test_acc %.4f  "
        "samples/s %.1f  time %.1fs\n",
        epoch, o.epochs, train_loss, test.loss, train_acc, test_acc, rate, took);
    std::fflush(stdout);
    if (log) {
      // The learning rate of the epoch's first step (sgd's cosine decay: base_lr, then lower).
      std::fprintf(log, "%d,%.6f,%.6f,%.6f,%.6f,%.1f,%.3f,%.6g\n", epoch, train_loss, test.loss,
                   train_acc, test_acc, rate, took, epoch_lr);
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

// The optimizer updates `model` (this process's replica) from the averaged gradients; with
// --shard-optimizer (threads), each worker updates its shard of the parameters.
template <class DP, class Model, class Sum>
int with_optimizer(DP& dp, Model& model, const options& o, const fashion_mnist::dataset& train_set,
                   const fashion_mnist::dataset& test_set, Sum&& sum, bool leader) {
  if constexpr (std::is_same_v<typename DP::comm_type, meld::thread_comm>) {
    if (o.shard_optimizer) {
      if (o.optimizer == "adam") {
        const double lr = o.lr.value_or(1e-3);
        auto opt = meld::shard_optimizer<meld::optim::adam>(dp, {.lr = lr});
        return train(dp, model, opt, lr, false, o, train_set, test_set, sum, leader);
      }
      const double lr = o.lr.value_or(o.model == "mlp" ? 0.1 : 0.05);
      auto opt = meld::shard_optimizer<meld::optim::sgd>(
          dp, {.lr = lr, .momentum = 0.9, .nesterov = true});
      return train(dp, model, opt, lr, true, o, train_set, test_set, sum, leader);
    }
  }
  if (o.optimizer == "adam") {
    const double lr = o.lr.value_or(1e-3);
    meld::optim::adam opt(model, {.lr = lr});
    return train(dp, model, opt, lr, false, o, train_set, test_set, sum, leader);
  }
  const double lr = o.lr.value_or(o.model == "mlp" ? 0.1 : 0.05);
  meld::optim::sgd opt(model, {.lr = lr, .momentum = 0.9, .nesterov = true});
  return train(dp, model, opt, lr, true, o, train_set, test_set, sum, leader);
}

// The model on this build's backend, initialized from the seed (the same on every worker).
template <class Make>
auto make_model(const Make& make, const options& o) {
  auto model = make();
  nn::initialize(model, nn::kaiming_uniform{}, o.seed);
  model.requires_input_grad(false);  // the data needs no gradient
  return model;
}

#if defined(MELD_ENABLE_NCCL)
// A CUDA build: one NCCL rank per GPU, each training its own replica in process mode (the
// data-parallel step keeps each rank's shard of the global batch): K threads of this process
// over K GPUs, or under mpirun one process per GPU (the NCCL id travels over MPI). Host numbers
// (the correct predictions) are summed over a host communicator beside.
template <class Make>
int run_nccl(const Make& make, const options& o, const fashion_mnist::dataset& train_set,
             const fashion_mnist::dataset& test_set, bool under_mpi) {
  const int gpus = meld::device_count<backend>();
  auto one = [&](meld::nccl_comm& comm, auto&& sum, bool leader) {
    meld::device_guard<backend> on(comm.device());
    auto model = make_model(make, o);
    // Checks the shapes and broadcasts rank 0's parameters.
    meld::data_parallel dp(model, comm, dp_options(o));
    return with_optimizer(dp, model, o, train_set, test_set, sum, leader);
  };
#if defined(MELD_ENABLE_MPI)
  if (under_mpi) {
    meld::mpi_comm host;
    meld::nccl_comm comm(host, host.rank() % gpus);  // ranks of one machine share its GPUs
    return one(
        comm,
        [&host](double x) {
          host.allreduce(std::span<double>(&x, 1));
          return x;
        },
        host.rank() == 0);
  }
#else
  (void)under_mpi;
#endif
  if (o.workers > gpus)
    throw std::runtime_error(meld::detail::cat("--workers ", o.workers, ": NCCL needs a GPU per ",
                                               "rank, and ", gpus, " are visible"));
  ncclUniqueId id{};
  if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed");
  meld::thread_group host(o.workers);  // host numbers between the worker threads
  int status = 0;
  host.run([&](meld::thread_comm& hc) {
    meld::nccl_comm comm(o.workers, hc.rank(), id, hc.rank());
    const int s = one(
        comm,
        [&hc](double x) {
          hc.allreduce(std::span<double>(&x, 1));
          return x;
        },
        hc.rank() == 0);
    if (hc.rank() == 0) status = s;
  });
  return status;
}
#endif

#if defined(MELD_ENABLE_MPI)
// Parameter-server training: what train() calls a data-parallel step and an optimizer. A worker's
// step computes the mean gradient of its shard of the global batch (data_parallel over this
// process alone), then pushes each parameter's gradient and pulls the parameter back, every key
// in flight at once; the servers' SGD is the optimizer, so the local one does nothing.
template <class DP, class Model>
struct ps_worker_step {
  using loss_type = typename DP::loss_type;
  DP& local;
  Model& model;
  meld::param_server<float>& ps;
  std::vector<meld::ps_handle> pending;

  template <class Labels, class Loss>
  loss_type step(const device_tensor& images, const Labels& labels, const Loss& loss) {
    const index_t n = images.shape()[0], w = ps.worker_index(), W = ps.workers();
    const index_t lo = n * w / W, hi = n * (w + 1) / W;
    const device_tensor x(images.slice(meld::range(lo, hi)));
    const Labels y(labels.slice(meld::range(lo, hi)));
    loss_type l = local.step(x, y, loss);
    int key = 0;
    // The elements in place, once the queued work on them has run (host memory, or the
    // simulated device's, which the host can alias). Generic lambdas: checked only where used,
    // not in the CUDA build, whose tensors as_span refuses (nvcc checks non-dependent calls).
    model.visit_parameters([&](std::string_view, auto& p, auto& g) {
      pending.push_back(ps.push(key, meld::detail::distributed::as_span(std::as_const(g))));
      pending.push_back(ps.pull(key++, meld::detail::distributed::as_span(p)));
    });
    for (auto& h : pending) h.wait();
    pending.clear();
    return l;
  }
};
template <class Model>
struct on_the_servers {  // the optimizer of a parameter-server worker
  using model_type = Model;
  void step() {}
  void zero_grad() {}
  void set_lr(double) {}
  template <class F>
  void visit_state(F&&) {}
};

template <class Make>
int run_ps(const Make& make, const options& o, const fashion_mnist::dataset& train_set,
           const fashion_mnist::dataset& test_set) {
  if constexpr (!host_comms) {
    throw std::runtime_error(std::string("--ps-servers: the parameter server moves host memory; "
                                         "the ") +
                             backend_name + " build trains on a device");
  } else {
    meld::ps_options po;
    po.servers = o.ps_servers;
    po.mode = meld::ps_mode::parse(o.ps_mode);
    const double lr = o.lr.value_or(o.model == "mlp" ? 0.1 : 0.05);
    // SGD with momentum on the servers, its rate decayed over the run by a cosine, per update of
    // a key (a round; in async mode, each worker's push): the same schedule as data_parallel's.
    // Momentum 0.7, not data_parallel's 0.9: stale gradients act as momentum of their own, and at
    // 0.9 the async and stale:2 runs ended 1.2 and 3.7 points below sync (10 epochs, 2 workers);
    // at 0.7 every mode is within 0.6 points (benchmarks/RESULTS.md).
    int processes = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &processes);
    const int W = processes - o.ps_servers;
    const double updates = static_cast<double>((train_set.size() + o.batch - 1) / o.batch) *
                           o.epochs * (po.mode.mode == meld::ps_mode::kind::async ? W : 1);
    const auto cosine = [lr, updates](std::uint64_t step) {
      const double t = std::min(1.0, static_cast<double>(step) / updates);
      return static_cast<float>(lr * 0.5 * (1 + std::cos(3.141592653589793 * t)));
    };
    meld::param_server<float> ps(MPI_COMM_WORLD, po, meld::ps_sgd<float>(cosine, 0.7f));
    MPI_Comm workers;  // for the accuracy's sum
    MPI_Comm_split(MPI_COMM_WORLD, ps.is_worker() ? 0 : MPI_UNDEFINED, ps.rank(), &workers);
    if (!ps.is_worker()) {
      ps.serve();
      return 0;
    }
    if (ps.worker_index() == 0)
      std::printf("parameter server: %d server%s, %d worker%s, mode %s\n", ps.servers(),
                  ps.servers() == 1 ? "" : "s", ps.workers(), ps.workers() == 1 ? "" : "s",
                  po.mode.str().c_str());
    auto model = make_model(make, o);
    int key = 0;
    model.visit_parameters([&](std::string_view, auto& p, auto&) {
      const index_t rows = p.rank() > 1 ? p.shape()[0] : p.size();
      ps.init(key++, meld::detail::distributed::as_span(std::as_const(p)), p.size() / rows).wait();
    });
    meld::mpi_comm self(MPI_COMM_SELF);
    meld::data_parallel local(model, self);
    ps_worker_step<decltype(local), decltype(model)> step{local, model, ps, {}};
    on_the_servers<decltype(model)> opt;
    const auto sum = [workers](double x) {
      double total = 0;
      MPI_Allreduce(&x, &total, 1, MPI_DOUBLE, MPI_SUM, workers);
      return total;
    };
    // The schedule is the servers' (on_the_servers::set_lr does nothing): train() computes it per
    // step only for the log, where it is the rate the servers apply (in async mode, each of the
    // W workers' pushes counts as 1/W of a step of the schedule).
    const int status =
        train(step, model, opt, lr, true, o, train_set, test_set, sum, ps.worker_index() == 0);
    ps.close();
    MPI_Comm_free(&workers);
    return status;
  }
}
#endif

template <class Make>
int run(const Make& make, const options& o, const fashion_mnist::dataset& train_set,
        const fashion_mnist::dataset& test_set, bool under_mpi) {
  if (o.backend == "nccl") {
#if defined(MELD_ENABLE_NCCL)
    if constexpr (!host_comms) return run_nccl(make, o, train_set, test_set, under_mpi);
#endif
    throw std::runtime_error(std::string("--backend nccl: the ") + backend_name +
                             " build has no NCCL (configure with -DMELD_ENABLE_NCCL=ON)");
  } else {
    (void)under_mpi;
#if defined(MELD_ENABLE_MPI)
    if (o.ps_servers > 0) return run_ps(make, o, train_set, test_set);
#endif
    auto model = make_model(make, o);
    if (o.backend == "mpi") {
#if defined(MELD_ENABLE_MPI)
      meld::mpi_comm comm;  // MPI_COMM_WORLD: one worker per process
      // Checks the shapes and broadcasts rank 0's parameters.
      meld::data_parallel dp(model, comm, dp_options(o));
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
    meld::thread_group group(o.workers);  // K ranks of a thread_comm, one thread each
    // Rank 0 trains `model`; 1..K-1 hold replicas.
    meld::data_parallel dp(model, group, dp_options(o));
    return with_optimizer(
        dp, model, o, train_set, test_set, [](double x) { return x; }, true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  options defaults;
  defaults.data = fashion_mnist::default_directory;
  defaults.backend = !host_comms && with_nccl ? "nccl" : "threads";
  defaults.bucket_bytes = meld::data_parallel_options{}.bucket_bytes;
  const options o =
      train_cli::parse(argc, argv, std::move(defaults), {backend_name, policy_name, host_comms});
#if defined(MELD_ENABLE_MPI)
  // Outside the try block: an error is printed before MPI ends (after a failed collective,
  // finalizing can crash, and the message would be lost).
  // --backend mpi, or nccl under mpirun (Open MPI's or a PMI launcher's variables say so).
  const bool launched_by_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  std::optional<meld::mpi_session> mpi;
  if (o.backend == "mpi" || (o.backend == "nccl" && launched_by_mpirun)) mpi.emplace(argc, argv);
#endif
  try {
#if defined(MELD_ENABLE_MPI)
    int processes = 1, rank = 0;
    if (mpi) {
      MPI_Comm_size(MPI_COMM_WORLD, &processes);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
#else
    const int processes = 1, rank = 0;
    const bool mpi = false;
#endif
    // Each worker is one CPU "device": the cores are divided among the workers (this assumes the
    // processes of an MPI run share one machine; set --threads or MELD_NUM_THREADS otherwise).
    const int workers = o.workers * processes;
    if (o.threads > 0)
      meld::set_num_threads(o.threads);
    else if (workers > 1 && !std::getenv("MELD_NUM_THREADS"))
      meld::set_num_threads(std::max(1, meld::num_threads() / workers));
    if (!o.trace.empty())
      meld::trace::start(rank == 0 ? o.trace : o.trace + "." + std::to_string(rank));
    if (o.verbose && rank == 0) {  // after the thread count is settled, which it reports
      meld::print_configuration(std::cout);
      std::cout.flush();
    }
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
          "%d epoch%s, batch %lld, %s, seed %llu, %d worker%s (%s) of %d thread%s\n",
          static_cast<long long>(train_set.size()), static_cast<long long>(test_set.size()),
          o.data.c_str(), seconds_since(t0), o.model.c_str(), o.epochs, o.epochs == 1 ? "" : "s",
          static_cast<long long>(o.batch), o.optimizer.c_str(),
          static_cast<unsigned long long>(o.seed), workers, workers == 1 ? "" : "s",
          o.backend.c_str(), meld::num_threads(), meld::num_threads() == 1 ? "" : "s");
    std::fflush(stdout);
    const bool under_mpi = static_cast<bool>(mpi);
    const int status = o.model == "mlp"
                           ? run([&] { return make_mlp(o); }, o, train_set, test_set, under_mpi)
                           : run([&] { return make_lenet(o); }, o, train_set, test_set, under_mpi);
    if (!o.trace.empty()) meld::trace::stop();  // writes the file
    return status;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "train_fashion_mnist: error: %s\n", e.what());
    std::fflush(stderr);
#if defined(MELD_ENABLE_MPI)
    // Reported: now end every process (a peer may be waiting for this one).
    if (mpi) mpi->abort(1);
#endif
    return 1;
  }
}
