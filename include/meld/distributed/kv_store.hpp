// kv_store: a parameter server sharded over the ranks of a communicator.
//
//   meld::kv_store<float, meld::mpi_comm> store(comm, [&](int key, meld::index_t offset,
//                                                         std::span<const float> grad,
//                                                         std::span<float> value) {
//     for (std::size_t i = 0; i < value.size(); ++i) value[i] -= lr * grad[i];   // the update rule
//   });
//   store.init(0, weights);      // rank 0's values
//   store.push(0, grads);        // every rank pushes; the sum is aggregated and applied
//   store.pull(0, weights);      // every rank gets the updated value
//
// Every rank is a server for one shard of each key's value (rank r owns elements
// [m r / n, m (r + 1) / n) of a value of m elements): push is a reduce-scatter, so that each
// server aggregates only its O(m / n) share of the n workers' pushes and runs the update rule on
// it, and pull is an allgather of the updated shards. That is the sharded parameter server of
// d2l.ai's "Parameter Servers" section, built on the communicator's collectives: the aggregation
// and update cost O(m / n) per server instead of O(m) on one, and the bytes each rank moves are
// those of an allreduce.
//
// init, push and pull are collectives: every rank calls them with the same keys in the same
// order (debug mode checks that). The update rule runs on the calling thread of each server,
// for its shard, with the element offset of the shard in the value; state it keeps (momentum,
// Adam's moments) lives with it, sized by the shard it sees.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "communicator.hpp"
#include "detail/reduce_kernels.hpp"

namespace meld {

/// \addtogroup param_server
/// @{

/// A parameter server sharded over the ranks of a communicator: each key's value is split into
/// comm.size() shards, rank r keeping shard r. push() aggregates the ranks' pushes (a
/// reduce-scatter) and applies the update rule to each shard where it lives; pull() gathers the
/// value (an allgather). Every rank calls init, push and pull for the same keys in the same order
/// (they are collectives).
template <class T, communicator Comm>
class kv_store {
 public:
  /// update(key, offset, aggregated gradient shard, stored value shard)
  using update_rule =
      std::function<void(int key, index_t offset, std::span<const T> grad, std::span<T> value)>;

  /// The default rule stores the sum of the pushes (value = aggregated push).
  explicit kv_store(Comm& comm, update_rule rule = {}) : comm_(comm), rule_(std::move(rule)) {}

  /// The number of servers (ranks) the values are sharded over.
  int servers() const { return comm_.size(); }

  /// Creates `key` with rank 0's value (collective).
  void init(int key, std::span<const T> value) {
    if (entries_.count(key))
      throw std::invalid_argument(detail::cat("kv_store::init: key ", key, " exists"));
    entry e;
    e.size = static_cast<index_t>(value.size());
    e.block = (e.size + servers() - 1) / servers();
    e.staging.assign(static_cast<std::size_t>(e.block * servers()), T(0));
    std::copy(value.begin(), value.end(), e.staging.begin());
    comm_.broadcast(std::span<T>(e.staging), 0);
    const index_t lo = e.block * comm_.rank();
    e.shard.assign(e.staging.begin() + lo, e.staging.begin() + lo + e.block);
    e.grad.assign(static_cast<std::size_t>(e.block), T(0));
    entries_.emplace(key, std::move(e));
  }

  /// Pushes this rank's contribution to `key` (collective): the server of each shard sums the
  /// contributions of every rank and applies the update rule to its shard.
  void push(int key, std::span<const T> value) {
    entry& e = find(key, "push", value.size());
    std::copy(value.begin(), value.end(), e.staging.begin());
    std::fill(e.staging.begin() + e.size, e.staging.end(), T(0));
    comm_.reduce_scatter(std::span<const T>(e.staging), std::span<T>(e.grad), reduce_op::sum);
    const index_t lo = e.block * comm_.rank();
    const index_t n = std::max<index_t>(0, std::min(e.block, e.size - lo));  // without the padding
    const std::span<const T> grad(e.grad.data(), static_cast<std::size_t>(n));
    const std::span<T> shard(e.shard.data(), static_cast<std::size_t>(n));
    if (rule_)
      rule_(key, lo, grad, shard);
    else
      std::copy(grad.begin(), grad.end(), shard.begin());
  }

  /// Fetches the current value of `key` (collective).
  void pull(int key, std::span<T> out) {
    entry& e = find(key, "pull", out.size());
    comm_.allgather(std::span<const T>(e.shard), std::span<T>(e.staging));
    std::copy(e.staging.begin(), e.staging.begin() + e.size, out.begin());
  }

  /// The shard of `key` this rank serves, and where it starts.
  std::span<const T> local_shard(int key) const {
    const entry& e = entries_.at(key);
    const index_t lo = e.block * comm_.rank();
    return {e.shard.data(),
            static_cast<std::size_t>(std::max<index_t>(0, std::min(e.block, e.size - lo)))};
  }

 private:
  struct entry {
    index_t size = 0, block = 0;
    std::vector<T> staging;  // block * servers: padded pushes and pulls
    std::vector<T> shard;    // this server's part of the value
    std::vector<T> grad;     // this server's part of the aggregated push
  };

  entry& find(int key, const char* what, std::size_t n) {
    auto it = entries_.find(key);
    if (it == entries_.end())
      throw std::invalid_argument(detail::cat("kv_store::", what, ": unknown key ", key));
    if (static_cast<index_t>(n) != it->second.size)
      throw shape_error(detail::cat("kv_store::", what, ": key ", key, " holds ", it->second.size,
                                    " elements, the buffer has ", n));
    return it->second;
  }

  Comm& comm_;
  update_rule rule_;
  std::map<int, entry> entries_;
};

/// @}

}  // namespace meld
