// What makes meld::sim a device and not a second CPU: a stray host dereference of its memory
// kills the process with a message naming the device (run in a child process: a death test),
// operands on different devices are refused by name, devices are bounded and enumerable, and
// every value that comes back to the host is a counted transfer.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "../backends.hpp"

using Catch::Matchers::Contains;
using meld::index_t;
using meld::tensor;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool under_asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool under_asan = true;
#else
constexpr bool under_asan = false;
#endif
#else
constexpr bool under_asan = false;
#endif

struct child_result {
  bool signaled = false;
  int signal = 0;
  int exit_code = 0;
  std::string output;  // what the child wrote to stdout and stderr
};

// Runs f in a forked child with stderr captured (the parent's threads are not in the child, so f
// must not need them). Catch's own SIGSEGV handler is active inside a test case, and meld reports
// faults only where nobody else handles SIGSEGV: the child restores the default first, then
// installs meld's report as a program without Catch has it from its first sim allocation.
template <class F>
child_result run_in_child(F&& f) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(pipe_fds[1], 2);
    ::dup2(pipe_fds[1], 1);
    ::close(pipe_fds[0]);
    if (!under_asan) {
      std::signal(SIGSEGV, SIG_DFL);
      meld::detail::install_sim_fault_report();
    }
    f();
    ::_exit(0);  // f was expected to die
  }
  ::close(pipe_fds[1]);
  child_result r;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;)
    r.output.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  r.signaled = WIFSIGNALED(status);
  r.signal = r.signaled ? WTERMSIG(status) : 0;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The death test's verdict: killed by SIGSEGV after meld's report naming the device (under
// AddressSanitizer, whose handler takes SIGSEGV: its SEGV report and a failing exit).
void require_fault(const child_result& r, int device) {
  INFO("child output: " << r.output);
  if (under_asan) {
    REQUIRE((r.signaled || r.exit_code != 0));
    REQUIRE_THAT(r.output, Contains("SEGV"));
  } else {
    REQUIRE(r.signaled);
    REQUIRE(r.signal == SIGSEGV);
    REQUIRE_THAT(r.output, Contains("meld::sim: the host dereferenced sim device memory (device " +
                                    std::to_string(device) + ")"));
  }
}

}  // namespace

TEST_CASE("a host read of sim device memory dies with a message naming the device",
          "[sim][death]") {
  tensor<float, meld::sim<>> t = meld::full<float, meld::sim<>>({64}, 1.f);
  const float* device_pointer = t.raw_data();  // the accessor of kernels, never for the host
  const child_result r = run_in_child([&] {
    const volatile float v = *device_pointer;
    (void)v;
  });
  require_fault(r, 0);
  // The parent's tensor is intact: it was never touched on the host.
  REQUIRE(meld::sum(t) == 64.f);
}

TEST_CASE("a host write to another sim device's memory dies naming that device", "[sim][death]") {
  meld::device_guard<meld::sim<>> on(2);
  tensor<double, meld::sim<>> t({8, 8});
  double* device_pointer = t.raw_data();
  const child_result r = run_in_child([&] { *const_cast<volatile double*>(device_pointer) = 1.0; });
  require_fault(r, 2);
}

TEST_CASE("operands on different sim devices are refused, naming both", "[sim]") {
  using B = meld::sim<>;
  tensor<float, B> a = meld::full<float, B>({4, 5}, 2.f);
  tensor<float, B> on1;
  {
    meld::device_guard<B> guard(1);
    on1 = meld::full<float, B>({4, 5}, 3.f);
  }
  REQUIRE(a.device() == 0);
  REQUIRE(on1.device() == 1);
  const auto before = meld::to<meld::cpu<>>(a);
  REQUIRE_THROWS_WITH(a = a + on1, Contains("sim devices 0 and 1"));
  REQUIRE_THROWS_WITH(meld::sum(a * on1), Contains("sim devices 0 and 1"));
  tensor<float, B> c({4, 4});
  REQUIRE_THROWS_WITH(meld::gemm(1.f, a, on1.transpose(), 0.f, c), Contains("sim devices 0 and 1"));
  // The failed assignment left its destination as it was.
  const auto after = meld::to<meld::cpu<>>(a);
  REQUIRE(std::equal(before.begin(), before.end(), after.begin(), after.end()));
  // An explicit copy to the current device makes the operation legal.
  const tensor<float, B> moved = meld::to<B>(on1);
  REQUIRE(moved.device() == 0);
  a = a + moved;
  REQUIRE(meld::sum(a) == 20 * 5.f);
}

TEST_CASE("sim devices are enumerable and bounded", "[sim]") {
  using B = meld::sim<>;
  REQUIRE(meld::device_count<B>() >= 2);
  REQUIRE_THROWS_WITH(meld::device_guard<B>(meld::device_count<B>()),
                      Contains("does not exist") && Contains("MELD_SIM_DEVICES"));
  REQUIRE_THROWS_AS(meld::device_guard<B>(-1), std::invalid_argument);
  // More than a device holds (16 GiB by default): an allocation_error naming the device.
  meld::device_guard<B> on(1);
  const std::string msg = test::message_of<meld::allocation_error>(
      [] { tensor<float, B> huge({index_t(1) << 33}, meld::uninitialized); });
  INFO(msg);
  REQUIRE_THAT(msg, Contains("sim device 1"));
  // The free count it reports is the device's: at most its capacity, and most of it.
  const auto of = msg.find(" bytes free of ");
  REQUIRE(of != std::string::npos);
  const auto free_at = msg.rfind(": ", of) + 2;
  const double free_bytes = std::stod(msg.substr(free_at, of - free_at));
  const double capacity = std::stod(msg.substr(of + 15));
  REQUIRE(free_bytes <= capacity);
  REQUIRE(free_bytes > capacity / 2);
  // The device still serves ordinary allocations afterwards.
  tensor<float, B> small = meld::full<float, B>({1000}, 0.5f);
  REQUIRE(meld::sum(small) == 500.f);
}

