// The bucket engine of one data_parallel worker: it packs parameter gradients into the contiguous
// buckets of a bucket_plan (see buckets.hpp for the layout), starts each bucket's allreduce as
// soon as all of its gradients are final, strictly in bucket order (so that every rank issues the
// same collectives in the same order, whatever order its gradients become ready in), and unpacks
// the reduced sums into the gradients. At construction it also sends rank 0's parameters to every
// rank through the same buckets.
//
// A few more elements (the step's loss sums) ride at the end of the last bucket: one collective
// fewer a step. A bucket started during backward is an asynchronous allreduce that overlaps the
// rest of backward; on a host communicator the last bucket, and any started after backward, run
// on the calling thread: nothing is left to overlap, and with as many workers as cores a
// progress thread waited for a core (perf sched, 2 vCPUs, 2 workers: 1.3 ms on average per
// wake-up; the example's MLP scaled 1.45x from 1 to 2 workers, 1.87x without the hand-off).
//
// Sharded (data_parallel's shard_optimizer, ZeRO stage 1): each bucket of S elements is padded to
// k m (m = ceil(S / k), k ranks; the last bucket's S counts the tail) and reduce-scattered instead
// of allreduced, so that rank r gets the sums of elements [r m, (r + 1) m) of every bucket, one
// after the other, in its gradient shard; the loss sums travel in a small allreduce of their own.
// The optimizer updates the matching parameter shard, and gather_parameters allgathers the shards
// back into every rank's parameters through the same buffers (or, where the ranks' replicas share
// their parameters' elements, write_parameter_shard writes each rank's part). A communicator
// whose allreduce sums each element in the order its reduce-scatter does (thread_comm at any k,
// any at k = 2) gives the unsharded path's bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "../../tensor/slice.hpp"
#include "../../tensor/tensor.hpp"
#include "../buckets.hpp"
#include "../buffer.hpp"
#include "../communicator.hpp"

namespace meld::detail::distributed {

// A parameter and its gradient, as the model's visit_parameters hands them out.
template <class Tensor>
struct param_ref {
  Tensor* param;
  Tensor* grad;
};

// The bucket layout of a model: a pure function of its parameter sizes, the element size and the
// cap, the same on every rank.
struct bucket_plan {
  bucket_plan() = default;
  bucket_plan(std::span<const index_t> sizes, std::size_t elem_bytes, std::size_t cap_bytes)
      : buckets(make_buckets(sizes, elem_bytes, cap_bytes)), bucket_of(sizes.size(), 0) {
    for (std::size_t b = 0; b < buckets.size(); ++b)
      for (int p : buckets[b].params) bucket_of[static_cast<std::size_t>(p)] = static_cast<int>(b);
  }

  std::vector<gradient_bucket> buckets;
  std::vector<int> bucket_of;  // parameter index (visit order) -> bucket
};

template <class T, class B, class Comm>
class bucket_engine {
 public:
  using tensor_type = tensor<T, B>;
  using params_view = std::span<const param_ref<tensor_type>>;

  // plan: shared by the workers of a data_parallel, which outlives them. tail: the number of
  // elements that ride at the end of the last bucket (tail()); with no bucket, they get one of
  // their own.
  // Sharded: `ranks` > 0 is the number of ranks the buckets are reduce-scattered over, and
  // `rank` this one's place among them.
  bucket_engine(const bucket_plan& plan, index_t tail, int ranks = 0, int rank = 0)
      : plan_(&plan),
        requests_(std::max<std::size_t>(plan.buckets.size(), 1)),
        ready_(plan.bucket_of.size(), 0),
        ready_count_(plan.buckets.size(), 0),
        packed_(plan.buckets.size(), 1),
        tail_(tail),
        ranks_(std::max(ranks, 1)),
        rank_(rank),
        sharded_(ranks > 0) {
    if (sharded_) scatter_requests_.resize(requests_.size());
    index_t shard = 0;
    for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
      const gradient_bucket& bk = plan.buckets[b];
      // The last bucket's chunks are those its allreduce has unsharded, with the tail riding
      // along: each element is summed in the same order.
      const index_t with_tail = bk.size + (b + 1 == plan.buckets.size() ? tail : 0);
      const index_t m = (with_tail + ranks_ - 1) / ranks_;
      chunk_.push_back(sharded_ ? m : bk.size);
      shard_offset_.push_back(shard);
      shard += m;
      data_.emplace_back(shape_t{sharded_ ? m * ranks_ : bk.size});
    }
    if (sharded_) {
      param_shard_ = tensor_type(shape_t{shard});
      grad_shard_ = tensor_type(shape_t{shard});
      tail_data_ = tensor_type(shape_t{tail});
      return;
    }
    if (data_.empty()) data_.emplace_back(shape_t{0});
    data_.back() = tensor_type(shape_t{data_.back().size() + tail});
  }

  // The tail: written before the last bucket starts (it is reduced with it, or, sharded, in
  // finish()), read after wait().
  tensor_view<T, B> tail() {
    if (sharded_) return tail_data_.slice(range(0, tail_));
    const index_t end = data_.back().size();
    return data_.back().slice(range(end - tail_, end));
  }

