// param_server under mpirun (3 and 4 processes): server and worker roles, the three consistency
// modes against serial references, sliced and whole keys, sparse rows, the update rule's state on
// the servers, checkpoints, data_parallel's result in sync mode, bad input, and workers or
// servers that stall (an error naming them within the timeout, never a hang).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/mpi_comm.hpp>
#include <meld/distributed/param_server.hpp>

#include "catch.hpp"
#include "toy_models.hpp"

namespace {

using meld::index_t;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A file name of this run: CTest runs test_ps_np3 and test_ps_np4 at once in one folder, and one's
// cleanup must not remove the other's checkpoint.
std::string run_file(const std::string& stem) {
  return stem + "_np" + std::to_string(world_size());
}

// The workers' own communicator (MPI_COMM_NULL on server-only ranks), for the tests' checks.
struct workers_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  explicit workers_comm(bool worker) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, worker ? 0 : MPI_UNDEFINED, rank, &comm);
  }
  ~workers_comm() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
  void barrier() const { MPI_Barrier(comm); }
};

meld::ps_options options(int servers, bool colocated, const char* mode,
                         std::chrono::milliseconds timeout = 10s) {
  meld::ps_options o;
  o.servers = servers;
  o.colocated = colocated;
  o.mode = meld::ps_mode::parse(mode);
  o.timeout = timeout;
  o.slice_elements = 64;  // the big keys of these tests are sliced over every server
  return o;
}

// value += the aggregated push: what every mode must end with is then an exact sum.
meld::ps_rule<double> accumulate() {
  return {[](const meld::ps_update<double>& u) {
            for (std::size_t i = 0; i < u.value.size(); ++i) u.value[i] += u.grad[i];
          },
          0};
}

// Worker w's push of round r, element i: small whole numbers (sums are exact in any order).
double push_value(int w, std::uint64_t r, std::size_t i) {
  return static_cast<double>((static_cast<std::size_t>(w) * 7 + r * 3 + i) % 11);
}

}  // namespace

TEST_CASE("ps_mode parses and names the modes", "[ps]") {
  REQUIRE(meld::ps_mode::parse("sync").mode == meld::ps_mode::kind::sync);
  REQUIRE(meld::ps_mode::parse("async").mode == meld::ps_mode::kind::async);
  REQUIRE(meld::ps_mode::parse("stale:3").staleness == 3);
  REQUIRE(meld::ps_mode::parse("stale:3").str() == "stale:3");
  REQUIRE(meld::ps_mode::parse("stale:0").lag() == 0);
  for (const char* bad : {"", "stale", "stale:", "stale:-1", "stale:x", "asynch"})
    REQUIRE_THROWS_WITH(meld::ps_mode::parse(bad), Catch::Matchers::Contains("is not sync"));
}

