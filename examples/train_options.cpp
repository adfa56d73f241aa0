// The training example's command line on CLI11 (train_options.hpp says what parse does).
#include "train_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <meld/distributed/ps_mode.hpp>
#include <meld/version.hpp>

namespace train_cli {
namespace {

constexpr const char* program = "train_fashion_mnist";

// One line, not the usage: the usage is 50 lines, and the problem would scroll out of sight
// above it (CLI11's own convention).
[[noreturn]] void fail(std::string problem) {
  for (char& c : problem)
    if (c == '\n') c = ' ';  // a few of CLI11's messages span lines
  std::fprintf(stderr, "%s: %s; run with --help for the options\n", program, problem.c_str());
  std::exit(2);
}

// An integer in [lo, hi]. CLI11's Range would say "Value 0 not in range 1 to 100000" and print
// its bounds beside every option in --help; this says it in the example's words, in the error
// only (the descriptions give the defaults).
template <class Int>
CLI::Validator integer_in(Int lo, Int hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno != 0 || x < static_cast<long long>(lo) ||
            x > static_cast<long long>(hi))
          return "expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "], not '" + v + "'";
        return {};
      },
      "");
}

// One of a few words.
CLI::Validator one_of(std::vector<std::string> words) {
  return CLI::Validator(
      [words](std::string& v) -> std::string {
        std::string list;
        for (const auto& w : words) {
          if (v == w) return {};
          list += (list.empty() ? "" : w == words.back() ? " or " : ", ") + w;
        }
        return "must be " + list + ", not '" + v + "'";
      },
      "");
}

// `--flag=` gives the flag an empty value. CLI11 2.1 would instead take the next argument as its
// value (`--save= --epochs 1` saves to a file named --epochs); as two arguments, `--flag ""`,
// the empty value reaches the checks below, which refuse it by name.
std::vector<std::string> split_empty_values(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.find('=') == a.size() - 1) {
      args.push_back(a.substr(0, a.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(a);
    }
  }
  return args;
}

}  // namespace

