// kv_store on thread_comm: pushes are aggregated and updated shard by shard, pulls return the
// same value everywhere, each server sees only its shard.
#include <vector>

#include <meld/distributed/kv_store.hpp>
#include <meld/distributed/thread_comm.hpp>

#include "catch.hpp"
#include "worker_assertions.hpp"

TEST_CASE("kv_store: sharded push / pull with a user-defined update rule (SGD with momentum)",
          "[dist]") {
  for (int k : {1, 2, 3, 5}) {
    const std::size_t m = 23;  // not a multiple of k: uneven shards, padding
    meld::comm_options o;
    o.debug = true;
    o.timeout = std::chrono::seconds(20);
    meld::thread_group group(k, o);
    std::vector<std::vector<float>> pulled(static_cast<std::size_t>(k));
    std::vector<std::size_t> served(static_cast<std::size_t>(k));
    group.run([&](meld::thread_comm& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      std::vector<float> momentum;  // this server's state, sized by its shard
      meld::kv_store<float, meld::thread_comm> store(
          comm, [&](int key, meld::index_t offset, std::span<const float> g, std::span<float> w) {
            WORKER_REQUIRE(key == 7);
            WORKER_REQUIRE(offset == static_cast<meld::index_t>((m + k - 1) / k * r));
            momentum.resize(w.size());
            for (std::size_t i = 0; i < w.size(); ++i) {
              momentum[i] = 0.5f * momentum[i] + g[i];
              w[i] -= 0.1f * momentum[i];
            }
          });
      std::vector<float> w(m);
      for (std::size_t i = 0; i < m; ++i)
        w[i] = r == 0 ? static_cast<float>(i) : -1.f;  // rank 0's wins
      store.init(7, w);
      for (int step = 0; step < 2; ++step) {
        std::vector<float> g(m);
        for (std::size_t i = 0; i < m; ++i)
          g[i] = static_cast<float>((r + 1) * (i + 1) * (step + 1));
        store.push(7, g);
      }
      store.pull(7, w);
      pulled[r] = w;
      served[r] = store.local_shard(7).size();
      WORKER_REQUIRE_THROWS_AS(store.pull(8, w), std::invalid_argument);
      std::vector<float> wrong(m + 1);
      WORKER_REQUIRE_THROWS_AS(store.push(7, wrong), meld::shape_error);
    });
    // Reference: g_total(step) = sum_r (r + 1) (i + 1) (step + 1); momentum SGD for two steps.
    const float ranks_sum = static_cast<float>(k * (k + 1) / 2);
    std::size_t total_served = 0;
    for (int r = 0; r < k; ++r) total_served += served[static_cast<std::size_t>(r)];
    REQUIRE(total_served == m);
    for (std::size_t i = 0; i < m; ++i) {
      const float g1 = ranks_sum * static_cast<float>(i + 1), g2 = 2 * g1;
      const float v1 = g1, v2 = 0.5f * v1 + g2;
      const float want = static_cast<float>(i) - 0.1f * v1 - 0.1f * v2;
      for (int r = 0; r < k; ++r)
        REQUIRE(pulled[static_cast<std::size_t>(r)][i] == Approx(want).epsilon(1e-5));
    }
  }
}