TEST_CASE("param_server: roles and bad input", "[ps]") {
  const int n = world_size();
  REQUIRE_THROWS_AS(meld::param_server<double>(MPI_COMM_WORLD, options(n, false, "sync")),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(meld::param_server<double>(MPI_COMM_WORLD, options(0, true, "sync")),
                    std::invalid_argument);
  meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync"));
  REQUIRE(ps.servers() == 1);
  REQUIRE(ps.workers() == n - 1);
  REQUIRE(ps.is_server() == (ps.rank() == 0));
  REQUIRE(ps.is_worker() == (ps.rank() > 0));
  if (!ps.is_worker()) {
    std::vector<double> v(4);
    REQUIRE_THROWS_WITH(ps.init(0, v), Catch::Matchers::Contains("is a server only"));
    ps.serve();
    return;
  }
  REQUIRE(ps.worker_index() == ps.rank() - 1);
  REQUIRE_THROWS_AS(ps.serve(), std::logic_error);
  std::vector<double> v(12, 1.0), small(5);
  REQUIRE_THROWS_WITH(ps.push(3, v), Catch::Matchers::Contains("unknown key 3"));
  REQUIRE_THROWS_WITH(ps.init(-1, v), Catch::Matchers::Contains("key -1 < 0"));
  REQUIRE_THROWS_AS(ps.init(0, v, 5), meld::shape_error);
  ps.init(0, v, 4).wait();
  REQUIRE_THROWS_WITH(ps.init(0, v), Catch::Matchers::Contains("key 0 exists"));
  REQUIRE_THROWS_WITH(ps.push(0, small),
                      Catch::Matchers::Contains("key 0 holds 12 elements, the buffer has 5"));
  const std::vector<index_t> rows = {0, 3};
  std::vector<double> two(8);
  REQUIRE_THROWS_WITH(ps.pull_rows(0, std::vector<index_t>{0, 3}, two),
                      Catch::Matchers::Contains("row 3 of key 0 is outside 0 .. 2"));
  REQUIRE_THROWS_AS(ps.pull_rows(0, std::vector<index_t>{0}, two), meld::shape_error);
  ps.close();
  REQUIRE_THROWS_WITH(ps.pull(0, v), Catch::Matchers::Contains("has closed"));
}

TEST_CASE("param_server: every mode applies every push; sync and stale bound what pulls see",
          "[ps]") {
  const int n = world_size();
  for (const char* mode : {"sync", "stale:0", "stale:2", "async"}) {
    for (int servers : {1, 2}) {
      const bool colocated = servers == 2;  // ranks 0, 1 serve and work: every rank a worker
      INFO("mode " << mode << ", " << servers << " servers" << (colocated ? ", colocated" : ""));
      meld::param_server<double> ps(MPI_COMM_WORLD, options(servers, colocated, mode),
                                    accumulate());
      workers_comm wc(ps.is_worker());
      if (!ps.is_worker()) {
        ps.serve();
        continue;
      }
      const int W = ps.workers(), w = ps.worker_index();
      REQUIRE(W == (colocated ? n : n - 1));
      // Key 0 (300 elements) is sliced over the servers; key 1 (one element, whole) counts the
      // rounds applied: every worker pushes 1 per round.
      const std::size_t big = 300;
      std::vector<double> a(big, 1.0), out_a(big), out_b(1);
      ps.init(0, a).wait();
      ps.init(1, std::vector<double>{0.0}).wait();
      const meld::ps_mode m = meld::ps_mode::parse(mode);
      const auto lag = static_cast<std::uint64_t>(m.lag());
      const bool async = m.mode == meld::ps_mode::kind::async;
      const std::uint64_t rounds = 12;
      bool behind = false;
      for (std::uint64_t r = 1; r <= rounds; ++r) {
        if (w == 0) std::this_thread::sleep_for(4ms);  // the slow worker
        std::vector<double> g(big);
        for (std::size_t i = 0; i < big; ++i) g[i] = push_value(w, r, i);
        auto p0 = ps.push(0, g);
        auto p1 = ps.push(1, std::vector<double>{1.0});
        ps.pull(1, out_b).wait();
        ps.pull(0, out_a).wait();
        const double seen = out_b[0];
        if (async) {
          REQUIRE(seen >= static_cast<double>(r));  // its own pushes at least
          REQUIRE(seen <= static_cast<double>(W * rounds));
          continue;
        }
        // Whole rounds of every worker, at most `lag` behind this worker's own.
        const auto applied = static_cast<std::uint64_t>(seen) / static_cast<std::uint64_t>(W);
        REQUIRE(seen == static_cast<double>(applied * static_cast<std::uint64_t>(W)));
        REQUIRE(applied + lag >= r);
        REQUIRE(applied <= std::min(rounds, r + lag));
        if (lag == 0) REQUIRE(applied == r);
        if (applied < r) behind = true;
        // Key 0 holds the same rounds as key 1 at most `lag` apart (its pull came after).
        double at_applied = 1.0;
        for (std::uint64_t k = 1; k <= applied; ++k)
          for (int v = 0; v < W; ++v) at_applied += push_value(v, k, 7);
        if (lag == 0) REQUIRE(out_a[7] == at_applied);
      }
      // Every push is applied in the end: pull until the servers have taken them all.
      double want_b = static_cast<double>(W * rounds);
      std::vector<double> want_a(big, 1.0);
      for (std::uint64_t r = 1; r <= rounds; ++r)
        for (int v = 0; v < W; ++v)
          for (std::size_t i = 0; i < big; ++i) want_a[i] += push_value(v, r, i);
      const auto deadline = clk::now() + 5s;
      do {
        ps.pull(1, out_b).wait();
        ps.pull(0, out_a).wait();
      } while ((out_b[0] != want_b || out_a != want_a) && clk::now() < deadline &&
               (std::this_thread::sleep_for(1ms), true));
      REQUIRE(out_b[0] == want_b);
      REQUIRE(out_a == want_a);
      if (lag > 0) {
        // Some fast worker ran ahead of the slow one: a pull saw fewer rounds than its own.
        int any = behind ? 1 : 0, sum = 0;
        MPI_Allreduce(&any, &sum, 1, MPI_INT, MPI_SUM, wc.comm);
        REQUIRE(sum > 0);
      }
      ps.close();
    }
  }
}

TEST_CASE("param_server: sparse rows of a sliced table", "[ps]") {
  meld::param_server<double> ps(MPI_COMM_WORLD, options(2, true, "sync"), accumulate());
  const int W = ps.workers(), w = ps.worker_index();
  const index_t rows = 40, cols = 3;
  std::vector<double> table(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<double>(i);
  ps.init(7, table, cols).wait();
  auto rows_of = [&](int v, std::uint64_t r) {  // with a repeat: a row given twice adds twice
    std::vector<index_t> ids;
    for (index_t k = 0; k < 6; ++k)
      ids.push_back((v * 5 + static_cast<index_t>(r) * 11 + k * 7) % rows);
    ids.push_back(ids.front());
    return ids;
  };
  std::vector<double> reference = table;
  for (std::uint64_t r = 1; r <= 5; ++r) {
    for (int v = 0; v < W; ++v) {
      const auto ids = rows_of(v, r);
      for (std::size_t k = 0; k < ids.size(); ++k)
        for (index_t c = 0; c < cols; ++c)
          reference[static_cast<std::size_t>(ids[k] * cols + c)] +=
              push_value(v, r, k * 3 + static_cast<std::size_t>(c));
    }
    const auto ids = rows_of(w, r);
    std::vector<double> vals(ids.size() * static_cast<std::size_t>(cols));
    for (std::size_t k = 0; k < ids.size(); ++k)
      for (index_t c = 0; c < cols; ++c)
        vals[k * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)] =
            push_value(w, r, k * 3 + static_cast<std::size_t>(c));
    ps.push_rows(7, ids, vals).wait();
    // Pull some rows on both servers, in an order of their own, one of them twice.
    const std::vector<index_t> want = {39, 0, 21, 19, 20, 0};
    std::vector<double> got(want.size() * static_cast<std::size_t>(cols));
    ps.pull_rows(7, want, got).wait();
    for (std::size_t k = 0; k < want.size(); ++k)
      for (index_t c = 0; c < cols; ++c)
        REQUIRE(got[k * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)] ==
                reference[static_cast<std::size_t>(want[k] * cols + c)]);
  }
  std::vector<double> whole(table.size());
  ps.pull(7, whole).wait();
  REQUIRE(whole == reference);
  ps.close();
}

