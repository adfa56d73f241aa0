// Checkpoints: round trips (parameters, buffers, optimizer state; training resumes exactly), and
// every way a file can be wrong: missing, truncated, corrupted bytes, bad magic, other version,
// other element type, other names or shapes. A failed load must leave everything unchanged.
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "nn_support.hpp"

namespace nn = meld::nn;
namespace optim = meld::optim;
using meld::index_t;
using meld::tensor;

namespace {

std::filesystem::path temp_file(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "meld_test_checkpoint";
  std::filesystem::create_directories(dir);
  return dir / name;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
auto make_net(std::uint64_t seed) {
  auto net =
      nn::sequential(nn::linear<T>(4, 6), nn::batch_norm<T>(6), nn::relu<T>(), nn::linear<T>(6, 3));
  nn::initialize(net, nn::kaiming_uniform{}, seed);
  return net;
}

template <class Net, class Opt>
void train_steps(Net& net, Opt& opt, int steps, std::uint32_t seed) {
  for (int s = 0; s < steps; ++s) {
    const auto x = test::random_tensor<typename Net::value_type>({8, 4}, seed + s);
    tensor<std::int64_t> y({8});
    for (int i = 0; i < 8; ++i) y(i) = (i + s) % 3;
    tensor<typename Net::value_type> grad;
    nn::cross_entropy(net.forward(x), y, grad);
    net.backward(grad);
    opt.step();
    opt.zero_grad();
  }
}

// Everything a checkpoint holds, for "unchanged" checks.
template <class Net, class Opt>
std::vector<std::vector<double>> state(Net& net, Opt& opt) {
  auto s = nn_test::snapshot(net);
  opt.visit_state([&](std::string_view, auto& v) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, std::int64_t>)
      s.push_back({static_cast<double>(v)});
    else
      s.emplace_back(v.begin(), v.end());
  });
  return s;
}

