// The trace recorder (meld/core/trace.hpp): ranges nested on several threads, written as
// Chrome-trace JSON that a strict parser reads back; meld's own operations on streams and on the
// simulated device; MELD_TRACE, written at exit; nothing recorded while off.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <meld/meld.hpp>

#include "catch.hpp"
#include "trace_json.hpp"

namespace {

namespace fs = std::filesystem;

// A path of its own for each file of this process.
std::string temp_path(const std::string& name) {
  return test::trace_temp_path("test_trace", name);
}

void busy_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Whether `inner` lies within `outer` (microseconds with three decimals: exact).
bool inside(const test::trace_event& inner, const test::trace_event& outer) {
  return outer.ts <= inner.ts && inner.end() <= outer.end() + 1e-3;
}

}  // namespace

TEST_CASE("trace: nested ranges from several threads, as Chrome-trace JSON", "[core][trace]") {
  const std::string path = temp_path("threads");
  constexpr int threads = 4, inner_count = 3;
  meld::trace::start(path);
  REQUIRE(meld::trace::enabled());
  CHECK(meld::build_info().tracing);
  CHECK_FALSE(meld::trace::nvtx());  // no CUDA backend here (and no NVTX tool)
  const auto work = [&](int t) {
    meld::trace::name_thread("tracer " + std::to_string(t));
    meld::trace_range outer("outer", "test", {"thread", t});
    for (int i = 0; i < inner_count; ++i) {
      meld::trace_range inner(std::string("inner \"") + std::to_string(i) + "\"\\", "test",
                              {"thread", t}, {"i", i});
      busy_for(std::chrono::microseconds(200));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  meld::trace::stop();
  CHECK_FALSE(meld::build_info().tracing);
  REQUIRE_FALSE(meld::trace::enabled());
  { meld::trace_range after("after stop"); }  // not recorded

  const test::trace_file trace(path);
  std::remove(path.c_str());
  const auto outers = trace.named("outer");
  REQUIRE(outers.size() == threads);
  REQUIRE(trace.named("after stop").empty());
  std::set<long long> tids;
  for (const auto& o : outers) {
    const int t = static_cast<int>(o.arg("thread"));
    INFO("thread " << t);
    tids.insert(o.tid);
    CHECK(o.cat == "test");
    CHECK(o.dur >= 0);
    CHECK(trace.thread_names.at(o.tid) == "tracer " + std::to_string(t));
    // Its inner ranges: on its thread, inside it, in order, without overlapping.
    std::vector<test::trace_event> inner;
    for (const auto& e : trace.events)
      if (e.tid == o.tid && e.name.rfind("inner", 0) == 0) inner.push_back(e);
    REQUIRE(inner.size() == inner_count);
    for (int i = 0; i < inner_count; ++i) {
      const auto& e = inner[static_cast<std::size_t>(i)];
      CHECK(e.name == "inner \"" + std::to_string(i) + "\"\\");  // escaped and read back
      CHECK(e.arg("i") == i);
      CHECK(e.arg("thread") == t);
      CHECK(e.dur >= 200);
      CHECK(inside(e, o));
      if (i > 0) CHECK(inner[static_cast<std::size_t>(i) - 1].end() <= e.ts + 1e-3);
    }
  }
  CHECK(tids.size() == threads);  // a tid per thread
  // Each thread's events come enclosing range first, then by start.
  std::map<long long, double> last_start;
  for (const auto& e : trace.events) {
    CHECK(e.dur >= 0);
    CHECK(e.pid > 0);
    if (last_start.count(e.tid)) CHECK(last_start[e.tid] <= e.ts);
    last_start[e.tid] = e.ts;
  }

  // write() keeps recording, and a new start() drops the events of the last recording.
  const std::string again = temp_path("again");
  meld::trace::start();
  { meld::trace_range r("second"); }
  meld::trace::write(again);
  CHECK(meld::trace::enabled());
  meld::trace::stop();  // no path: writes nothing
  const test::trace_file second(again);
  std::remove(again.c_str());
  CHECK(second.named("second").size() == 1);
  CHECK(second.named("outer").empty());
}

TEST_CASE("trace: an unwritable path throws, naming it", "[core][trace]") {
  meld::trace::start();
  const std::string bad = (fs::temp_directory_path() / "no such directory" / "t.json").string();
  CHECK_THROWS_WITH(meld::trace::write(bad), Catch::Contains(bad));
  meld::trace::stop();
}

namespace {

// Traces one assignment, one reduction and one wait on a stream of backend B, and the copies to
// and from it.
template <class B>
void operations_are_traced(const std::string& tag) {
  const std::string path = temp_path("ops_" + tag);
  const meld::index_t n = 1000;
  meld::stream s("traced " + tag);
  meld::trace::start(path);
  {
    meld::trace_range outer("operations");
    meld::stream_guard on(s);
    const meld::tensor<float, B> x = meld::to<B>(meld::ones<float>({n}));
    meld::tensor<float, B> y({n});
    // The stream is held busy, so that the reduction's result is waited for.
    s.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
    y = x * 2.f + 1.f;
    const float total = meld::sum(y);
    CHECK(total == 3.f * n);
    const meld::tensor<float> back = meld::to<meld::cpu<>>(y);
    CHECK(back(0) == 3.f);
  }
  meld::trace::stop();
  const test::trace_file trace(path);
  std::remove(path.c_str());
  INFO(tag);
  const auto outer = trace.named("operations");
  REQUIRE(outer.size() == 1);
  const auto assigns = trace.named("assign");
  const auto reduces = trace.named("reduce");
  REQUIRE(!assigns.empty());
  REQUIRE(!reduces.empty());
  // The work ran on the stream's worker, with the number of elements.
  const auto on_stream = [&](const test::trace_event& e) {
    return trace.thread_names.at(e.tid) == "stream traced " + tag;
  };
  CHECK(std::any_of(assigns.begin(), assigns.end(), [&](const auto& e) {
    return on_stream(e) && e.arg("elements") == n && e.cat == B::name;
  }));
  CHECK(std::any_of(reduces.begin(), reduces.end(),
                    [&](const auto& e) { return on_stream(e) && e.arg("elements") == n; }));
  // The host waited for the reduction inside its range.
  const auto waits = trace.named("wait for stream");
  CHECK(std::any_of(waits.begin(), waits.end(), [&](const auto& e) {
    return e.tid == outer[0].tid && inside(e, outer[0]) && e.dur >= 1000;
  }));
  if constexpr (std::is_same_v<B, meld::sim<meld::async>>) {
    CHECK(trace.named("copy to device").size() >= 1);
    CHECK(trace.named("copy to host").size() >= 1);
  }
}

}  // namespace

TEST_CASE("trace: assignments, reductions and host waits on a CPU stream", "[core][trace]") {
  operations_are_traced<meld::cpu<meld::async>>("cpu");
}

TEST_CASE("trace: the same on the simulated device, with its copies", "[core][trace]") {
  operations_are_traced<meld::sim<meld::async>>("sim");
}

TEST_CASE("trace: off, meld records nothing", "[core][trace]") {
  if (std::getenv("MELD_TRACE")) return;  // a run that traces itself
  REQUIRE_FALSE(meld::trace::enabled());
  const std::string path = temp_path("off");
  {
    meld::trace_range r("unseen");
    meld::tensor<float> x = meld::ones<float>({64});
    x = x * 2.f;
  }
  meld::trace::write(path);  // writes the last recording's events (the other tests')
  const test::trace_file trace(path);
  std::remove(path.c_str());
  CHECK(trace.named("unseen").empty());
  for (const auto& e : trace.events) CHECK(e.arg("elements") != 64);
}

#if defined(__linux__)
TEST_CASE("trace: MELD_TRACE records the run and writes it at exit", "[core][trace]") {
  const std::string path = temp_path("environment");
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  const std::string command = "env MELD_TEST_TRACE_CHILD=1 MELD_TRACE='" + path + "' '" +
                              std::string(exe, static_cast<std::size_t>(n)) +
                              "' '[trace_child]' > /dev/null 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  const test::trace_file trace(path);
  std::remove(path.c_str());
  const auto mine = trace.named("child range");
  REQUIRE(mine.size() == 1);
  CHECK(trace.thread_names.at(mine[0].tid) == "main");
  const auto assigns = trace.named("assign");
  CHECK(std::any_of(assigns.begin(), assigns.end(),
                    [](const auto& e) { return e.arg("elements") == 4096; }));
}

// Run by the test above in a child process, with MELD_TRACE set. Hidden, but a filter of
// exclusions only (CTest's "~[sim]") selects hidden tests too: elsewhere it does nothing.
TEST_CASE("trace child", "[.][trace_child]") {
  if (!std::getenv("MELD_TEST_TRACE_CHILD")) return;
  REQUIRE(meld::trace::enabled());
  meld::trace_range r("child range");
  meld::tensor<float> x = meld::ones<float>({4096});
  x = x * 2.f;
}
#endif