TEST_CASE("param_server: sync SGD equals data_parallel's allreduce training", "[ps]") {
  // The same MLP trained on the same batches: data_parallel<mpi_comm> over the workers, and
  // the workers pushing their shard's gradients to servers that run SGD with momentum.
  meld::ps_options o = options(2, false, "sync");
  o.slice_elements = 100;  // the first layer's weight is sliced, the rest whole
  const float lr = 0.1f, momentum = 0.9f;
  meld::param_server<float> ps(MPI_COMM_WORLD, o, meld::ps_sgd<float>(lr, momentum));
  workers_comm wc(ps.is_worker());
  if (!ps.is_worker()) {
    ps.serve();
    return;
  }
  const int W = ps.workers(), w = ps.worker_index();
  const index_t batch = 24 * W;
  const meld::tensor<float> target = meld::uniform<float>({8, 3}, -1.f, 1.f, 5);
  auto batch_at = [&](int s) {
    meld::tensor<float> x =
        meld::uniform<float>({batch, 8}, -1.f, 1.f, 50 + static_cast<std::uint64_t>(s));
    return std::pair(x, meld::tensor<float>(meld::matmul(x, target)));
  };
  const int steps = 6;

  // Reference: data_parallel over the workers' communicator, momentum SGD by hand.
  toy::mlp<float> ref({8, 16, 3}, 1);
  std::vector<meld::tensor<float>> velocity;
  ref.visit_parameters([&](std::string_view, auto& p, auto&) {
    velocity.emplace_back(meld::tensor<float>(p.shape()));
  });
  {
    meld::mpi_comm comm(wc.comm);
    meld::data_parallel<toy::mlp<float>, meld::mpi_comm> dp(ref, comm);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch_at(s);
      dp.step(x, y, toy::mse{});
      std::size_t i = 0;
      ref.visit_parameters([&](std::string_view, auto& p, auto& g) {
        velocity[i] = momentum * velocity[i] + g;
        p -= lr * velocity[i];
        ++i;
      });
    }
  }

  // The parameter server: each worker computes its shard's mean gradient.
  toy::mlp<float> model({8, 16, 3}, 1);
  int key = 0;
  model.visit_parameters([&](std::string_view, auto& p, auto&) {
    ps.init(key++, std::span<const float>(p.data(), static_cast<std::size_t>(p.size()))).wait();
  });
  const index_t shard = batch / W;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_at(s);
    const meld::tensor<float> xs(x.slice(meld::range(w * shard, (w + 1) * shard)));
    const meld::tensor<float> ys(y.slice(meld::range(w * shard, (w + 1) * shard)));
    model.zero_grad();
    meld::tensor<float> grad;
    toy::mse{}(model.forward(xs), ys, grad);
    model.backward(grad);
    std::vector<meld::ps_handle> pending;
    key = 0;
    model.visit_parameters([&](std::string_view, auto&, auto& g) {
      pending.push_back(
          ps.push(key++, std::span<const float>(g.data(), static_cast<std::size_t>(g.size()))));
    });
    key = 0;
    model.visit_parameters([&](std::string_view, auto& p, auto&) {
      pending.push_back(
          ps.pull(key++, std::span<float>(p.data(), static_cast<std::size_t>(p.size()))));
    });
    for (auto& h : pending) h.wait();
  }
  const auto a = toy::parameters(ref), b = toy::parameters(model);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (index_t j = 0; j < a[i].size(); ++j) {
      const float x = a[i].data()[j], y = b[i].data()[j];
      REQUIRE(std::abs(x - y) <= 1e-5f * (1.f + std::abs(x)));
    }
  ps.close();
}

