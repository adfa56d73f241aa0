// mpi_comm under mpirun (2, 3, 4 processes): collectives against a serial reference, results
// bit-identical on every rank, data_parallel across processes, mismatch detection, a rank that
// stalls, a rank that aborts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/kv_store.hpp>
#include <meld/distributed/mpi_comm.hpp>

#include "catch.hpp"
#include "dp_suite.hpp"
#include "toy_models.hpp"

namespace {

using meld::index_t;
using meld::reduce_op;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

meld::mpi_comm_options opts(std::chrono::milliseconds timeout = 20s, bool native = false,
                            std::size_t slice = 0) {
  meld::mpi_comm_options o;
  o.timeout = timeout;
  o.debug = true;
  o.native_allreduce = native;
  o.slice_bytes = slice;
  return o;
}

template <class T>
std::vector<T> rank_data(int rank, std::size_t n, std::uint32_t salt) {
  std::mt19937 gen(1000u * static_cast<std::uint32_t>(rank) + salt);
  std::uniform_real_distribution<double> dist(-100, 100);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(std::is_integral_v<T> ? std::floor(dist(gen)) : dist(gen));
  return v;
}

template <class T>
double fold(reduce_op op, int ranks, std::size_t i, std::size_t n, std::uint32_t salt,
            std::size_t offset = 0) {
  double acc = 0;
  for (int r = 0; r < ranks; ++r) {
    const double x = static_cast<double>(rank_data<T>(r, n, salt)[offset + i]);
    acc = r == 0                 ? x
          : op == reduce_op::sum ? acc + x
          : op == reduce_op::max ? std::max(acc, x)
                                 : std::min(acc, x);
  }
  return acc;
}

// Every rank's buffer equals rank 0's, bit for bit.
template <class T>
bool same_everywhere(const std::vector<T>& v) {
  std::vector<T> zero(v);
  MPI_Bcast(zero.data(), static_cast<int>(zero.size() * sizeof(T)), MPI_BYTE, 0, MPI_COMM_WORLD);
  int same = v.empty() || std::memcmp(zero.data(), v.data(), v.size() * sizeof(T)) == 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

template <class T>
void check_allreduce(meld::mpi_comm& comm, bool async) {
  const int P = comm.size(), r = comm.rank();
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(7),
                        std::size_t(13), std::size_t(1009), std::size_t(30011)}) {
    for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
      std::vector<T> buf = rank_data<T>(r, n, 7);
      if (async)
        comm.allreduce_async(buf, op).wait();
      else
        comm.allreduce(buf, op);
      INFO("n " << n << " op " << meld::name_of(op));
      // Reference: every rank's data is known here; compare a spread of elements.
      std::vector<std::vector<T>> all;
      for (int q = 0; q < P; ++q) all.push_back(rank_data<T>(q, n, 7));
      for (std::size_t i = 0; i < n; i += 1 + n / 300) {
        double want = static_cast<double>(all[0][i]);
        for (int q = 1; q < P; ++q) {
          const double x = static_cast<double>(all[static_cast<std::size_t>(q)][i]);
          want = op == reduce_op::sum   ? want + x
                 : op == reduce_op::max ? std::max(want, x)
                                        : std::min(want, x);
        }
        if constexpr (std::is_integral_v<T>)
          REQUIRE(static_cast<double>(buf[i]) == want);
        else
          REQUIRE(static_cast<double>(buf[i]) == Approx(want).epsilon(1e-5).margin(1e-3));
      }
      REQUIRE(same_everywhere(buf));
    }
  }
}

}  // namespace

TEST_CASE("mpi_comm allreduce (ring and native) matches a serial reduction", "[mpi]") {
  meld::mpi_comm ring(MPI_COMM_WORLD, opts(20s, false, 256));  // small slices: many messages
  check_allreduce<float>(ring, false);
  check_allreduce<std::int32_t>(ring, true);
  check_allreduce<double>(ring, false);
  meld::mpi_comm native(MPI_COMM_WORLD, opts(20s, true));
  check_allreduce<std::int64_t>(native, false);
  check_allreduce<float>(native, true);
}

TEST_CASE("mpi_comm allreduce of a large buffer with default slices", "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts());
  const std::size_t n = 3'000'017;  // 12 MB: several 1 MiB slices per chunk
  std::vector<float> buf = rank_data<float>(comm.rank(), n, 3);
  comm.allreduce(buf);
  std::vector<std::vector<float>> all;
  for (int q = 0; q < comm.size(); ++q) all.push_back(rank_data<float>(q, n, 3));
  for (std::size_t i = 0; i < n; i += 4999) {
    double want = 0;
    for (const auto& a : all) want += a[i];
    REQUIRE(static_cast<double>(buf[i]) == Approx(want).epsilon(1e-5).margin(1e-3));
  }
  REQUIRE(same_everywhere(buf));
}

