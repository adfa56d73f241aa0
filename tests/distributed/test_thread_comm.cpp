// thread_comm collectives against a serial reference: every collective, element type and
// operation, sizes 0, 1, odd, prime and many slices, 1..8 ranks; asynchronous forms; and every
// rank's result bit-identical to the others'.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <meld/distributed/thread_comm.hpp>
#include <meld/tensor/factories.hpp>

#include "catch.hpp"
#include "worker_assertions.hpp"

namespace {

using meld::reduce_op;

template <class T>
std::vector<T> rank_data(int rank, std::size_t n, std::uint32_t salt) {
  std::mt19937 gen(1000u * static_cast<std::uint32_t>(rank) + salt);
  std::uniform_real_distribution<double> dist(-100, 100);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(std::is_integral_v<T> ? std::floor(dist(gen)) : dist(gen));
  return v;
}

template <class T>
double fold(reduce_op op, const std::vector<std::vector<T>>& in, std::size_t i) {
  double acc = static_cast<double>(in[0][i]);
  for (std::size_t r = 1; r < in.size(); ++r) {
    const double x = static_cast<double>(in[r][i]);
    acc = op == reduce_op::sum   ? acc + x
          : op == reduce_op::max ? std::max(acc, x)
                                 : std::min(acc, x);
  }
  return acc;
}

template <class T>
void require_close(double want, T got, std::size_t i) {
  INFO("element " << i);
  if constexpr (std::is_integral_v<T>)
    REQUIRE(static_cast<double>(got) == want);
  else
    REQUIRE(static_cast<double>(got) == Approx(want).epsilon(1e-5).margin(1e-3));
}

meld::comm_options test_options(std::size_t slice_bytes = 256) {
  meld::comm_options o;
  o.timeout = std::chrono::seconds(20);
  o.debug = true;
  o.slice_bytes = slice_bytes;  // small slices: many pipeline steps even for small buffers
  return o;
}

const std::size_t sizes[] = {0, 1, 2, 7, 13, 101, 1009, 30011};

template <class T>
void check_allreduce(int k, bool async) {
  meld::thread_group group(k, test_options());
  for (std::size_t n : sizes) {
    for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
      std::vector<std::vector<T>> in, out;
      for (int r = 0; r < k; ++r) in.push_back(rank_data<T>(r, n, 7));
      out = in;
      group.run([&](meld::thread_comm& c) {
        auto& buf = out[static_cast<std::size_t>(c.rank())];
        if (async) {
          auto req = c.allreduce_async(buf, op);
          req.wait();
          WORKER_REQUIRE(req.ready());
        } else {
          c.allreduce(buf, op);
        }
      });
      INFO("ranks " << k << " n " << n << " op " << meld::name_of(op));
      for (std::size_t i = 0; i < n; ++i) require_close(fold(op, in, i), out[0][i], i);
      for (int r = 1; r < k && n > 0; ++r)
        REQUIRE(std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(),
                            n * sizeof(T)) == 0);
    }
  }
}

}  // namespace

TEST_CASE("thread_comm allreduce matches a serial reduction for 1..8 ranks", "[dist]") {
  for (int k = 1; k <= 8; ++k) {
    check_allreduce<float>(k, false);
    check_allreduce<std::int32_t>(k, false);
  }
  for (int k : {1, 3, 4}) {
    check_allreduce<double>(k, true);
    check_allreduce<std::int64_t>(k, true);
  }
}

TEST_CASE("thread_comm allreduce and reduce_scatter sum each element in one order", "[dist]") {
  // Chunk c of ceil(n / k) elements is summed around the ring from rank c + 1 to rank c, in
  // float: data_parallel's sharded optimizer relies on both collectives giving the same bits.
  for (int k = 2; k <= 5; ++k)
    for (std::size_t n : {std::size_t(7), std::size_t(13), std::size_t(1009)}) {
      INFO("ranks " << k << " n " << n);
      const auto K = static_cast<std::size_t>(k);
      const std::size_t m = (n + K - 1) / K;
      std::vector<std::vector<float>> in, all, padded, part(static_cast<std::size_t>(k));
      for (int r = 0; r < k; ++r) {
        in.push_back(rank_data<float>(r, n, 11));
        padded.push_back(in.back());
        padded.back().resize(m * K, 0.f);
        part[static_cast<std::size_t>(r)].resize(m);
      }
      all = in;
      meld::thread_group group(k, test_options(64));
      group.run([&](meld::thread_comm& c) {
        const auto r = static_cast<std::size_t>(c.rank());
        c.allreduce(all[r]);
        c.reduce_scatter(padded[r], part[r]);
      });
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t c = i / m;
        float want = in[(c + 1) % K][i];
        for (int s = 2; s <= k; ++s) want = in[(c + static_cast<std::size_t>(s)) % K][i] + want;
        INFO("element " << i);
        REQUIRE(std::memcmp(&all[0][i], &want, sizeof(float)) == 0);
        REQUIRE(std::memcmp(&part[c][i - c * m], &want, sizeof(float)) == 0);
      }
    }
}

TEST_CASE("thread_comm allreduce with default slices on a large buffer", "[dist]") {
  // 2.5 M floats: 10 MB, many 64 KiB slices per chunk.
  const std::size_t n = 2'500'007;
  for (int k : {2, 3}) {
    meld::thread_group group(k, [] {
      meld::comm_options o;
      o.debug = true;
      o.timeout = std::chrono::seconds(30);
      return o;
    }());
    std::vector<std::vector<float>> in, out;
    for (int r = 0; r < k; ++r) in.push_back(rank_data<float>(r, n, 3));
    out = in;
    group.run([&](meld::thread_comm& c) { c.allreduce(out[static_cast<std::size_t>(c.rank())]); });
    for (std::size_t i = 0; i < n; i += 997)
      require_close(fold(reduce_op::sum, in, i), out[0][i], i);
    require_close(fold(reduce_op::sum, in, n - 1), out[0][n - 1], n - 1);
    for (int r = 1; r < k; ++r)
      REQUIRE(std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(), n * 4) == 0);
  }
}

