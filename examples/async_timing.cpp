// Why timing asynchronous work needs care: a host clock read around asynchronous assignments
// measures only the time to enqueue them; meld::timer waits for the work itself.
#include <chrono>
#include <cstdio>

#include <meld/meld.hpp>

int main() {
  using clk = std::chrono::steady_clock;
  using async_cpu = meld::cpu<meld::async>;
  const meld::index_t n = 1 << 22;

  meld::stream s("timed");
  meld::stream_guard guard(s);
  meld::tensor<float, async_cpu> x({n}), y({n});
  x = 1.f;
  meld::synchronize();

  meld::timer honest(s);
  const auto t0 = clk::now();
  honest.start();
  for (int i = 0; i < 20; ++i) y = meld::tanh(x * 0.5f + y) + meld::sqrt(x);
  honest.stop();
  const double naive = std::chrono::duration<double>(clk::now() - t0).count();
  const double measured = honest.seconds();  // waits for the 20 assignments to run
  const double waited = std::chrono::duration<double>(clk::now() - t0).count();

  std::printf("20 assignments of %lld elements on an asynchronous CPU stream:\n",
              static_cast<long long>(n));
  std::printf("  host clock around the calls (naive): %8.3f ms  <- only the enqueueing\n",
              naive * 1e3);
  std::printf("  meld::timer (events on the stream):  %8.3f ms  <- the work\n", measured * 1e3);
  std::printf("  host clock after waiting:            %8.3f ms\n", waited * 1e3);
  return measured > naive ? 0 : 1;
}