TEST_CASE("param_server: checkpoints keep shards and the rule's state", "[ps]") {
  const std::string path = run_file("test_ps_checkpoint");
  auto run = [&](int from, int to, const std::string& restore, bool save) {
    meld::ps_options o = options(2, true, "sync");
    o.restore = restore;
    meld::param_server<double> ps(MPI_COMM_WORLD, o, meld::ps_adam<double>(0.01));
    workers_comm wc(true);
    std::vector<double> v(150, 0.5), out(150);  // sliced over both servers
    std::vector<double> u(3, -1.0);             // whole, on server 1
    ps.init(4, v).wait();
    ps.init(5, u).wait();
    for (int r = from; r < to; ++r) {
      std::vector<double> g(150), h(3);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = push_value(ps.worker_index(), r, i) - 5;
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = push_value(ps.worker_index(), r, i) - 4;
      ps.push(4, g).wait();
      ps.push(5, h).wait();
      ps.pull(4, out).wait();
      ps.pull(5, u).wait();
    }
    if (save) {
      wc.barrier();
      if (ps.worker_index() == 0) ps.checkpoint(path).wait();
      wc.barrier();
    }
    ps.close();
    out.insert(out.end(), u.begin(), u.end());
    return out;
  };
  const auto straight = run(0, 8, "", false);
  run(0, 5, "", true);
  const auto resumed = run(5, 8, path, false);
  REQUIRE(resumed == straight);  // Adam's moments and step count came back bit for bit
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank < 2) std::remove((path + ".server" + std::to_string(rank)).c_str());
}