TEST_CASE("thread_comm broadcast, reduce_scatter, allgather, barrier", "[dist]") {
  for (int k = 1; k <= 8; ++k) {
    meld::thread_group group(k, test_options());
    for (std::size_t n : sizes) {
      INFO("ranks " << k << " n " << n);
      // broadcast from every root
      for (int root = 0; root < k; ++root) {
        std::vector<std::vector<double>> bufs;
        for (int r = 0; r < k; ++r) bufs.push_back(rank_data<double>(r, n, 11));
        const std::vector<double> want = bufs[static_cast<std::size_t>(root)];
        group.run([&](meld::thread_comm& c) {
          auto& b = bufs[static_cast<std::size_t>(c.rank())];
          if (c.rank() % 2)
            c.broadcast_async(b, root).wait();
          else
            c.broadcast(b, root);
        });
        for (int r = 0; r < k; ++r) REQUIRE(bufs[static_cast<std::size_t>(r)] == want);
      }
      // reduce_scatter: n elements per rank
      for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
        std::vector<std::vector<float>> in, out(static_cast<std::size_t>(k), std::vector<float>(n));
        for (int r = 0; r < k; ++r)
          in.push_back(rank_data<float>(r, n * static_cast<std::size_t>(k), 5));
        group.run([&](meld::thread_comm& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          c.reduce_scatter(in[r], out[r], op);
        });
        for (int r = 0; r < k; ++r)
          for (std::size_t i = 0; i < n; ++i)
            require_close(fold(op, in, static_cast<std::size_t>(r) * n + i),
                          out[static_cast<std::size_t>(r)][i], i);
      }
      // allgather
      std::vector<std::vector<std::int64_t>> in,
          out(static_cast<std::size_t>(k),
              std::vector<std::int64_t>(n * static_cast<std::size_t>(k)));
      for (int r = 0; r < k; ++r) in.push_back(rank_data<std::int64_t>(r, n, 9));
      group.run([&](meld::thread_comm& c) {
        const auto r = static_cast<std::size_t>(c.rank());
        c.allgather_async(in[r], out[r]).wait();
        c.barrier();
        c.barrier_async().wait();
      });
      for (int r = 0; r < k; ++r)
        for (int q = 0; q < k; ++q)
          REQUIRE(std::equal(in[static_cast<std::size_t>(q)].begin(),
                             in[static_cast<std::size_t>(q)].end(),
                             out[static_cast<std::size_t>(r)].begin() +
                                 static_cast<long>(static_cast<std::size_t>(q) * n)));
    }
  }
}

TEST_CASE("thread_comm: many asynchronous collectives in flight complete in order", "[dist]") {
  const int k = 4;
  meld::thread_group group(k, test_options(4096));
  const std::size_t n = 5000, count = 12;
  std::vector<std::vector<std::vector<float>>> bufs(static_cast<std::size_t>(k));
  for (int r = 0; r < k; ++r)
    for (std::size_t i = 0; i < count; ++i)
      bufs[static_cast<std::size_t>(r)].push_back(
          rank_data<float>(r, n, static_cast<std::uint32_t>(i)));
  auto in = bufs;
  group.run([&](meld::thread_comm& c) {
    std::vector<meld::comm_request> reqs;
    for (auto& b : bufs[static_cast<std::size_t>(c.rank())]) reqs.push_back(c.allreduce_async(b));
    c.barrier();  // a synchronous collective queues behind the asynchronous ones
    for (auto& q : reqs) WORKER_REQUIRE(q.ready());
    WORKER_REQUIRE(c.next_sequence() == count + 2);
  });
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<std::vector<float>> per_rank;
    for (int r = 0; r < k; ++r) per_rank.push_back(in[static_cast<std::size_t>(r)][i]);
    for (std::size_t e = 0; e < n; e += 37)
      require_close(fold(reduce_op::sum, per_rank, e), bufs[0][i][e], e);
  }
}

TEST_CASE("thread_comm accepts tensors and contiguous views, and rejects strided ones", "[dist]") {
  meld::thread_group group(3, test_options());
  std::vector<meld::tensor<float>> t;
  for (int r = 0; r < 3; ++r) t.push_back(meld::full<float>({4, 5}, static_cast<float>(r + 1)));
  group.run([&](meld::thread_comm& c) {
    auto& mine = t[static_cast<std::size_t>(c.rank())];
    c.allreduce(mine);
    c.allreduce(mine.slice(meld::range(1, 3)), reduce_op::max);  // rows 1, 2: a contiguous view
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(t[static_cast<std::size_t>(r)](0, 0) == 6.f);
    REQUIRE(t[static_cast<std::size_t>(r)](2, 4) == 6.f);
  }
  meld::tensor<float> x({4, 4});
  meld::thread_group one(1);
  REQUIRE_THROWS_AS(one.comm(0).allreduce(x.transpose()), meld::shape_error);
  std::vector<float> in(6), out(4);
  REQUIRE_THROWS_AS(one.comm(0).allgather(in, out), meld::shape_error);
  REQUIRE_THROWS_AS(one.comm(0).broadcast(out, 1), std::invalid_argument);
  REQUIRE_THROWS_AS(meld::thread_group(0), std::invalid_argument);
}

static_assert(meld::communicator<meld::thread_comm>);
