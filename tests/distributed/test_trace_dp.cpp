// A traced data_parallel step (meld/core/trace.hpp) with two workers on threads, on the CPU and on
// two simulated devices: each worker's forward and backward, each gradient bucket launched inside
// its worker's backward, and each bucket's allreduce on the thread that ran it, started after its
// launch and, where the machine has cores to spare, before that worker's backward ended.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/meld.hpp>  // meld::sim
#include <meld/nn/nn.hpp>

#include "catch.hpp"
#include "trace_json.hpp"

namespace {

namespace nn = meld::nn;
using meld::index_t;
using test::trace_event;

std::string temp_path(const std::string& name) {
  return test::trace_temp_path("test_trace_dp", name);
}

bool inside(const trace_event& inner, const trace_event& outer) {
  return outer.ts <= inner.ts && inner.end() <= outer.end() + 1e-3;
}

template <class B>
void two_workers_traced(const std::string& tag) {
  // Layers large enough that backward takes a while after the first bucket is ready.
  auto net = nn::sequential(nn::linear<float, B>(64, 256), nn::relu<float, B>(),
                            nn::linear<float, B>(256, 256), nn::tanh<float, B>(),
                            nn::linear<float, B>(256, 256), nn::relu<float, B>(),
                            nn::linear<float, B>(256, 10));
  nn::initialize(net, nn::kaiming_uniform{}, 5);
  meld::thread_group group(2);
  meld::data_parallel dp(net, group, {.bucket_bytes = std::size_t(64) << 10});
  const int buckets = static_cast<int>(dp.buckets().size());
  REQUIRE(buckets >= 3);
  const meld::tensor<float, B> x = meld::to<B>(meld::uniform<float>({256, 64}, -1.f, 1.f, 7));
  const meld::tensor<std::int64_t, B> y =
      meld::to<B>(meld::rng(8).integers<std::int64_t>({256}, 0, 10));
  dp.step(x, y, nn::cross_entropy);  // warm-up: the progress threads and scratch buffers exist

  constexpr int steps = 3;
  const std::string path = temp_path(tag);
  meld::trace::start(path);
  for (int s = 0; s < steps; ++s) {
    const double loss = dp.step(x, y, nn::cross_entropy);
    REQUIRE(loss > 0);
    REQUIRE(dp.last_timing().buckets_during_backward == buckets);
  }
  meld::trace::stop();
  const test::trace_file trace(path);
  std::remove(path.c_str());
  INFO(tag);

  // Per worker: a forward and a backward each step, on a thread of its own.
  std::map<int, std::vector<trace_event>> backward;
  std::map<int, std::set<long long>> worker_tids;
  for (const auto& e : trace.named("backward")) {
    backward[static_cast<int>(e.arg("rank"))].push_back(e);
    worker_tids[static_cast<int>(e.arg("rank"))].insert(e.tid);
  }
  REQUIRE(backward.size() == 2);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(backward[r].size() == steps);
    REQUIRE(worker_tids[r].size() == 1);
    const auto forwards = trace.named("forward");
    CHECK(std::count_if(forwards.begin(), forwards.end(), [&](const auto& e) {
            return e.arg("rank") == r && e.tid == *worker_tids[r].begin();
          }) == steps);
  }
  CHECK(*worker_tids[0].begin() != *worker_tids[1].begin());

  // Every bucket is launched inside its worker's backward (nn::sequential reports each layer's
  // gradients as soon as they are final), all but the last asynchronously.
  const auto launches = trace.named("bucket");
  const auto allreduces = trace.named("allreduce");
  int overlapped = 0;
  for (int r = 0; r < 2; ++r) {
    const long long tid = *worker_tids[r].begin();
    for (const trace_event& b : backward[r]) {
      std::vector<trace_event> mine;
      for (const auto& l : launches)
        if (l.tid == tid && inside(l, b)) mine.push_back(l);
      REQUIRE(static_cast<int>(mine.size()) == buckets);
      for (const trace_event& l : mine) {
        const int bucket = static_cast<int>(l.arg("bucket"));
        INFO("rank " << r << " bucket " << bucket);
        CHECK(l.arg("async") == (bucket + 1 < buckets ? 1 : 0));
        CHECK(l.arg("elements") > 0);
        // Its allreduce: tagged with the bucket, started after the launch began and before the
        // next step's launch of the bucket (however long the collectives thread waited for a
        // core: no bound in time); the async ones on the rank's collectives thread.
        double next_launch = std::numeric_limits<double>::infinity();
        for (const auto& o : launches)
          if (o.tid == tid && o.arg("bucket") == bucket && o.ts > l.ts)
            next_launch = std::min(next_launch, o.ts);
        std::vector<trace_event> runs;
        for (const auto& a : allreduces)
          if (a.arg("rank") == r && a.arg("bucket") == bucket && a.ts >= l.ts && a.ts < next_launch)
            runs.push_back(a);
        REQUIRE(!runs.empty());
        const trace_event& run = *std::min_element(
            runs.begin(), runs.end(), [](const auto& p, const auto& q) { return p.ts < q.ts; });
        CHECK(run.arg("elements") >= l.arg("elements"));
        if (l.arg("async") == 1) {
          CHECK(run.tid != tid);
          CHECK(trace.thread_names.at(run.tid) == "rank " + std::to_string(r) + " collectives");
          if (run.ts < b.end()) ++overlapped;
        } else {  // run before the launch returns: here, or after the queued ones on theirs
          CHECK(inside(run, l));
        }
      }
    }
  }
  // An allreduce that starts before its worker's backward ends needs a core for the rank's
  // collectives thread while both workers compute: certain with cores to spare, not on two.
  if (std::thread::hardware_concurrency() >= 4)
    CHECK(overlapped > 0);
  else if (overlapped == 0)
    WARN("no allreduce started before its worker's backward ended (" +
         std::to_string(std::thread::hardware_concurrency()) + " cores)");
  CHECK(trace.named("allreduce wait").size() <= 2 * steps);
  CHECK(trace.named("step").size() == 2 * steps);
}

}  // namespace

TEST_CASE("trace of data_parallel: per-worker backward, buckets and their allreduces",
          "[dist][trace]") {
  two_workers_traced<meld::cpu<>>("cpu");
}

TEST_CASE("trace of data_parallel on two simulated devices", "[dist][trace][sim]") {
  two_workers_traced<meld::sim<>>("sim");
}
