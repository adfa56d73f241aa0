// Faults on thread_comm: mismatched collectives (debug mode), a rank that stalls, a rank that
// throws. The others must throw meld::comm_error naming the culprit within about twice the
// timeout, never hang.
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/thread_comm.hpp>

#include "catch.hpp"
#include "worker_assertions.hpp"

namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

meld::comm_options opts(std::chrono::milliseconds timeout, bool debug) {
  meld::comm_options o;
  o.timeout = timeout;
  o.debug = debug;
  o.slice_bytes = 512;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs f on k threads without thread_group::run's abort-on-throw, recording what each threw.
struct outcome {
  std::string what;
  meld::comm_error::reason why{};
  bool threw = false;
  double seconds = 0;
};

template <class F>
std::vector<outcome> run_raw(meld::thread_group& g, F f) {
  std::vector<outcome> out(static_cast<std::size_t>(g.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < g.size(); ++r)
    threads.emplace_back([&, r] {
      auto& o = out[static_cast<std::size_t>(r)];
      const auto t0 = clk::now();
      try {
        f(g.comm(r));
      } catch (const meld::comm_error& e) {
        o.threw = true;
        o.what = e.what();
        o.why = e.why();
      }
      o.seconds = std::chrono::duration<double>(clk::now() - t0).count();
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("debug mode: mismatched collectives throw on every rank, naming what each called",
          "[dist]") {
  SECTION("different counts") {
    meld::thread_group g(3, opts(5s, true));
    auto out = run_raw(g, [](meld::thread_comm& c) {
      std::vector<float> buf(c.rank() == 1 ? 12 : 10);
      c.allreduce(buf);
    });
    for (const auto& o : out) {
      REQUIRE(o.threw);
      REQUIRE(o.why == meld::comm_error::reason::mismatch);
      INFO(o.what);
      REQUIRE(contains(o.what, "rank 0 called allreduce #1 (sum, float32 x 10)"));
      REQUIRE(contains(o.what, "rank 1 called allreduce #1 (sum, float32 x 12)"));
      REQUIRE(o.seconds < 2.5);
    }
  }
  SECTION("different operations, element types and roots") {
    meld::thread_group g(4, opts(5s, true));
    auto out = run_raw(g, [](meld::thread_comm& c) {
      std::vector<float> f(8);
      std::vector<double> d(8);
      c.barrier();  // #1 matches
      if (c.rank() == 0) c.broadcast(f, 0);
      if (c.rank() == 1) c.broadcast(f, 1);
      if (c.rank() == 2) c.allreduce(d, meld::reduce_op::max);
      if (c.rank() == 3) c.allreduce(f, meld::reduce_op::max);
    });
    for (const auto& o : out) {
      REQUIRE(o.threw);
      INFO(o.what);
      REQUIRE(contains(o.what, "different collectives at #2"));
      REQUIRE(contains(o.what, "rank 0 called broadcast #2 (float32 x 8, root 0)"));
      REQUIRE(contains(o.what, "rank 1 called broadcast #2 (float32 x 8, root 1)"));
      REQUIRE(contains(o.what, "rank 2 called allreduce #2 (max, float64 x 8)"));
      REQUIRE(contains(o.what, "rank 3 called allreduce #2 (max, float32 x 8)"));
    }
    // The group is failed: new collectives are refused at once.
    std::vector<float> f(1);
    REQUIRE_THROWS_AS(g.comm(0).allreduce(f), meld::comm_error);
  }
}

TEST_CASE("without debug mode, mismatched calls throw comm_error instead of reading out of bounds",
          "[dist]") {
  // A rank compares the call of each peer whose buffers it reads (and a barrier every rank's)
  // with its own before it reads: those that see the mismatch throw and abort the group; any
  // other throws in this collective or, at the latest, in the next (every lambda ends with a
  // barrier for that).
  auto check = [](const std::vector<outcome>& out, const std::vector<std::string>& calls) {
    for (std::size_t r = 0; r < out.size(); ++r) {
      INFO("rank " << r << ": " << out[r].what);
      REQUIRE(out[r].threw);
      REQUIRE(out[r].why == meld::comm_error::reason::mismatch);
      for (const std::string& call : calls) REQUIRE(contains(out[r].what, call));
      REQUIRE(out[r].seconds < 2.5);
    }
  };
  SECTION("counts: 10 floats against 100,000") {
    meld::thread_group g(2, opts(5s, false));
    auto out = run_raw(g, [](meld::thread_comm& c) {
      std::vector<float> buf(c.rank() == 0 ? 10 : 100000, 1.f);
      c.allreduce(buf);
      c.barrier();
    });
    check(out, {"rank 0 called allreduce #1 (sum, float32 x 10)",
                "rank 1 called allreduce #1 (sum, float32 x 100000)"});
  }
  SECTION("element types: float against double") {
    meld::thread_group g(3, opts(5s, false));
    auto out = run_raw(g, [](meld::thread_comm& c) {
      std::vector<float> f(5000, 1.f);
      std::vector<double> d(5000, 1.0);
      c.allreduce(f);  // #1 matches
      if (c.rank() == 1)
        c.allreduce(d);
      else
        c.allreduce(f);
      c.barrier();
    });
    check(out, {"allreduce #2 (sum, float32 x 5000)", "allreduce #2 (sum, float64 x 5000)"});
  }
  SECTION("kinds: allreduce against barrier, broadcast against allgather") {
    meld::thread_group g(2, opts(5s, false));
    auto out = run_raw(g, [](meld::thread_comm& c) {
      std::vector<float> buf(1000, 1.f);
      if (c.rank() == 0)
        c.allreduce(buf);
      else
        c.barrier();
      c.barrier();
    });
    check(out, {"rank 0 called allreduce #1 (sum, float32 x 1000)", "rank 1 called barrier #1"});
    meld::thread_group h(3, opts(5s, false));
    out = run_raw(h, [](meld::thread_comm& c) {
      std::vector<float> in(100, 1.f), all(300);
      if (c.rank() == 2)
        c.allgather(in, all);
      else
        c.broadcast(in, 0);
      c.barrier();
    });
    check(out,
          {"rank 2 called allgather #1 (float32 x 100)", "broadcast #1 (float32 x 100, root 0)"});
  }
  SECTION("roots, operations and reduce_scatter counts") {
    meld::thread_group g(3, opts(5s, false));
    auto out = run_raw(g, [](meld::thread_comm& c) {
      std::vector<float> buf(64, 1.f);
      c.broadcast(buf, c.rank() == 2 ? 1 : 0);
      c.barrier();
    });
    check(out, {"rank 2 called broadcast #1 (float32 x 64, root 1)"});
    out = run_raw(g, [](meld::thread_comm& c) {  // a failed group refuses, naming the mismatch
      std::vector<float> buf(64, 1.f);
      c.barrier();
      c.barrier();
    });
    check(out, {"rank 2 called broadcast #1 (float32 x 64, root 1)"});
    meld::thread_group h(2, opts(5s, false));
    out = run_raw(h, [](meld::thread_comm& c) {
      std::vector<float> buf(64, 1.f);
      c.allreduce(buf, c.rank() == 0 ? meld::reduce_op::sum : meld::reduce_op::max);
      c.barrier();
    });
    check(out, {"rank 0 called allreduce #1 (sum, float32 x 64)",
                "rank 1 called allreduce #1 (max, float32 x 64)"});
    meld::thread_group k(3, opts(5s, false));
    out = run_raw(k, [](meld::thread_comm& c) {
      const std::size_t m = c.rank() == 0 ? 1000 : 10;
      std::vector<float> in(3 * m, 1.f), part(m);
      c.reduce_scatter(in, part);
      c.barrier();
    });
    check(out,
          {"reduce_scatter #1 (sum, float32 x 1000)", "reduce_scatter #1 (sum, float32 x 10)"});
  }
}

TEST_CASE("a rank that never arrives: the others throw within twice the timeout, naming it",
          "[dist]") {
  for (bool debug : {false, true}) {
    const auto timeout = 600ms;
    meld::thread_group g(4, opts(timeout, debug));
    auto out = run_raw(g, [&](meld::thread_comm& c) {
      std::vector<float> buf(1000, 1.f);
      c.allreduce(buf);  // #1 completes
      if (c.rank() == 2) {
        std::this_thread::sleep_for(3 * timeout);  // stalls: arrives long after the timeout
        std::vector<float> late(1000);
        c.allreduce(late);  // must throw at once: the group has failed
        return;
      }
      c.allreduce(buf);  // #2: rank 2 is missing
    });
    INFO("debug " << debug);
    for (int r : {0, 1, 3}) {
      const auto& o = out[static_cast<std::size_t>(r)];
      INFO("rank " << r << ": " << o.what);
      REQUIRE(o.threw);
      REQUIRE(o.seconds < 2 * 0.6 + 0.3);
      REQUIRE(contains(o.what, "allreduce #2 (sum, float32 x 1000)"));
      REQUIRE(contains(o.what, "rank 2 never arrived"));
      REQUIRE(contains(o.what, "rank 2: allreduce #1"));
    }
    // The straggler arrives after 3 timeouts and fails immediately instead of waiting.
    REQUIRE(out[2].threw);
    REQUIRE(out[2].seconds < 3 * 0.6 + 0.5);
    REQUIRE(contains(out[2].what, "rank 2 never arrived"));
  }
}

TEST_CASE("a rank stalls in the middle of an asynchronous collective's group", "[dist]") {
  // Ranks 0 and 1 issue an asynchronous allreduce; rank 1 then waits on it, rank 0's peer is
  // absent: the request's wait() throws.
  meld::thread_group g(3, opts(400ms, false));
  auto out = run_raw(g, [](meld::thread_comm& c) {
    if (c.rank() == 0) return;  // rank 0 never takes part
    std::vector<double> buf(50000, 1.0);
    auto req = c.allreduce_async(buf);
    req.wait();
  });
  REQUIRE_FALSE(out[0].threw);
  for (int r : {1, 2}) {
    INFO(out[static_cast<std::size_t>(r)].what);
    REQUIRE(out[static_cast<std::size_t>(r)].threw);
    REQUIRE(contains(out[static_cast<std::size_t>(r)].what, "rank 0 never arrived"));
    REQUIRE(out[static_cast<std::size_t>(r)].seconds < 1.0);
  }
}

TEST_CASE("a rank that throws: thread_group::run aborts the others at once and rethrows it",
          "[dist]") {
  meld::thread_group g(5, opts(30s, true));
  const auto t0 = clk::now();
  std::vector<std::string> seen(5);
  try {
    g.run([&](meld::thread_comm& c) {
      std::vector<float> buf(100, 1.f);
      try {
        // After an abort every collective in flight may fail (even #1, if this rank is still
        // waiting in it for a live neighbour): fail fast, like NCCL's abort.
        c.allreduce(buf);
        if (c.rank() == 3) throw std::runtime_error("out of data");
        c.allreduce(buf);
      } catch (const meld::comm_error& e) {
        seen[static_cast<std::size_t>(c.rank())] = e.what();
        WORKER_REQUIRE(e.why() == meld::comm_error::reason::aborted);
        throw;
      }
    });
    FAIL("run did not throw");
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "out of data");  // the cause, not a consequence
  }
  // Far below the 30 s timeout: the others learned of the failure from the abort.
  REQUIRE(std::chrono::duration<double>(clk::now() - t0).count() < 5);
  for (int r : {0, 1, 2, 4}) {
    INFO(seen[static_cast<std::size_t>(r)]);
    REQUIRE(contains(seen[static_cast<std::size_t>(r)],
                     "rank 3 aborted the group: it threw: out of data"));
  }
  REQUIRE(g.aborted());
}

TEST_CASE("timeouts come from comm_options or MELD_COMM_TIMEOUT", "[dist]") {
  meld::thread_group g(2, opts(1500ms, false));
  REQUIRE(g.timeout() == 1500ms);
  meld::comm_options bad;
  bad.timeout = std::chrono::milliseconds(-1);
  REQUIRE_THROWS_AS(meld::thread_group(2, bad), std::invalid_argument);
}

namespace {
// Sets MELD_COMM_TIMEOUT for one scope.
struct timeout_env {
  explicit timeout_env(const char* value) { ::setenv("MELD_COMM_TIMEOUT", value, 1); }
  ~timeout_env() { ::unsetenv("MELD_COMM_TIMEOUT"); }
  timeout_env(const timeout_env&) = delete;
  timeout_env& operator=(const timeout_env&) = delete;
};

// Rank 1 arrives 200 ms after rank 0: a collective that a timeout fails at once would throw.
void late_arrival_completes(meld::thread_group& g) {
  auto out = run_raw(g, [](meld::thread_comm& c) {
    std::vector<float> buf(1000, 1.f);
    if (c.rank() == 1) std::this_thread::sleep_for(200ms);
    c.allreduce(buf);
    if (buf[999] != 2.f) throw meld::comm_error(meld::comm_error::reason::backend, "wrong sum");
  });
  for (const auto& o : out) {
    INFO(o.what);
    REQUIRE_FALSE(o.threw);
  }
}
}  // namespace

TEST_CASE("huge, infinite and tiny timeouts: forever or clamped, never an overflow", "[dist]") {
  using std::chrono::milliseconds;
  SECTION("comm_options: milliseconds::max() waits forever") {
    meld::comm_options o;
    o.timeout = milliseconds::max();
    meld::thread_group g(2, o);
    REQUIRE(g.timeout() == meld::comm_options::forever);
    late_arrival_completes(g);
    o.timeout = meld::comm_options::forever;
    REQUIRE(meld::thread_group(2, o).timeout() == meld::comm_options::forever);
  }
  SECTION("MELD_COMM_TIMEOUT: inf, none and 0 wait forever; 1e300 is clamped") {
    for (const char* forever : {"inf", "INF", "none", "0", "1e300"}) {
      INFO("MELD_COMM_TIMEOUT=" << forever);
      timeout_env env(forever);
      meld::thread_group g(2);
      REQUIRE(g.timeout() == meld::comm_options::forever);
      late_arrival_completes(g);
    }
  }
  SECTION("MELD_COMM_TIMEOUT: below a millisecond rounds up to one") {
    timeout_env env("1e-4");
    REQUIRE(meld::thread_group(2).timeout() == milliseconds(1));
    timeout_env env2("0.0015");
    REQUIRE(meld::thread_group(2).timeout() == milliseconds(2));
    timeout_env env3("2.5");
    REQUIRE(meld::thread_group(2).timeout() == milliseconds(2500));
    timeout_env env4("1e-400");  // (underflows to 0 in strtod: still tiny, not forever)
    REQUIRE(meld::thread_group(2).timeout() == milliseconds(1));
  }
  SECTION("MELD_COMM_TIMEOUT: nonsense is refused with a message") {
    for (const char* nonsense : {"", "abc", "-1", "nan", "-inf", "10s", "1e"}) {
      INFO("MELD_COMM_TIMEOUT=" << nonsense);
      timeout_env env(nonsense);
      try {
        meld::thread_group g(2);
        FAIL("accepted");
      } catch (const std::invalid_argument& e) {
        INFO(e.what());
        REQUIRE(contains(e.what(), std::string("MELD_COMM_TIMEOUT='") + nonsense + "'"));
        REQUIRE(contains(e.what(), "inf"));
      }
    }
  }
}
