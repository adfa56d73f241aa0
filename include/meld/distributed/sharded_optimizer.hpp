// sharded_optimizer<Optimizer, DP>: ZeRO stage 1 over a data_parallel whose gradients are sharded
// (data_parallel_options::shard_optimizer). Each local worker keeps an Optimizer over its
// parameter_shard only, so the optimizer state per worker (SGD's momentum, Adam's two moments) is
// 1/k of the unsharded optimizer's; step() updates every shard, on the workers' threads at once in
// threads mode, and allgathers the parameters into every replica.
//
//   meld::data_parallel dp(model, group, {.shard_optimizer = true});
//   auto opt = meld::shard_optimizer<meld::optim::adam>(dp, {.lr = 1e-3});
//   for (auto& [x, y] : batches) { dp.step(x, y, meld::nn::cross_entropy); opt.step(); }
//
// The parameters after each step are those of Optimizer over the whole model, bit for bit for
// elementwise optimizers (sgd, adam) wherever the communicator's reduce-scatter sums each element
// in the order of its allreduce: thread_comm at any number of ranks, every communicator at 2 (a
// sum of two commutes); to rounding otherwise. Threads mode copies no parameters between replicas:
// where every replica is on rank 0's device they share its parameters' elements, and each worker
// writes its shard of them in place (no allgather); elsewhere the allgather writes every replica.
// Parameters changed outside the optimizer (a checkpoint loaded on rank 0) reach the others
// through dp.broadcast_parameters(). It is an optim::optimizer whose visit_state visits every local
// shard's state ("adam.m.shard<r>", ...): a checkpoint holds this process's shards, and resumes
// with as many workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../nn/optim/optimizer.hpp"
#include "data_parallel.hpp"
#include "parameter_shard.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// An optimizer of kind Optimizer (optim::sgd, optim::adam) over the shards of data_parallel DP.
template <template <class> class Optimizer, class DP>
class sharded_optimizer {
 public:
  using model_type = typename DP::model_type;                                 ///< the model trained
  using value_type = typename model_type::value_type;                         ///< the element type
  using tensor_type = tensor<value_type, typename model_type::backend_type>;  ///< its tensors
  /// A worker's shard of the parameters and averaged gradients.
  using shard_type = parameter_shard<value_type, typename model_type::backend_type>;
  using optimizer_type = Optimizer<shard_type>;  ///< the optimizer of one shard
  /// Optimizer's options (optim::sgd_options, optim::adam_options).
  using options_type = std::remove_cvref_t<decltype(std::declval<optimizer_type&>().options())>;

  /// One Optimizer(shard, options) per local worker, made on the worker's device. Throws
  /// std::logic_error when dp's gradients are not sharded, std::invalid_argument for bad options.
  sharded_optimizer(DP& dp, const options_type& options) : dp_(&dp) {
    if (!dp.sharded())
      throw std::logic_error(
          "meld::sharded_optimizer: the data_parallel does not shard its gradients (construct "
          "it with options.shard_optimizer = true)");
    shards_.resize(static_cast<std::size_t>(dp.local_workers()));
    // On each worker's thread and device, where its optimizer state is to live.
    dp.guarded([&](auto& w) { shards_[index(w)].emplace(*w.shard, options); });
  }

  /// Collective (every rank calls it after each synchronized step): updates every local shard
  /// from its averaged gradients, then writes it into the parameters every replica shares, or
  /// gathers the parameters into every replica.
  void step() {
    // (The parameter tensors may have been replaced; replicas that share them share them now,
    // before the first step too, so that every shard lands where all replicas read.)
    for (auto& w : dp_->workers_) w->read(*w->model, dp_->sizes_);
    dp_->guarded([&](auto& w) {
      dp_->take_rank_0_parameters(w);
      w.buckets->pack_parameter_shard(w.params);
      shards_[index(w)]->step();
      // Shared elements: each worker writes its own part of them (guarded returns when all have).
      if (dp_->takes_parameters())
        w.buckets->write_parameter_shard(w.params);
      else
        w.buckets->gather_parameters(*w.comm, w.params);
    });
  }
  /// Sets the gradients of every local replica to 0.
  void zero_grad() { dp_->zero_grad(); }

  /// The learning rate.
  double lr() const { return shards_[0]->lr(); }
  /// A new learning rate for every shard (schedules).
  void set_lr(double lr) {
    shards_[0]->set_lr(lr);  // refused here, before any shard changed, if invalid
    for (auto& s : shards_) s->set_lr(lr);
  }
  /// The number of steps taken.
  std::int64_t steps() const { return shards_[0]->steps(); }
  /// The optimizer of local worker i's shard.
  optimizer_type& shard(int i) { return *shards_.at(static_cast<std::size_t>(i)); }

  /// Every local shard's state, named as Optimizer names it for a parameter "shard<r>" (r the
  /// worker's rank; "adam.m.shard1"), and each shard's step count: the first local shard's as
  /// Optimizer names it ("adam.steps"), the others' with ".shard<i>" appended, i the local worker.
  template <class F>
  void visit_state(F&& f) {
    for (std::size_t i = 0; i < shards_.size(); ++i)
      shards_[i]->visit_state([&](std::string_view name, auto& x) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, std::int64_t>) {
          if (i > 0) {
            const std::string unique = std::string(name) + ".shard" + std::to_string(i);
            f(std::string_view(unique), x);
            return;
          }
        }
        f(name, x);
      });
  }

 private:
  template <class Worker>
  std::size_t index(const Worker& w) const {
    return static_cast<std::size_t>(dp_->local_index(w));
  }

  DP* dp_;
  std::vector<std::optional<optimizer_type>> shards_;
};

/// A sharded_optimizer<Optimizer, DP> over dp: `meld::shard_optimizer<meld::optim::adam>(dp,
/// {.lr = 1e-3})`.
template <template <class> class Optimizer, class DP>
sharded_optimizer<Optimizer, DP> shard_optimizer(
    DP& dp, const typename sharded_optimizer<Optimizer, DP>::options_type& options) {
  return sharded_optimizer<Optimizer, DP>(dp, options);
}

/// @}

}  // namespace meld