TEST_CASE("mpi_comm broadcast, reduce_scatter, allgather, barrier", "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts());
  const int P = comm.size(), r = comm.rank();
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(13), std::size_t(1009)}) {
    INFO("n " << n);
    for (int root = 0; root < P; ++root) {
      std::vector<double> b = rank_data<double>(r, n, 11);
      if (r % 2)
        comm.broadcast_async(b, root).wait();
      else
        comm.broadcast(b, root);
      REQUIRE(b == rank_data<double>(root, n, 11));
    }
    for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
      const auto in = rank_data<float>(r, n * static_cast<std::size_t>(P), 5);
      std::vector<float> out(n);
      comm.reduce_scatter(in, out, op);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(static_cast<double>(out[i]) ==
                Approx(fold<float>(op, P, i, n * static_cast<std::size_t>(P), 5,
                                   static_cast<std::size_t>(r) * n))
                    .epsilon(1e-5)
                    .margin(1e-3));
    }
    const auto in = rank_data<std::int64_t>(r, n, 9);
    std::vector<std::int64_t> out(n * static_cast<std::size_t>(P));
    comm.allgather_async(in, out).wait();
    for (int q = 0; q < P; ++q)
      REQUIRE(std::equal(out.begin() + static_cast<long>(static_cast<std::size_t>(q) * n),
                         out.begin() + static_cast<long>(static_cast<std::size_t>(q + 1) * n),
                         rank_data<std::int64_t>(q, n, 9).begin()));
    comm.barrier();
    comm.barrier_async().wait();
  }
  REQUIRE(comm.next_sequence() > 1);
}

TEST_CASE("data_parallel across processes: full-batch gradient, identical replicas, join",
          "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts());
  const int P = comm.size(), r = comm.rank();
  const std::vector<index_t> widths{6, 16, 8, 3};
  using model_t = toy::mlp<float>;
  // The global batch (the same on every rank): 37 rows, uneven shards.
  const auto x = meld::uniform<float>({37, 6}, -1.f, 1.f, 2);
  const auto y = meld::uniform<float>({37, 3}, -1.f, 1.f, 3);
  model_t ref(widths, 1), model(widths, 1 + static_cast<std::uint64_t>(r));  // rank 0's wins
  ref.zero_grad();
  meld::tensor<float> g;
  toy::mse{}(ref.forward(x), y, g);
  ref.backward(g);
  meld::data_parallel dp(model, comm, {.bucket_bytes = 300});
  dp.step(x, y, toy::mse{});
  const auto got = toy::gradients(model), want = toy::gradients(ref);
  for (std::size_t i = 0; i < got.size(); ++i)
    for (index_t e = 0; e < got[i].size(); ++e)
      REQUIRE(got[i].data()[e] == Approx(want[i].data()[e]).margin(1e-5));
  for (const auto& t : got) REQUIRE(same_everywhere(std::vector<float>(t.begin(), t.end())));
  // Uneven epochs: rank q has q + 1 batches of its own; the replicas end identical.
  for (int s = 0; s <= r; ++s) {
    dp.step_local(
        meld::uniform<float>({5 + r, 6}, -1.f, 1.f, 100 + static_cast<std::uint64_t>(10 * r + s)),
        meld::uniform<float>({5 + r, 3}, -1.f, 1.f, 200 + static_cast<std::uint64_t>(10 * r + s)),
        toy::mse{});
    toy::sgd(model, 0.1f);
  }
  dp.join([&] { toy::sgd(model, 0.1f); });
  for (const auto& t : toy::parameters(model))
    REQUIRE(same_everywhere(std::vector<float>(t.begin(), t.end())));
  (void)P;
}

TEST_CASE("dp_suite across processes: every rank equals one CPU worker", "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts());
  dp_suite::require_matches_one_worker(
      dp_suite::rank_mode<meld::cpu<>>(comm, {.bucket_bytes = 512}));
}

TEST_CASE("sharded optimizer across processes: the unsharded parameters, 1/k of the state",
          "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts());
  // MPI_Ireduce_scatter_block sums in MPI's order, meld's ring allreduce in its own: the same bits
  // at 2 ranks (a sum of two commutes), the same to rounding beyond.
  dp_suite::require_sharded_matches(dp_suite::sharded_rank_mode<meld::cpu<>>(comm, 512),
                                    comm.size(), comm.size() == 2);
}

TEST_CASE("mpi_comm debug mode: mismatched collectives throw on every rank", "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts(10s));
  std::vector<float> buf(comm.rank() == 1 ? 12 : 10);
  try {
    comm.allreduce(buf);
    FAIL("no mismatch reported");
  } catch (const meld::comm_error& e) {
    INFO(e.what());
    REQUIRE(e.why() == meld::comm_error::reason::mismatch);
    REQUIRE(std::string(e.what()).find("rank 0 called allreduce #1 (sum, float32 x 10); rank 1 "
                                       "called allreduce #1 (sum, float32 x 12)") !=
            std::string::npos);
  }
  REQUIRE(comm.failed());
  REQUIRE_THROWS_AS(comm.barrier(), meld::comm_error);
}