options parse(int argc, char** argv, options defaults, const build_facts& build) {
  options o = std::move(defaults);
  CLI::App app(std::string("Trains an MLP or LeNet on Fashion-MNIST with meld, built for the ") +
                   build.backend_name + " backend (" + build.policy_name +
                   "; other builds:\n"
                   "train_fashion_mnist for the cpu, train_fashion_mnist_sim for the simulated "
                   "device,\n"
                   "train_fashion_mnist_cuda for a GPU). The last line it prints is\n"
                   "  test_accuracy=<x> samples_per_sec=<y>",
               program);
  app.footer(
      "Every option also as --option=value. Under MPI:\n"
      "  mpirun -np K train_fashion_mnist --backend mpi [...]\n"
      "  mpirun -np S+W train_fashion_mnist --backend mpi --ps-servers S [--ps-mode M] [...]");
  // A flag given twice takes its last value: scripts append to a command line
  // (scripts/gpu-check.sh passes --epochs 10 ... --epochs 3), which CLI11 would refuse.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(26);
  app.set_version_flag(
      "--version",
      std::string(program) + " (meld " MELD_VERSION_STRING "), " + build.backend_name + " backend",
      "Print meld's version and exit");

  app.add_option("--model", o.model,
                 "mlp (784-256-128-10, ReLU) or lenet (d2l's LeNet: two conv +\n"
                 "average-pooling layers, dense 128, 10); default mlp")
      ->type_name("mlp|lenet")
      ->check(one_of({"mlp", "lenet"}));
  app.add_option("--epochs", o.epochs, "passes over the training set (default 10)")
      ->type_name("N")
      ->check(integer_in(1, 100000));
  app.add_option("--batch", o.batch, "minibatch size (default 256)")
      ->type_name("N")
      ->check(integer_in<std::int64_t>(1, 1 << 20));
  double lr = 0;
  app.add_option("--lr", lr,
                 "learning rate (default: sgd 0.1 for mlp, 0.05 for lenet;\n"
                 "adam 0.001)")
      ->type_name("X")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x > 0) || !std::isfinite(x))
              return "expects a positive number, not '" + v + "'";
            return {};
          },
          ""));
  app.add_option("--seed", o.seed, "seed of initialization and shuffling (default 0)")
      ->type_name("N")
      ->check(integer_in<std::uint64_t>(0, std::uint64_t(1) << 62));
  app.add_option("--threads", o.threads,
                 "threads meld uses per worker (default: MELD_NUM_THREADS, else\n"
                 "the cores divided among the workers)")
      ->type_name("N")
      ->check(integer_in(1, 1024));
  app.add_option("--optimizer", o.optimizer,
                 "sgd (Nesterov momentum 0.9, cosine learning-rate decay) or adam")
      ->type_name("sgd|adam")
      ->check(one_of({"sgd", "adam"}));
  app.add_option("--precision", o.precision,
                 "float, or bf16: the linear and convolution layers multiply their\n"
                 "weights, inputs and output gradients rounded to bfloat16,\n"
                 "accumulating in float, with float master weights and optimizer\n"
                 "state (nn::precision)")
      ->type_name("float|bf16")
      ->check(one_of({"float", "bf16"}));
  app.add_option("--log", o.log,
                 "write a CSV line per epoch: epoch, train and test loss, train\n"
                 "and test accuracy, samples/s, seconds, learning rate at the\n"
                 "epoch's first step (examples/plot_training.py plots it)")
      ->type_name("FILE.csv");
  app.add_option("--data", o.data, "directory of the four gzip IDX files (default\n" + o.data + ")")
      ->type_name("DIR");
  app.add_option("--limit", o.limit, "train on the first N samples only (quick checks)")
      ->type_name("N")
      ->check(integer_in<std::int64_t>(1, std::int64_t(1) << 40));
  app.add_option("--workers", o.workers, "data-parallel worker threads (default 1)")
      ->type_name("K")
      ->check(integer_in(1, 64));
  app.add_option("--backend", o.backend,
                 "threads (--workers K in this process), mpi (one worker per\n"
                 "process: mpirun -np K train_fashion_mnist --backend mpi) or, in\n"
                 "the cuda build, nccl (the default there: --workers K threads\n"
                 "over K GPUs, or one process per GPU under mpirun); threads and\n"
                 "mpi stage CUDA gradients through host memory (workers may\n"
                 "share a GPU)")
      ->type_name("threads|mpi|nccl")
      ->check(one_of({"threads", "mpi", "nccl"}));
  bool no_prefetch = false;
  app.add_flag("--no-prefetch", no_prefetch,
               "gather each batch when it is needed, not while the previous\n"
               "step computes");
  app.add_option("--save", o.save,
                 "write a checkpoint (model, optimizer, epoch and step) to PATH\n"
                 "at the end of every --save-every epochs and of the run")
      ->type_name("PATH");
  app.add_option("--save-every", o.save_every, "epochs between checkpoints (default 1)")
      ->type_name("N")
      ->check(integer_in(1, 100000));
  app.add_option("--resume", o.resume,
                 "continue the run saved in PATH from the epoch after it: the\n"
                 "same flags then give the same numbers as a run never\n"
                 "interrupted")
      ->type_name("PATH");
  app.add_option("--ps-servers", o.ps_servers,
                 "with --backend mpi: train through a parameter server; ranks\n"
                 "0 .. S-1 serve (SGD with momentum 0.7 and the cosine decay\n"
                 "on the servers), the others work (mpirun -np S+W)")
      ->type_name("S")
      ->check(integer_in(1, 4096));
  app.add_option("--ps-mode", o.ps_mode,
                 "sync (the update of data_parallel), async (each push applied\n"
                 "as it arrives) or stale:N (a worker runs at most N rounds\n"
                 "ahead); default sync")
      ->type_name("MODE")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              (void)meld::ps_mode::parse(v);
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
            return {};
          },
          ""));
  app.add_flag("--verbose", o.verbose,
               "first print meld's configuration (meld::print_configuration:\n"
               "version, compiler, instruction sets, threads, backends)");
  app.add_option("--trace", o.trace,
                 "record what meld does (operations per stream, waits,\n"
                 "data_parallel's forward, backward and bucket allreduces per\n"
                 "worker) and write it to FILE as a Chrome trace\n"
                 "(ui.perfetto.dev, chrome://tracing); under mpirun, rank r > 0\n"
                 "writes FILE.r. Best with --epochs 1 --limit N")
      ->type_name("FILE");
  std::size_t bucket_kb = 0;
  app.add_option("--bucket-kb", bucket_kb,
                 "data_parallel's gradient buckets, in KiB (default " +
                     std::to_string(o.bucket_bytes >> 10) +
                     ":\n"
                     "the MLP's gradients in one bucket; smaller ones overlap\n"
                     "backward)")
      ->type_name("N")
      ->check(integer_in<std::size_t>(1, std::size_t(1) << 30));

  app.add_flag("--shard-optimizer", o.shard_optimizer,
               "ZeRO stage 1: the workers reduce-scatter the gradients, each\n"
               "keeps the optimizer state of 1/K of the parameters and updates\n"
               "them, then they allgather the parameters (the same bits as\n"
               "without; --backend threads; --resume needs as many --workers)");

  const std::vector<std::string> args = split_empty_values(argc, argv);
  try {
    // CLI11 takes the arguments last first.
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::Success& e) {  // --help, --version
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    fail(e.what());
  }
  if (app.count("--lr")) o.lr = lr;
  if (app.count("--bucket-kb")) o.bucket_bytes = bucket_kb << 10;
  o.prefetch = !no_prefetch;

  // What the checks of single values cannot see.
  if (app.count("--save") && o.save.empty())
    fail("--save needs a path (an empty one would save nothing)");
  for (const char* flag : {"--resume", "--trace", "--log", "--data"})
    if (app.count(flag) && app[flag]->as<std::string>().empty())
      fail(std::string(flag) + " needs a path");
  if (o.backend == "nccl" && build.host_comms)
    fail(std::string("--backend nccl: this build trains on the ") + build.backend_name +
         " backend; meld::nccl_comm moves CUDA tensors: use train_fashion_mnist_cuda");
  if (o.ps_servers > 0 && o.backend != "mpi")
    fail("--ps-servers needs --backend mpi (servers and workers are MPI processes)");
  if (o.ps_servers > 0 && (!o.save.empty() || !o.resume.empty() || o.optimizer != "sgd"))
    fail(
        "--ps-servers: the servers run SGD with momentum; --save, --resume and --optimizer are "
        "for data_parallel training");
  if (o.shard_optimizer && o.backend != "threads")
    fail("--shard-optimizer is for --backend threads (its checkpoints hold every worker's shard)");
  if (o.backend == "mpi" && o.workers != 1)
    fail("--workers is for --backend threads or nccl; under mpi the worker count is mpirun's -np");
  return o;
}

}  // namespace train_cli