TEST_CASE("each value a sim computation hands to the host is one counted transfer", "[sim]") {
  using B = meld::sim<>;
  const tensor<float, B> x = meld::arange<float, B>(100.f);
  tensor<float, B> y({100});
  meld::reset_sim_transfers();
  y = 2.f * x + 1.f;  // stays on the device
  tensor<float, B> col = meld::sum(y.reshape({10, 10}), 0);
  REQUIRE(meld::sim_transfers().to_host_calls == 0);
  const float total = meld::sum(y);  // the scalar comes back: one transfer of 4 bytes
  REQUIRE(total == 100.f * 99.f + 100.f);
  REQUIRE(meld::sim_transfers().to_host_calls == 1);
  REQUIRE(meld::sim_transfers().to_host_bytes == sizeof(float));
  const tensor<float> host_col = meld::to<meld::cpu<>>(col);
  REQUIRE(meld::sim_transfers().to_host_calls == 2);
  REQUIRE(meld::sim_transfers().to_host_bytes == sizeof(float) + 10 * sizeof(float));
  REQUIRE(host_col(3) == 2.f * (3 + 13 + 23 + 33 + 43 + 53 + 63 + 73 + 83 + 93) + 10.f);
  REQUIRE(meld::sim_transfers().to_device_calls == 0);
}

TEST_CASE("random draws and sequences are computed on the sim device, not copied there", "[sim]") {
  using B = meld::sim<meld::async>;
  meld::synchronize();
  meld::reset_sim_transfers();
  meld::rng gen(11);
  tensor<float, B> u = gen.uniform<float, B>({256, 64}, -1.f, 1.f);
  tensor<double, B> n = gen.normal<double, B>({1000});
  tensor<std::int64_t, B> k = gen.integers<std::int64_t, B>({100}, 0, 10);
  tensor<float, B> r = meld::arange<float, B>(2.f, 50.f, 0.5f);
  tensor<double, B> l = meld::linspace<double, B>(-1.0, 1.0, 21);
  meld::synchronize();
  REQUIRE(meld::sim_transfers().to_device_calls == 0);
  // The same values as the host's (checked through explicit copies).
  meld::rng host_gen(11);
  const tensor<float> hu = host_gen.uniform<float>({256, 64}, -1.f, 1.f);
  const tensor<float> du = meld::to<meld::cpu<>>(u);
  REQUIRE(std::equal(hu.begin(), hu.end(), du.begin(), du.end()));
  const tensor<float> dr = meld::to<meld::cpu<>>(r);
  REQUIRE(dr.size() == 96);
  for (index_t i = 0; i < dr.size(); ++i) REQUIRE(dr(i) == 2.f + 0.5f * static_cast<float>(i));
  const tensor<double> dl = meld::to<meld::cpu<>>(l);
  REQUIRE(dl(0) == -1.0);
  REQUIRE(dl(10) == Approx(0.0).margin(1e-15));
  REQUIRE(dl(20) == 1.0);
  REQUIRE(meld::sim_transfers().to_host_calls == 3);
}

TEST_CASE("views of a tensor on another sim device copy to the host; resizing keeps the device",
          "[sim]") {
  using B = meld::sim<>;
  tensor<float, B> m1;
  {
    meld::device_guard<B> guard(1);
    m1 = meld::arange<float, B>(12.f).reshape({3, 4});
  }
  REQUIRE(m1.device() == 1);
  // Device 0 is current: the views are evaluated on device 1, where they live.
  const auto cols = meld::to<meld::cpu<>>(m1.slice(meld::all, meld::range(1, 4, 2)));
  REQUIRE(cols.shape() == meld::shape_t{3, 2});
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 2; ++j) REQUIRE(cols(i, j) == float(i * 4 + 1 + 2 * j));
  const auto t = meld::to<meld::cpu<>>(m1.transpose());
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) REQUIRE(t(i, j) == float(j * 4 + i));
  // An assignment that changes the shape keeps the tensor on its device, as one that keeps it.
  tensor<float, B> other;
  {
    meld::device_guard<B> guard(1);
    other = meld::full<float, B>({2, 2}, 1.5f);
  }
  m1 = other * 2.f;
  REQUIRE(m1.device() == 1);
  REQUIRE(m1.shape() == meld::shape_t{2, 2});
  REQUIRE(meld::to<meld::cpu<>>(m1)(1, 1) == 3.f);
  m1 = other + 1.f;  // the same shape: in place, on device 1
  REQUIRE(m1.device() == 1);
  REQUIRE(meld::to<meld::cpu<>>(m1)(0, 1) == 2.5f);
}
