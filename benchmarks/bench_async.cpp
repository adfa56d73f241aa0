// Asynchronous execution on the CPU: the cost of enqueueing, a chain of 10,000 small dependent
// operations under the sync and async policies (the d2l "increment 10,000 times" experiment), and
// two independent 10^7-element chains on two streams vs one; at the end, the ratios.
//
//   build/bench/benchmarks/bench_async --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <meld/meld.hpp>

namespace {

using async_cpu = meld::cpu<meld::async>;

// Host time to enqueue one operation on a tiny tensor, while the stream is held busy (so that the
// queue does not drain during the measurement).
void BM_enqueue_cost(benchmark::State& state) {
  meld::stream s("enqueue");
  meld::stream_guard guard(s);
  meld::tensor<float, async_cpu> x({16}), y({16});
  x.wait();
  for (auto _ : state) {
    state.PauseTiming();
    std::atomic<bool> release{false};
    s.enqueue([&] {
      while (!release.load()) std::this_thread::yield();
    });
    state.ResumeTiming();
    for (int i = 0; i < 1000; ++i) y = x * 2.f + y;
    state.PauseTiming();
    release = true;
    s.synchronize();
    state.ResumeTiming();
  }
  // items_per_second: enqueued operations per second of host time (1e9 / it = ns per enqueue).
  state.SetItemsProcessed(state.iterations() * 1000);
}

// 10,000 dependent updates y = y * 0.999 + x of n elements, waiting for the result at the end.
template <class Backend>
void BM_chain(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, Backend> x({n}), y({n});
  x = 1.f;
  for (auto _ : state) {
    for (int i = 0; i < 10000; ++i) y = y * 0.999f + x;
    y.wait();  // under the async policy: the work is done, not just enqueued
  }
  state.SetItemsProcessed(state.iterations() * 10000);
}

// Host work overlapping the queued computation, the case asynchronous execution is for: each step
// the host prepares the next input (a stand-in for loading data: one pass writing n values) into
// one of two buffers while the previous step computes from the other.
template <class Backend>
void BM_overlap_host_work(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, Backend> y({n}),
      in[2] = {meld::tensor<float, Backend>({n}), meld::tensor<float, Backend>({n})};
  for (auto _ : state) {
    for (int step = 0; step < 100; ++step) {
      float* dst = in[step % 2].data();  // waits until the step that read this buffer has run
      for (meld::index_t i = 0; i < n; ++i) dst[i] = float(step + i % 7);  // host work
      y = meld::tanh(y * 0.5f + in[step % 2]) * 0.9f + meld::sqrt(meld::abs(in[step % 2]));
    }
    y.wait();
  }
  state.SetItemsProcessed(state.iterations() * 100);
}

// Two independent chains of 10^7-element operations: on two streams, or both on one.
void BM_two_chains(benchmark::State& state) {
  const bool two_streams = state.range(0) == 2;
  const meld::index_t n = 10'000'000;
  meld::stream s1("a"), s2("b");
  meld::tensor<float, async_cpu> a({n}), b({n});
  meld::bind(a, s1);
  meld::bind(b, two_streams ? s2 : s1);
  meld::synchronize();
  for (auto _ : state) {
    for (int i = 0; i < 10; ++i) {
      a = a * 0.5f + 1.f;
      b = b * 0.25f + 2.f;
    }
    meld::synchronize();
  }
  state.SetBytesProcessed(state.iterations() * 20 * 2 * n * int64_t(sizeof(float)));
  state.SetLabel(two_streams ? "two streams" : "one stream");
}

}  // namespace

BENCHMARK(BM_enqueue_cost)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_chain, meld::cpu<meld::sync>)
    ->Arg(16)
    ->Arg(1024)
    ->Arg(16384)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_chain, async_cpu)
    ->Arg(16)
    ->Arg(1024)
    ->Arg(16384)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_overlap_host_work, meld::cpu<meld::sync>)
    ->Arg(1 << 16)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_overlap_host_work, async_cpu)
    ->Arg(1 << 16)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_two_chains)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

namespace {

// The console output plus, at the end, the ratios the comparisons are about: async vs sync for the
// chains and the host-work overlap, two streams vs one.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string name = r.run_name.str();
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
        medians_[name] = r.GetAdjustedRealTime();
      else if (r.run_type == Run::RT_Iteration)
        samples_[name].push_back(r.GetAdjustedRealTime());
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nRatios (median times):\n");
    for (const char* n : {"16", "1024", "16384"})
      compare(std::string("10,000 dependent ops of ") + n + " elements, async / sync",
              std::string("BM_chain<async_cpu>/") + n,
              std::string("BM_chain<meld::cpu<meld::sync>>/") + n);
    compare("host work + 65,536-element expressions, async / sync",
            "BM_overlap_host_work<async_cpu>/65536",
            "BM_overlap_host_work<meld::cpu<meld::sync>>/65536");
    compare("two independent chains, two streams / one stream", "BM_two_chains/2",
            "BM_two_chains/1");
  }

 private:
  double median(const std::string& name) {
    const std::string key = name + "/real_time";
    if (auto m = medians_.find(key); m != medians_.end()) return m->second;
    auto it = samples_.find(key);
    if (it == samples_.end() || it->second.empty()) return -1;
    std::vector<double> v = it->second;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  void compare(const std::string& what, const std::string& a, const std::string& b) {
    const double ta = median(a), tb = median(b);
    if (ta <= 0 || tb <= 0) return;  // filtered out
    std::printf("  %-62s %6.2f  (%s)\n", what.c_str(), ta / tb, ta < tb ? "faster" : "slower");
  }
  std::map<std::string, double> medians_;
  std::map<std::string, std::vector<double>> samples_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ratio_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
