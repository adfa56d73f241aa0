// libFuzzer target: nn::load_checkpoint on arbitrary bytes, into a small model and its Adam
// optimizer (and into the model alone). A load must succeed or throw nn::checkpoint_error, and a
// failed load must leave the model and the optimizer exactly as they were; another exception, a
// crash or a sanitizer report is a finding.
//
// MELD_FUZZ_WRITE_SEEDS=DIR fuzz_checkpoint writes valid checkpoints of this model into DIR (the
// seeds under tests/fuzz/corpus/checkpoint) and exits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <meld/nn/nn.hpp>

namespace nn = meld::nn;

namespace {

auto make_model() {
  auto net = nn::sequential(nn::linear<float>(3, 2), nn::batch_norm<float>(2));
  nn::initialize(net, nn::kaiming_uniform{}, 1);
  return net;
}
using model = decltype(make_model());

// Everything a checkpoint can change.
template <class O>
std::vector<double> state(model& m, O& opt) {
  std::vector<double> s;
  m.visit_parameters(
      [&](std::string_view, auto& p, auto&) { s.insert(s.end(), p.begin(), p.end()); });
  m.visit_buffers([&](std::string_view, auto& b) { s.insert(s.end(), b.begin(), b.end()); });
  opt.visit_state([&](std::string_view, auto& v) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, std::int64_t>)
      s.push_back(static_cast<double>(v));
    else
      s.insert(s.end(), v.begin(), v.end());
  });
  return s;
}

// The input as a file, in the working directory (CTest's is build/.../tests/fuzz/fuzz_checkpoint),
// rewritten for every input. (libFuzzer ends without running atexit handlers: a name of its own
// per process would leave one file per run.)
const std::filesystem::path& file() {
  static const std::filesystem::path p = "fuzz_checkpoint.input";
  return p;
}

void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto m = make_model();
  meld::optim::adam opt(m, {.lr = 0.01});
  nn::save_checkpoint(dir / "model.ckpt", m);
  nn::save_checkpoint(dir / "model_adam.ckpt", m, opt);
  meld::optim::sgd sgd(m, {.lr = 0.1, .momentum = 0.9});
  nn::save_checkpoint(dir / "model_sgd.ckpt", m, sgd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MELD_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::FILE* f = std::fopen(file().c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  }
  static auto m = make_model();
  static meld::optim::adam opt(m, {.lr = 0.01});
  const auto before = state(m, opt);
  try {
    nn::load_checkpoint(file(), m, opt);
  } catch (const nn::checkpoint_error&) {
    if (state(m, opt) != before) std::abort();  // a failed load changed something
  }
  const auto middle = state(m, opt);
  try {
    nn::load_checkpoint(file(), m);  // the model alone ignores optimizer entries
  } catch (const nn::checkpoint_error&) {
    if (state(m, opt) != middle) std::abort();
  }
  return 0;
}