// The files in `dir` whose names start with `prefix` (temporary files a save left behind).
std::vector<std::string> files_starting(const std::filesystem::path& dir,
                                        const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

// Rewrites the checksum of a (deliberately edited) file so that a later check is reached.
void fix_checksum(std::string& bytes) {
  const std::uint32_t crc = nn::detail::ckpt::crc32(
      reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

}  // namespace

TEST_CASE("crc32 matches the standard check value", "[nn]") {
  const char* s = "123456789";
  REQUIRE(nn::detail::ckpt::crc32(reinterpret_cast<const unsigned char*>(s), 9) == 0xCBF43926u);
}

TEST_CASE("checkpoint round trip: parameters, buffers, optimizer state; training resumes", "[nn]") {
  const auto path = temp_file("round_trip.ckpt");
  auto net = make_net<float>(1);
  optim::sgd opt(net, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  train_steps(net, opt, 3, 10);
  nn::save_checkpoint(path, net, opt);
  REQUIRE(files_starting(path.parent_path(), "round_trip.ckpt.").empty());  // no temporary left

  auto other = make_net<float>(2);
  optim::sgd other_opt(other, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  REQUIRE(state(other, other_opt) != state(net, opt));
  nn::load_checkpoint(path, other, other_opt);
  REQUIRE(state(other, other_opt) == state(net, opt));
  REQUIRE(other_opt.steps() == 3);

  // Both continue identically (momentum buffers and batch-norm statistics included).
  train_steps(net, opt, 2, 20);
  train_steps(other, other_opt, 2, 20);
  REQUIRE(state(other, other_opt) == state(net, opt));

  // A model alone loads from a file with optimizer state; a model-only file has none to give.
  auto third = make_net<float>(3);
  nn::load_checkpoint(path, third);
  const auto model_only = temp_file("model_only.ckpt");
  nn::save_checkpoint(model_only, net);
  nn::load_checkpoint(model_only, third);
  REQUIRE(nn_test::snapshot(third) == nn_test::snapshot(net));
  const auto before = state(other, other_opt);
  REQUIRE_THROWS_WITH(nn::load_checkpoint(model_only, other, other_opt),
                      Catch::Matchers::Contains("has no optimizer state 'sgd.steps'"));
  REQUIRE(state(other, other_opt) == before);

  // Adam state round-trips too, in double.
  auto dnet = make_net<double>(4);
  optim::adam adam(dnet, {.lr = 0.01});
  train_steps(dnet, adam, 2, 30);
  const auto dpath = temp_file("adam.ckpt");
  nn::save_checkpoint(dpath, dnet, adam);
  auto dnet2 = make_net<double>(5);
  optim::adam adam2(dnet2, {.lr = 0.01});
  nn::load_checkpoint(dpath, dnet2, adam2);
  REQUIRE(state(dnet2, adam2) == state(dnet, adam));
  // Loading Adam state into SGD is refused by name.
  optim::sgd sgd2(dnet2, {.lr = 0.1, .momentum = 0.5});
  REQUIRE_THROWS_WITH(nn::load_checkpoint(dpath, dnet2, sgd2),
                      Catch::Matchers::Contains("'sgd.steps'") &&
                          Catch::Matchers::Contains("another kind of optimizer"));
}

TEST_CASE("checkpoint: every truncation and every corrupted byte is refused, nothing changes",
          "[nn]") {
  const auto path = temp_file("good.ckpt"), bad = temp_file("bad.ckpt");
  auto net = make_net<float>(1);
  optim::adam opt(net, {.lr = 0.01});
  train_steps(net, opt, 1, 40);
  nn::save_checkpoint(path, net, opt);
  const std::string good = read_all(path);

  auto target = make_net<float>(7);
  optim::adam target_opt(target, {.lr = 0.01});
  const auto before = state(target, target_opt);
  auto refused = [&](const std::string& bytes, const char* why) {
    write_all(bad, bytes);
    const std::string msg = test::message_of<nn::checkpoint_error>(
        [&] { nn::load_checkpoint(bad, target, target_opt); });
    INFO("file of " << bytes.size() << " bytes; message: " << msg);
    REQUIRE(msg.find(bad.string()) != std::string::npos);
    REQUIRE(msg.find(why) != std::string::npos);
    REQUIRE(state(target, target_opt) == before);
  };
  // Every truncation (magic prefixes included) says "truncated".
  for (std::size_t n = 0; n < good.size(); n += (n < 64 ? 1 : 37))
    refused(good.substr(0, n), "truncated");
  refused(good.substr(0, good.size() - 1), "truncated");
  refused(good + "x", "unexpected bytes");
  // Every single flipped byte: the magic, the version and the size fields say so, anything else
  // fails the checksum.
  for (std::size_t i = 0; i < good.size(); i += (i < 64 ? 1 : 13)) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x20);
    std::uint64_t size_field = 0;
    std::memcpy(&size_field, b.data() + 16, 8);
    const char* why = i < 8                   ? "not a meld checkpoint"
                      : i < 12                ? "format version"
                      : i < 16 || i >= 24     ? "checksum"
                      : size_field > b.size() ? "truncated"
                                              : "unexpected bytes";
    refused(b, why);
  }
}

TEST_CASE("checkpoint: wrong magic, version, element type, names, shapes, missing file", "[nn]") {
  const auto path = temp_file("ref.ckpt"), bad = temp_file("edited.ckpt");
  auto net = make_net<float>(1);
  nn::save_checkpoint(path, net);
  const std::string good = read_all(path);
  auto target = make_net<float>(2);
  const auto before = nn_test::snapshot(target);
  auto message = [&](const std::filesystem::path& p) {
    return test::message_of<nn::checkpoint_error>([&] { nn::load_checkpoint(p, target); });
  };

  std::string b = good;
  b.replace(0, 8, "NOTMELD!");
  write_all(bad, b);
  REQUIRE_THAT(message(bad), Catch::Matchers::Contains("is not a meld checkpoint"));

  b = good;
  b[8] = 2;  // version 2, with a valid checksum: the version check speaks first
  fix_checksum(b);
  write_all(bad, b);
  REQUIRE_THAT(message(bad), Catch::Matchers::Contains("format version 2") &&
                                 Catch::Matchers::Contains("reads version 1"));

  // A double model's file into a float model.
  auto dnet = make_net<double>(3);
  nn::save_checkpoint(bad, dnet);
  REQUIRE_THAT(message(bad),
               Catch::Matchers::Contains("holds float64 values, the model has float32"));

  // Another architecture: shapes differ.
  auto wider = nn::sequential(nn::linear<float>(4, 7), nn::batch_norm<float>(7), nn::relu<float>(),
                              nn::linear<float>(7, 3));
  nn::save_checkpoint(bad, wider);
  REQUIRE_THAT(message(bad), Catch::Matchers::Contains("parameter '0.weight' has shape {7, 4}, "
                                                       "the model has {6, 4}"));
  // Names differ (no batch norm): missing and unexpected entries.
  auto plain = nn::sequential(nn::linear<float>(4, 6), nn::relu<float>(), nn::linear<float>(6, 3));
  nn::save_checkpoint(bad, plain);
  REQUIRE_THAT(message(bad), Catch::Matchers::Contains("has no parameter '1.weight'"));
  auto deeper = nn::sequential(nn::linear<float>(4, 6), nn::batch_norm<float>(6), nn::relu<float>(),
                               nn::linear<float>(6, 3), nn::linear<float>(3, 3));
  nn::save_checkpoint(bad, deeper);
  REQUIRE_THAT(message(bad), Catch::Matchers::Contains("has parameter '4.weight', which the model "
                                                       "does not have"));
  // An edited name (checksum fixed): found by the name check.
  b = good;
  const auto at = b.find("0.weight");
  REQUIRE(at != std::string::npos);
  b[at] = '9';
  fix_checksum(b);
  write_all(bad, b);
  REQUIRE_THAT(message(bad), Catch::Matchers::Contains("has no parameter '0.weight'"));
  // A missing file.
  REQUIRE_THAT(message(temp_file("does_not_exist.ckpt")),
               Catch::Matchers::Contains("cannot open checkpoint") &&
                   Catch::Matchers::Contains("does_not_exist.ckpt"));
  REQUIRE(nn_test::snapshot(target) == before);
  // Saving into a directory that does not exist names it.
  REQUIRE_THROWS_WITH(nn::save_checkpoint(temp_file("no_such_dir") / "x.ckpt", net),
                      Catch::Matchers::Contains("cannot write checkpoint"));
}

TEST_CASE("checkpoint: concurrent saves to one path never collide; loads see whole files", "[nn]") {
  // Threads here, processes or MPI ranks in practice: each save writes its own temporary file
  // and renames it over the target, so a load sees one whole checkpoint or another.
  const auto path = temp_file("shared.ckpt");
  constexpr int savers = 4, saves = 12;
  std::vector<std::vector<std::vector<double>>> saved(savers);
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  auto record = [&](const std::string& e) {
    std::lock_guard lock(errors_mutex);
    errors.push_back(e);
  };
  auto first = make_net<float>(100);
  nn::save_checkpoint(path, first);
  const auto initial = nn_test::snapshot(first);
  std::atomic<int> running{savers};
  std::vector<std::thread> threads;
  for (int t = 0; t < savers; ++t)
    threads.emplace_back([&, t] {
      auto net = make_net<float>(static_cast<std::uint64_t>(t));
      saved[static_cast<std::size_t>(t)] = nn_test::snapshot(net);
      for (int i = 0; i < saves; ++i) {
        try {
          nn::save_checkpoint(path, net);
        } catch (const std::exception& e) {
          record(std::string("save: ") + e.what());
        }
      }
      --running;
    });
  int loads = 0;
  auto reader = make_net<float>(99);
  while (running > 0 || loads < 5) {
    try {
      nn::load_checkpoint(path, reader);
      ++loads;
      const auto got = nn_test::snapshot(reader);
      bool known = got == initial;
      for (const auto& s : saved) known = known || got == s;
      if (!known) record("load: a state that no save wrote");
    } catch (const std::exception& e) {
      record(std::string("load: ") + e.what());
    }
  }
  for (auto& th : threads) th.join();
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  REQUIRE(files_starting(path.parent_path(), "shared.ckpt.").empty());
}

TEST_CASE("checkpoint: a directory or /dev/zero is refused at once, naming it", "[nn]") {
  auto net = make_net<float>(1);
  const auto before = nn_test::snapshot(net);
  const auto dir = temp_file("a_directory.ckpt");
  std::filesystem::create_directories(dir);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir_msg =
      test::message_of<nn::checkpoint_error>([&] { nn::load_checkpoint(dir, net); });
  INFO(dir_msg);
  REQUIRE_THAT(dir_msg, Catch::Matchers::Contains(dir.string()) &&
                            Catch::Matchers::Contains("is a directory"));
  if (std::filesystem::exists("/dev/zero")) {
    const std::string zero_msg =
        test::message_of<nn::checkpoint_error>([&] { nn::load_checkpoint("/dev/zero", net); });
    INFO(zero_msg);
    REQUIRE_THAT(zero_msg, Catch::Matchers::Contains("'/dev/zero' is not a meld checkpoint"));
  }
  REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2);
  REQUIRE(nn_test::snapshot(net) == before);
  // Saving onto a directory fails with the system's reason, and leaves no temporary file.
  const std::string save_msg =
      test::message_of<nn::checkpoint_error>([&] { nn::save_checkpoint(dir, net); });
  REQUIRE_THAT(save_msg, Catch::Matchers::Contains(dir.string()) &&
                             Catch::Matchers::Contains(std::strerror(EISDIR)));
  REQUIRE(files_starting(dir.parent_path(), "a_directory.ckpt.").empty());
}

TEST_CASE("checkpoint: a save that cannot write names errno and removes its temporary file",
          "[nn]") {
  // A file size limit makes write() fail with EFBIG (as ENOSPC would on a full disk).
  const auto path = temp_file("too_big.ckpt");
  auto small = make_net<float>(1);
  nn::save_checkpoint(path, small);
  const std::string old = read_all(path);
  auto big = nn::sequential(nn::linear<float>(200, 200));
  nn::initialize(big, nn::kaiming_uniform{}, 2);
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &previous);
  rlimit saved_limit{};
  ::getrlimit(RLIMIT_FSIZE, &saved_limit);
  rlimit limit = saved_limit;
  limit.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  const std::string msg =
      test::message_of<nn::checkpoint_error>([&] { nn::save_checkpoint(path, big); });
  ::setrlimit(RLIMIT_FSIZE, &saved_limit);
  ::sigaction(SIGXFSZ, &previous, nullptr);
  INFO(msg);
  REQUIRE_THAT(msg, Catch::Matchers::Contains("cannot write checkpoint") &&
                        Catch::Matchers::Contains(path.string()) &&
                        Catch::Matchers::Contains(std::strerror(EFBIG)));
  REQUIRE(files_starting(path.parent_path(), "too_big.ckpt.").empty());
  REQUIRE(read_all(path) == old);  // the previous checkpoint is untouched
}