TEST_CASE("param_server: a restore from a missing checkpoint names the file", "[ps]") {
  meld::ps_options o = options(1, true, "sync", 1s);
  o.restore = "no_such_checkpoint";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    REQUIRE_THROWS_WITH(meld::param_server<double>(MPI_COMM_WORLD, o),
                        Catch::Matchers::Contains("cannot read the checkpoint "
                                                  "'no_such_checkpoint.server0'"));
  } else {
    // The others construct theirs; with server 0 gone, their operations fail in time.
    meld::param_server<double> ps(MPI_COMM_WORLD, o);
    std::vector<double> v(3);
    ps.init(0, v).wait();  // worker 1's init sends nothing
    const auto t0 = clk::now();
    REQUIRE_THROWS_WITH(ps.pull(0, v).wait(),
                        Catch::Matchers::Contains("no answer from server rank 0"));
    REQUIRE(clk::now() - t0 < 3s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: an update rule that throws fails the workers' pulls with its message",
          "[ps]") {
  meld::ps_rule<double> bad{[](const meld::ps_update<double>& u) {
                              if (u.step == 1) throw std::domain_error("learning rate is NaN");
                              for (std::size_t i = 0; i < u.value.size(); ++i) u.value[i] += 1;
                            },
                            0};
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync"), bad);
    if (!ps.is_worker()) {
      REQUIRE_THROWS_WITH(ps.serve(), Catch::Matchers::Contains("learning rate is NaN"));
    } else {
      std::vector<double> v(4, 0.0);
      ps.init(0, v).wait();
      ps.push(0, v).wait();
      ps.pull(0, v).wait();
      REQUIRE(v == std::vector<double>(4, 1.0));
      ps.push(0, v).wait();
      REQUIRE_THROWS_WITH(ps.pull(0, v).wait(),
                          Catch::Matchers::Contains("the update rule threw on key 0 (elements "
                                                    "0 .. 4): learning rate is NaN"));
      REQUIRE(v == std::vector<double>(4, 1.0));  // a failed pull leaves `out` as it was
      REQUIRE_THROWS_AS(ps.close(), meld::comm_error);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: a worker that stalls is named within the timeout", "[ps]") {
  // Worker rank 1 stops pushing after round 1; the others' pulls of round 2 fail naming it.
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync", 1s));
    if (!ps.is_worker()) {
      REQUIRE_THROWS_WITH(ps.serve(), Catch::Matchers::Contains("worker rank 1 pushed round 1"));
    } else {
      std::vector<double> v(10, 0.0);
      ps.init(0, v).wait();
      ps.push(0, v).wait();
      ps.pull(0, v).wait();
      if (ps.rank() == 1) {
        std::this_thread::sleep_for(3s);  // stalls past the others' timeout, then leaves
      } else {
        ps.push(0, v).wait();
        const auto t0 = clk::now();
        REQUIRE_THROWS_WITH(ps.pull(0, v).wait(),
                            Catch::Matchers::Contains("worker rank 1 pushed round 1") &&
                                Catch::Matchers::Contains("waited"));
        REQUIRE(clk::now() - t0 < 2500ms);
        // Refused from now on, with the first error.
        REQUIRE_THROWS_WITH(ps.pull(0, v),
                            Catch::Matchers::Contains("an earlier operation failed"));
      }
      REQUIRE_THROWS_AS(ps.close(), meld::comm_error);  // the server's error again
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: a server that stalls is named within twice the timeout", "[ps]") {
  // Server 0's update rule blocks for longer than the workers wait.
  {
    meld::ps_rule<double> slow{
        [](const meld::ps_update<double>&) { std::this_thread::sleep_for(3s); }, 0};
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync", 500ms), slow);
    if (!ps.is_worker()) {
      try {
        ps.serve();
      } catch (const meld::comm_error&) {
      }
    } else {
      std::vector<double> v(10, 0.0);
      ps.init(0, v).wait();
      ps.push(0, v).wait();
      const auto t0 = clk::now();
      REQUIRE_THROWS_WITH(ps.pull(0, v).wait(),
                          Catch::Matchers::Contains("no answer from server rank 0"));
      REQUIRE(clk::now() - t0 < 1500ms);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: async pushes to keys of equal size and other row lengths", "[ps]") {
  // The asynchronous scratch sum serves every key: a key of 20 elements in rows of 5 and one of
  // 20 flat elements must each be updated whole (the second once kept the first's row count).
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "async"), accumulate());
    if (!ps.is_worker()) {
      ps.serve();
    } else {
      const int W = ps.workers();
      std::vector<double> a(20, 1.0), b(20, 2.0), ones(20, 1.0), got(20);
      ps.init(0, a, 5).wait();
      ps.init(1, b).wait();
      ps.push(0, ones).wait();
      ps.push(1, ones).wait();
      const std::vector<index_t> row = {17};
      ps.push_rows(1, row, std::vector<double>{10.0}).wait();
      std::vector<double> want(20, 2.0 + W);
      want[17] += 10.0 * W;
      const auto deadline = clk::now() + 5s;
      do ps.pull(1, got).wait();
      while (got != want && clk::now() < deadline && (std::this_thread::sleep_for(1ms), true));
      REQUIRE(got == want);
      do ps.pull(0, got).wait();
      while (got != std::vector<double>(20, 1.0 + W) && clk::now() < deadline);
      REQUIRE(got == std::vector<double>(20, 1.0 + W));
      ps.close();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: pull_rows of more than 1024 bytes from one server", "[ps]") {
  // 60 rows of 8 doubles from each server (3,840 bytes), remote and colocated.
  for (const bool colocated : {false, true}) {
    INFO((colocated ? "colocated" : "server-only ranks"));
    meld::param_server<double> ps(MPI_COMM_WORLD, options(colocated ? 2 : 1, colocated, "sync"));
    if (!ps.is_worker()) {
      ps.serve();
      continue;
    }
    const index_t rows = 120, cols = 8;
    std::vector<double> table(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<double>(i) * 0.5;
    ps.init(3, table, cols).wait();
    std::vector<index_t> want;
    for (index_t r = rows - 1; r >= 0; r -= 1) want.push_back(r);  // every row, backwards
    std::vector<double> got(want.size() * static_cast<std::size_t>(cols), -1.0);
    ps.pull_rows(3, want, got).wait();
    for (std::size_t k = 0; k < want.size(); ++k)
      for (index_t c = 0; c < cols; ++c)
        REQUIRE(got[k * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)] ==
                table[static_cast<std::size_t>(want[k] * cols + c)]);
    ps.close();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: workers busy for longer than the timeout are no failure", "[ps]") {
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync", 1s), accumulate());
    if (!ps.is_worker()) {
      ps.serve();  // no error: every worker closed
    } else {
      std::vector<double> v(6, 0.0);
      ps.init(0, v).wait();
      for (int r = 1; r <= 2; ++r) {
        std::this_thread::sleep_for(1600ms);  // every worker computes for 1.6x the timeout
        ps.push(0, std::vector<double>(6, 1.0)).wait();
        ps.pull(0, v).wait();
        REQUIRE(v == std::vector<double>(6, static_cast<double>(r * ps.workers())));
      }
      ps.close();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: replies stay with their operations past 30000 in flight", "[ps]") {
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync"), accumulate());
    workers_comm wc(ps.is_worker());
    if (!ps.is_worker()) {
      ps.serve();
    } else {
      std::vector<double> zero(4, 0.0), key1(1, 7.0);
      ps.init(0, zero).wait();
      ps.init(1, key1).wait();
      if (ps.worker_index() == 0) {
        // A pull of key 0 that waits for the other workers' round, then 30,050 pulls of key 1
        // answered at once; the waiting pull's reply comes last.
        ps.push(0, std::vector<double>(4, 1.0)).wait();
        std::vector<double> waiting(4, -1.0);
        auto slow = ps.pull(0, waiting);
        const std::size_t n = 30050;
        std::vector<double> fast(n, -1.0);
        std::vector<meld::ps_handle> handles;
        handles.reserve(n);
        for (std::size_t i = 0; i < n; ++i)
          handles.push_back(ps.pull(1, std::span<double>(&fast[i], 1)));
        for (auto& h : handles) h.wait();
        wc.barrier();  // now the others push
        slow.wait();
        REQUIRE(waiting == std::vector<double>(4, static_cast<double>(ps.workers())));
        REQUIRE(std::count(fast.begin(), fast.end(), 7.0) == static_cast<std::ptrdiff_t>(n));
      } else {
        wc.barrier();
        ps.push(0, std::vector<double>(4, 1.0)).wait();
      }
      ps.close();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: a rule that throws something else fails the round", "[ps]") {
  meld::ps_rule<double> bad{[](const meld::ps_update<double>&) { throw 42; }, 0};
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync"), bad);
    if (!ps.is_worker()) {
      REQUIRE_THROWS_WITH(ps.serve(), Catch::Matchers::Contains("not derived from std::exception"));
    } else {
      std::vector<double> v(4, 0.0);
      ps.init(0, v).wait();
      ps.push(0, v).wait();
      REQUIRE_THROWS_WITH(ps.pull(0, v).wait(),
                          Catch::Matchers::Contains("the update rule threw on key 0") &&
                              Catch::Matchers::Contains("not derived from std::exception"));
      REQUIRE_THROWS_AS(ps.close(), meld::comm_error);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: a key that worker 0 never initialized is named", "[ps]") {
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(1, false, "sync", 500ms));
    if (!ps.is_worker()) {
      REQUIRE_THROWS_WITH(ps.serve(), Catch::Matchers::Contains("key 3 was used by worker rank"));
    } else if (ps.worker_index() == 0) {
      std::this_thread::sleep_for(200ms);  // uses no key; its close hears of the failure
      REQUIRE_THROWS_WITH(ps.close(), Catch::Matchers::Contains("never initialized"));
    } else {
      std::vector<double> v(5, 1.0);
      ps.init(3, v).wait();  // worker 0 does not: its value would be the one kept
      ps.push(3, v).wait();
      const auto t0 = clk::now();
      REQUIRE_THROWS_WITH(ps.pull(3, v).wait(),
                          Catch::Matchers::Contains("key 3 was used by worker rank") &&
                              Catch::Matchers::Contains("never initialized: worker 0 (rank 1)"));
      REQUIRE(clk::now() - t0 < 1500ms);
      REQUIRE_THROWS_AS(ps.close(), meld::comm_error);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("param_server: a truncated or corrupted server checkpoint is refused whole", "[ps]") {
  const std::string path = run_file("test_ps_corrupt");
  {
    meld::param_server<double> ps(MPI_COMM_WORLD, options(2, true, "sync"), accumulate());
    workers_comm wc(true);
    ps.init(2, std::vector<double>(5, 1.5)).wait();  // keys 2 and 4 live on server 0
    ps.init(4, std::vector<double>(3, -2.0)).wait();
    ps.push(2, std::vector<double>(5, 1.0)).wait();
    std::vector<double> v(5);
    ps.pull(2, v).wait();
    wc.barrier();
    if (ps.worker_index() == 0) ps.checkpoint(path).wait();
    wc.barrier();
    ps.close();
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::string bytes;
    {
      std::FILE* f = std::fopen((path + ".server0").c_str(), "rb");
      REQUIRE(f);
      for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(static_cast<char>(c));
      std::fclose(f);
    }
    const std::string copy = run_file("test_ps_corrupt_copy");
    auto restore = [&](const std::string& content) {
      std::FILE* f = std::fopen((copy + ".server0").c_str(), "wb");
      std::fwrite(content.data(), 1, content.size(), f);
      std::fclose(f);
      meld::detail::ps::server<double>::config c;
      c.index = 0;
      c.servers = 2;
      c.workers = world_size();
      c.timeout = 1s;
      meld::detail::ps::server<double> s(c, accumulate(), MPI_COMM_SELF, MPI_COMM_SELF, copy);
    };
    REQUIRE_NOTHROW(restore(bytes));
    auto refused = [&](const std::string& content) {
      try {
        restore(content);
      } catch (const meld::checkpoint_error& e) {
        return std::string(e.what()).find(copy + ".server0") != std::string::npos;
      }
      return false;
    };
    std::size_t cut = 0, flipped = 0;
    for (std::size_t n = 0; n < bytes.size(); ++n) cut += refused(bytes.substr(0, n));
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ 0x10);
      flipped += refused(bad);
    }
    REQUIRE(cut == bytes.size());      // every truncation, between keys or inside one
    REQUIRE(flipped == bytes.size());  // every flipped byte
    REQUIRE(refused(bytes + "x"));
    std::remove((copy + ".server0").c_str());
  }
  if (rank < 2) std::remove((path + ".server" + std::to_string(rank)).c_str());
  MPI_Barrier(MPI_COMM_WORLD);
}

namespace {

// One server driven by hand on this rank alone (MPI_COMM_SELF): the protocol fuzzer's target.
struct lone_server {
  using server_t = meld::detail::ps::server<double>;
  MPI_Comm req = MPI_COMM_NULL, rep = MPI_COMM_NULL;
  meld::detail::ps::mpi_calls mpi;
  std::unique_ptr<server_t> server;
  std::thread thread;
  std::string failure = "running";
  std::uint64_t requests = 0;

  lone_server() {
    MPI_Comm_dup(MPI_COMM_SELF, &req);
    MPI_Comm_dup(MPI_COMM_SELF, &rep);
    server_t::config c;
    c.servers = 1;
    c.workers = 1;
    c.timeout = 10s;
    server = std::make_unique<server_t>(c, accumulate(), req, rep, "");
    thread = std::thread([this] { failure = server->run(); });
  }
  ~lone_server() {
    if (thread.joinable()) {
      server->stop();
      thread.join();
    }
    MPI_Comm_free(&req);
    MPI_Comm_free(&rep);
  }
  void send(const std::vector<std::byte>& bytes) {
    MPI_Request r;
    {
      auto lock = mpi.lock();
      MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0,
                meld::detail::ps::request_tag, req, &r);
    }
    for (int done = 0; !done; std::this_thread::yield()) {
      auto lock = mpi.lock();
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
  }
  // The next reply (within 5 s).
  meld::detail::ps::message reply() {
    meld::detail::ps::message m;
    const auto deadline = clk::now() + 5s;
    for (;;) {
      {
        auto lock = mpi.lock();
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(0, meld::detail::ps::reply_tag, rep, &flag, &st);
        if (flag) {
          int n = 0;
          MPI_Get_count(&st, MPI_BYTE, &n);
          m.bytes().resize(static_cast<std::size_t>(n));
          MPI_Recv(m.bytes().data(), n, MPI_BYTE, 0, meld::detail::ps::reply_tag, rep,
                   MPI_STATUS_IGNORE);
          return m;
        }
      }
      if (clk::now() > deadline) throw std::runtime_error("the server did not answer");
      std::this_thread::yield();
    }
  }
  bool pending_reply() {
    std::this_thread::sleep_for(2ms);
    auto lock = mpi.lock();
    int flag = 0;
    MPI_Iprobe(0, meld::detail::ps::reply_tag, rep, &flag, MPI_STATUS_IGNORE);
    return flag;
  }
  meld::detail::ps::header head(meld::detail::ps::op kind, std::uint64_t clock = 0) {
    meld::detail::ps::header h;
    h.kind = kind;
    h.key = 0;
    h.worker = 0;
    h.clock = clock;
    h.request = ++requests;
    h.row_begin = 0;
    h.rows = 4;
    return h;
  }
};

}  // namespace

TEST_CASE("param_server: a server fed random, cut, forged and replayed requests (fuzz)", "[ps]") {
  // Each malformed request is answered with an error and changes nothing; the value equals a
  // reference that applies the well-formed pushes alone, and the server ends without a failure.
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  using meld::detail::ps::message;
  using meld::detail::ps::op;
  lone_server s;
  std::mt19937_64 rng(20261204);
  auto uniform = [&](std::uint64_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::size_t rows = 4, cols = 3, n = rows * cols;
  std::vector<double> reference(n);
  for (std::size_t i = 0; i < n; ++i) reference[i] = static_cast<double>(i);
  // The key: 4 rows of 3.
  {
    auto h = s.head(op::init);
    h.rows_total = 4;
    h.cols = 3;
    message m(h, n * sizeof(double));
    std::memcpy(m.payload(), reference.data(), n * sizeof(double));
    s.send(m.bytes());
    REQUIRE(s.reply().head().status == 0);
  }
  auto pull_matches = [&] {
    const auto h = s.head(op::pull);
    s.send(message(h).bytes());
    const message r = s.reply();
    REQUIRE(r.head().request == h.request);
    REQUIRE(r.head().status == 0);
    REQUIRE(r.payload_bytes() == n * sizeof(double));
    std::vector<double> got(n);
    std::memcpy(got.data(), r.payload(), n * sizeof(double));
    REQUIRE(got == reference);
  };
  auto refused = [&](const std::vector<std::byte>& bytes, std::uint64_t request) {
    s.send(bytes);
    const message r = s.reply();
    REQUIRE(r.head().request == request);
    REQUIRE(r.head().status != 0);
    REQUIRE_THAT(std::string(reinterpret_cast<const char*>(r.payload()), r.payload_bytes()),
                 Catch::Matchers::Contains("refused"));
  };
  std::uint64_t round = 0;
  std::vector<message> pushes;  // for replays
  int kinds[8] = {};
  for (int it = 0; it < 3000; ++it) {
    const int what = static_cast<int>(uniform(8));
    ++kinds[what];
    if (what == 0) {  // a well-formed push (applied) and, sometimes, a check
      auto h = s.head(op::push, ++round);
      message m(h, n * sizeof(double));
      std::vector<double> g(n);
      for (auto& x : g) x = static_cast<double>(uniform(9)) - 4;
      std::memcpy(m.payload(), g.data(), n * sizeof(double));
      for (std::size_t i = 0; i < n; ++i) reference[i] += g[i];
      s.send(m.bytes());
      pushes.push_back(std::move(m));
    } else if (what == 1) {  // random bytes with an invalid kind (or shorter than a header)
      std::vector<std::byte> b(uniform(200));
      for (auto& x : b) x = static_cast<std::byte>(rng());
      if (b.size() < sizeof(meld::detail::ps::header)) {
        s.send(b);
        REQUIRE_FALSE(s.pending_reply());  // not a request: dropped
        continue;
      }
      const std::int32_t kind = 100 + static_cast<std::int32_t>(uniform(1000));
      std::memcpy(b.data(), &kind, sizeof kind);
      std::uint64_t request;
      std::memcpy(&request, b.data() + offsetof(meld::detail::ps::header, request), 8);
      const std::int32_t worker = 0;
      std::memcpy(b.data() + offsetof(meld::detail::ps::header, worker), &worker, 4);
      refused(b, request);
    } else if (what == 2 && !pushes.empty()) {  // a replayed push
      message& old = pushes[uniform(pushes.size())];
      refused(old.bytes(), old.head().request);
    } else if (what == 3) {  // a push cut short
      auto h = s.head(op::push, round + 1);
      message m(h, uniform(n) * sizeof(double) + uniform(8));
      refused(m.bytes(), h.request);
    } else if (what == 4) {  // a forged worker index or key sign
      auto h = s.head(uniform(2) ? op::pull : op::push, round + 1);
      if (uniform(2))
        h.worker = 1 + static_cast<std::int32_t>(uniform(5));
      else
        h.key = -1 - static_cast<std::int32_t>(uniform(5));
      message m(h, h.kind == op::push ? n * sizeof(double) : 0);
      refused(m.bytes(), h.request);
    } else if (what == 5) {  // rows that are not the shard's, or sparse rows outside it
      auto h = s.head(uniform(2) ? op::pull_rows : op::pull);
      if (h.kind == op::pull) {
        h.rows = 1 + static_cast<std::int64_t>(uniform(3));
        refused(message(h).bytes(), h.request);
      } else {
        h.rows = 2;
        message m(h, 2 * sizeof(std::int64_t));
        const std::int64_t ids[2] = {1, uniform(2) ? 4 + static_cast<std::int64_t>(uniform(9))
                                                   : -1 - static_cast<std::int64_t>(uniform(9))};
        std::memcpy(m.payload(), ids, sizeof ids);
        refused(m.bytes(), h.request);
      }
    } else if (what == 6) {  // a second init of another shape, or of a size it does not carry
      auto h = s.head(op::init);
      h.key = 1;
      h.rows_total = 4;
      h.cols = 3;
      message m(h, n * sizeof(double) - 8 * (1 + uniform(4)));
      refused(m.bytes(), h.request);
    } else {
      pull_matches();
    }
  }
  pull_matches();
  for (int k : kinds) REQUIRE(k > 0);
  s.send(message(s.head(op::done)).bytes());
  REQUIRE(s.reply().head().status == 0);
  s.thread.join();
  REQUIRE(s.failure.empty());
}
