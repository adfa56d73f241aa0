// The training example's command line: the options, and their parser (train_options.cpp, on
// CLI11). The parser lives in its own translation unit, compiled once for every build of the
// example: nvcc, which compiles the CUDA build's main file, never sees CLI11, and the other
// builds do not parse CLI11's headers again each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace train_cli {

// What the build of the example decides, which the command line reports (--help, --version) or
// checks (--backend nccl).
struct build_facts {
  const char* backend_name;  // "cpu", "sim", "cuda" or "emu"
  const char* policy_name;   // "synchronous" or "asynchronous"
  bool host_comms;           // thread_comm and mpi_comm reach the backend's memory in place
};

struct options {
  std::string model = "mlp";
  int epochs = 10;
  std::int64_t batch = 256;
  std::optional<double> lr;  // unset: the optimizer's and model's default
  std::uint64_t seed = 0;
  int threads = 0;  // 0: meld's default (MELD_NUM_THREADS or every core)
  std::string optimizer = "sgd";
  std::string precision = "float";  // or "bf16": what the layers' products read (nn::precision)
  std::string log;                  // a CSV line per epoch, when set
  std::string data;
  std::int64_t limit = 0;  // 0: every training image
  int workers = 1;
  std::string backend = "threads";
  bool prefetch = true;
  std::string save, resume;
  int save_every = 1;
  int ps_servers = 0;  // 0: data_parallel; else meld::param_server with this many servers
  std::string ps_mode = "sync";
  bool verbose = false;  // print meld's configuration first
  std::string trace;     // write a Chrome trace of the run here
  std::size_t bucket_bytes = 0;
  bool shard_optimizer = false;  // ZeRO stage 1 (data_parallel_options::shard_optimizer)
};

// The options from the command line, over `defaults` (which hold the build's defaults: data,
// backend, bucket_bytes). --help prints the usage on stdout and --version meld's version, then
// exit with status 0. A bad flag or value, or flags that do not go together, print one line on
// stderr naming the problem and pointing at --help, then exit with status 2.
options parse(int argc, char** argv, options defaults, const build_facts& build);

}  // namespace train_cli