TEST_CASE("mpi_comm: a rank that stalls is named by the others within twice the timeout", "[mpi]") {
  const auto timeout = 1500ms;
  meld::mpi_comm comm(MPI_COMM_WORLD, opts(timeout));
  const int last = comm.size() - 1;
  std::vector<float> buf(5000, 1.f);
  comm.allreduce(buf);
  const auto t0 = clk::now();
  if (comm.rank() == last) std::this_thread::sleep_for(3 * timeout);
  try {
    comm.allreduce(buf);
    FAIL("the stall was not reported");
  } catch (const meld::comm_error& e) {
    const double s = std::chrono::duration<double>(clk::now() - t0).count();
    INFO(e.what());
    if (comm.rank() == last) {
      // It arrives long after: the others' abort notices are waiting for it.
      REQUIRE(e.why() == meld::comm_error::reason::aborted);
      REQUIRE(s < 3 * 1.5 + 1.0);
    } else {
      REQUIRE(s < 2 * 1.5);
    }
    REQUIRE(std::string(e.what()).find(meld::detail::cat("rank ", last, " never arrived")) !=
            std::string::npos);
    REQUIRE(std::string(e.what()).find("allreduce #2 (sum, float32 x 5000)") != std::string::npos);
  }
}

TEST_CASE("mpi_comm: a rank that fails aborts the others at once", "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts(30s));
  std::vector<double> buf(100, 1.0);
  const auto t0 = clk::now();
  if (comm.rank() == 1) {
    comm.allreduce(buf);
    comm.abort("it threw: out of data");
    REQUIRE_THROWS_AS(comm.allreduce(buf), meld::comm_error);
    return;
  }
  try {
    // Collectives in flight when the notice comes fail too (#1 may still be running here).
    comm.allreduce(buf);
    comm.allreduce(buf);
    FAIL("the abort was not reported");
  } catch (const meld::comm_error& e) {
    INFO(e.what());
    REQUIRE(e.why() == meld::comm_error::reason::aborted);
    REQUIRE(std::string(e.what()).find("rank 1 aborted: it threw: out of data") !=
            std::string::npos);
    REQUIRE(std::chrono::duration<double>(clk::now() - t0).count() < 5);
  }
}

TEST_CASE("mpi_comm: a failed allreduce returns only once no send still reads its buffer",
          "[mpi]") {
  // World ranks 0 and 1, on a communicator of their own (the others wait at the barrier). Rank 0
  // allreduces alone and times out while its ring's send of its first chunk (4 MB: a rendezvous
  // message) is pending. Rank 1 never calls the allreduce, but has a receive posted for that
  // send on the data communicator (tag 0: step 0, slice 0; one slice per chunk here), which it
  // serves only after rank 0 has failed: as a peer that was slow to see the abort would. Rank 0
  // reuses its buffer as soon as the collective returns; rank 1 must still receive the data the
  // collective was given, not what the caller wrote after it returned.
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world < 2 ? 0 : MPI_UNDEFINED, world, &pair);
  if (pair != MPI_COMM_NULL) {
    const auto timeout = 2000ms;  // (a failed collective waits up to half of it for its sends)
    auto o = opts(timeout);
    o.debug = false;  // (debug mode would wait for rank 1's description before any data moved)
    o.slice_bytes = std::size_t(64) << 20;
    meld::mpi_comm comm(pair, o);
    const std::size_t n = std::size_t(1) << 21, chunk = n / 2;
    if (comm.rank() == 0) {
      std::vector<float> buf(n);
      for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i % 1000);
      try {
        comm.allreduce(buf);
        FAIL("the allreduce without rank 1 did not fail");
      } catch (const meld::comm_error& e) {
        INFO(e.what());
        REQUIRE(e.why() == meld::comm_error::reason::timeout);
      }
      std::fill(buf.begin(), buf.end(), -1.f);  // what a caller may do once it has returned
    } else {
      std::vector<float> got(chunk, 0.f);
      MPI_Request r;
      MPI_Irecv(got.data(), static_cast<int>(chunk), MPI_FLOAT, 0, 0, comm.native(), &r);
      std::this_thread::sleep_for(timeout + 300ms);  // no MPI progress here meanwhile
      MPI_Wait(&r, MPI_STATUS_IGNORE);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < chunk; ++i) wrong += got[i] != static_cast<float>(i % 1000);
      REQUIRE(wrong == 0);
    }
    MPI_Comm_free(&pair);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("kv_store across processes: push aggregates, pull agrees", "[mpi]") {
  meld::mpi_comm comm(MPI_COMM_WORLD, opts());
  const int P = comm.size();
  meld::kv_store<double, meld::mpi_comm> store(
      comm, [](int, index_t, std::span<const double> g, std::span<double> w) {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.5 * g[i];
      });
  std::vector<double> w(1001, 3.0);
  store.init(1, w);
  std::vector<double> g(1001, static_cast<double>(comm.rank() + 1));
  store.push(1, g);
  store.pull(1, w);
  for (double x : w) REQUIRE(x == 3.0 - 0.5 * P * (P + 1) / 2);
  REQUIRE(same_everywhere(w));
}

static_assert(meld::communicator<meld::mpi_comm>);