  // Sharded: this rank's part of the parameters and of the averaged gradients (after
  // unpack_mean), elements [r m, (r + 1) m) of each bucket, one bucket after the other.
  tensor_type& parameter_shard() { return param_shard_; }
  tensor_type& gradient_shard() { return grad_shard_; }

  // Sharded: the parameter shard = this rank's elements of params (padding 0).
  void pack_parameter_shard(params_view params) {
    visit_shard(params, [&](tensor_type& p, index_t a, index_t e, index_t at) {
      param_shard_.slice(range(at, at + e - a)) = p.flatten().slice(range(a, e));
    });
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const index_t m = chunk_[b], lo = rank_ * m, hi = lo + m;
      if (std::max(lo, buckets[b].size) < hi)  // the padding past the bucket's end
        param_shard_.slice(range(shard_offset_[b] + std::max(lo, buckets[b].size) - lo,
                                 shard_offset_[b] + m)) = T(0);
    }
  }

  // Sharded, where every rank's replica shares the same parameter elements (threads on one
  // device): this rank's elements of them = its parameter shard. Each rank writes its own part,
  // so the parameters need no allgather.
  void write_parameter_shard(params_view params) {
    visit_shard(params, [&](tensor_type& p, index_t a, index_t e, index_t at) {
      p.flatten().slice(range(a, e)) = param_shard_.slice(range(at, at + e - a));
    });
  }

  // Sharded, collective: every rank's parameters = the ranks' parameter shards, allgathered.
  void gather_parameters(Comm& comm, params_view params) {
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      trace_collective_tag tag({"bucket", static_cast<std::int64_t>(b)});
      comm.allgather(param_shard_.slice(range(shard_offset_[b], shard_offset_[b] + chunk_[b])),
                     data_[b]);
      unpack(params, b, /*grads=*/false);
    }
  }

  // Rank 0's parameters go to every rank (collective): packed, broadcast, unpacked.
  void broadcast_parameters(Comm& comm, params_view params) {
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      pack(params, b, /*grads=*/false);
      comm.broadcast(data_[b].slice(range(0, buckets[b].size)), 0);
      unpack(params, b, /*grads=*/false);
    }
  }

  // Before a synchronized step: no gradient is ready, no bucket started.
  void start() {
    std::fill(ready_.begin(), ready_.end(), 0);
    std::fill(ready_count_.begin(), ready_count_.end(), 0);
    next_ = 0;
    launched_during_backward_ = 0;
  }

  // Gradient p is final: starts every bucket, in order, whose gradients are all final. A bucket
  // started with during_backward set counts as overlapped with backward.
  void mark_ready(Comm& comm, params_view params, int p, bool during_backward) {
    const auto& buckets = plan_->buckets;
    if (ready_[static_cast<std::size_t>(p)]) return;
    ready_[static_cast<std::size_t>(p)] = 1;
    ++ready_count_[static_cast<std::size_t>(plan_->bucket_of[static_cast<std::size_t>(p)])];
    // Buckets start strictly in order, so every rank issues the same collectives in the same
    // order whatever order its gradients become ready in.
    while (next_ < buckets.size() && ready_count_[next_] == buckets[next_].params.size()) {
      // The last bucket is complete only when backward has (almost) nothing left to do: a host
      // communicator reduces it on this thread. A device communicator's collectives are enqueued
      // on its stream, never waited for here.
      const bool last = next_ + 1 == buckets.size();
      launch(comm, params, next_++,
             Comm::memory_kind != comm_memory::host || (during_backward && !last));
      if (during_backward) ++launched_during_backward_;
    }
  }

  // Reduces the tail alone where it has no bucket to ride with: sharded, or where the model has
  // no parameters (call after marking them all).
  void finish(Comm& comm) {
    if ((sharded_ || plan_->buckets.empty()) && tail_ > 0 && comm.size() > 1)
      comm.allreduce(sharded_ ? tail_data_ : data_.back(), reduce_op::sum);
  }

  // Waits for every bucket's allreduce (call after every gradient was marked ready).
  void wait() {
    for (auto& r : requests_)
      if (r) r->wait();
    for (auto& r : scatter_requests_)
      if (r) r->wait();
  }

  // Every gradient = its bucket's reduced sum / total (0 when total is 0; a division by 1 is
  // skipped). Sharded: the gradient shard is, and the model's gradients keep this rank's own sums.
  void unpack_mean(params_view params, double total) {
    if (sharded_) {
      if (total <= 0)
        grad_shard_ = T(0);
      else if (total != 1)
        grad_shard_ = grad_shard_ / static_cast<T>(total);
      return;
    }
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const gradient_bucket& bk = buckets[b];
      for (std::size_t i = 0; i < bk.params.size(); ++i) {
        tensor_type& g = *params[static_cast<std::size_t>(bk.params[i])].grad;
        const index_t size = g.size();
        if (size == 0) continue;
        if (total <= 0)
          g = T(0);
        else if (packed_[b])
          g.flatten() =
              data_[b].slice(range(bk.offsets[i], bk.offsets[i] + size)) / static_cast<T>(total);
        else if (total != 1)  // a rank alone: the gradient is its own sum
          g = g / static_cast<T>(total);
      }
    }
  }

  int launched_during_backward() const { return launched_during_backward_; }

 private:
  using request_type =
      decltype(std::declval<Comm&>().allreduce_async(std::declval<tensor_type&>(), reduce_op::sum));
  // (Another type where the communicator stages device tensors through the host.)
  using scatter_request_type = decltype(std::declval<Comm&>().reduce_scatter_async(
      std::declval<tensor_type&>(), std::declval<tensor_view<T, B>&>(), reduce_op::sum));

  void launch(Comm& comm, params_view params, std::size_t b, bool async) {
    requests_[b].reset();
    if (sharded_) scatter_requests_[b].reset();
    // A rank alone has nothing to add: its gradients stay where they are (no copy in or out),
    // unless they go to its gradient shard.
    packed_[b] = comm.size() > 1 || sharded_;
    if (!packed_[b]) return;
    // Traced: the packing and the launch (or, not async, the whole allreduce) on this thread; the
    // collective itself is traced where it runs, with the bucket's number.
    const auto bucket = static_cast<std::int64_t>(b);
    trace_scope traced("bucket", "dp", {"bucket", bucket}, {"elements", data_[b].size()},
                       {"async", async});
    pack(params, b, /*grads=*/true);
    trace_collective_tag tag({"bucket", bucket});
    if (sharded_) {
      const index_t size = plan_->buckets[b].size, padded = data_[b].size();
      if (size < padded) data_[b].slice(range(size, padded)) = T(0);  // allgather wrote there
      auto shard = grad_shard_.slice(range(shard_offset_[b], shard_offset_[b] + chunk_[b]));
      if (async)
        scatter_requests_[b] = comm.reduce_scatter_async(data_[b], shard, reduce_op::sum);
      else
        comm.reduce_scatter(data_[b], shard, reduce_op::sum);
    } else if (async) {
      requests_[b] = comm.allreduce_async(data_[b], reduce_op::sum);
    } else {
      comm.allreduce(data_[b], reduce_op::sum);
    }
  }

  // Calls f(p, a, e, at) for each parameter p with elements in this rank's shard: elements [a, e)
  // of p (flattened) are the shard's elements [at, at + e - a).
  template <class F>
  void visit_shard(params_view params, F&& f) {
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const gradient_bucket& bk = buckets[b];
      const index_t m = chunk_[b], lo = rank_ * m, hi = lo + m;
      for (std::size_t i = 0; i < bk.params.size(); ++i) {
        tensor_type& p = *params[static_cast<std::size_t>(bk.params[i])].param;
        const index_t a = std::max(lo, bk.offsets[i]), e = std::min(hi, bk.offsets[i] + p.size());
        if (a < e) f(p, a - bk.offsets[i], e - bk.offsets[i], shard_offset_[b] + a - lo);
      }
    }
  }

  // The parameters (or gradients) of bucket b = its buffer's first elements.
  void unpack(params_view params, std::size_t b, bool grads) {
    const gradient_bucket& bk = plan_->buckets[b];
    for (std::size_t i = 0; i < bk.params.size(); ++i) {
      const param_ref<tensor_type>& p = params[static_cast<std::size_t>(bk.params[i])];
      tensor_type& dst = grads ? *p.grad : *p.param;
      if (dst.size() == 0) continue;
      dst.flatten() = data_[b].slice(range(bk.offsets[i], bk.offsets[i] + dst.size()));
    }
  }

  void pack(params_view params, std::size_t b, bool grads) {
    const gradient_bucket& bk = plan_->buckets[b];
    for (std::size_t i = 0; i < bk.params.size(); ++i) {
      const param_ref<tensor_type>& p = params[static_cast<std::size_t>(bk.params[i])];
      const tensor_type& src = grads ? *p.grad : *p.param;
      if (src.size() == 0) continue;
      data_[b].slice(range(bk.offsets[i], bk.offsets[i] + src.size())) = src.flatten();
    }
  }

  const bucket_plan* plan_;
  std::vector<tensor_type> data_;  // one contiguous buffer per bucket (sharded: k chunks)
  std::vector<std::optional<request_type>> requests_;
  std::vector<std::optional<scatter_request_type>> scatter_requests_;  // sharded
  std::vector<char> ready_;                                            // per parameter
  std::vector<std::size_t> ready_count_;  // per bucket: parameters ready
  std::vector<char> packed_;              // per bucket: the gradients went through data_
  std::size_t next_ = 0;                  // the next bucket to start
  int launched_during_backward_ = 0;
  index_t tail_;
  int ranks_, rank_;  // sharded over ranks_ ranks (1 unsharded)
  bool sharded_;
  std::vector<index_t> chunk_;         // per bucket: elements per rank (unsharded: all)
  std::vector<index_t> shard_offset_;  // per bucket: where its chunk starts in the shards
  tensor_type param_shard_, grad_shard_, tail_data_;
};

}  // namespace meld::detail::distributed
