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
  bucket_engine(const bucket_plan& plan, index_t tail)
      : plan_(&plan),
        requests_(std::max<std::size_t>(plan.buckets.size(), 1)),
        ready_(plan.bucket_of.size(), 0),
        ready_count_(plan.buckets.size(), 0),
        packed_(plan.buckets.size(), 1),
        tail_(tail) {
    for (const auto& bk : plan.buckets) data_.emplace_back(shape_t{bk.size});
    if (data_.empty()) data_.emplace_back(shape_t{0});
    data_.back() = tensor_type(shape_t{data_.back().size() + tail});
  }

  // The tail: written before the last bucket starts (it is reduced with it), read after wait().
  tensor_view<T, B> tail() {
    const index_t end = data_.back().size();
    return data_.back().slice(range(end - tail_, end));
  }

  // Rank 0's parameters go to every rank (collective): packed, broadcast, unpacked.
  void broadcast_parameters(Comm& comm, params_view params) {
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      pack(params, b, /*grads=*/false);
      comm.broadcast(data_[b].slice(range(0, buckets[b].size)), 0);
      const gradient_bucket& bk = buckets[b];
      for (std::size_t i = 0; i < bk.params.size(); ++i) {
        tensor_type& p = *params[static_cast<std::size_t>(bk.params[i])].param;
        if (p.size() == 0) continue;
        p.flatten() = data_[b].slice(range(bk.offsets[i], bk.offsets[i] + p.size()));
      }
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

  // Reduces the tail alone where the model has no parameters (call after marking them all).
  void finish(Comm& comm) {
    if (plan_->buckets.empty() && tail_ > 0 && comm.size() > 1)
      comm.allreduce(data_.back(), reduce_op::sum);
  }

  // Waits for every bucket's allreduce (call after every gradient was marked ready).
  void wait() {
    for (auto& r : requests_)
      if (r) r->wait();
  }

  // Every gradient = its bucket's reduced sum / total (0 when total is 0).
  void unpack_mean(params_view params, double total) {
    const auto& buckets = plan_->buckets;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const gradient_bucket& bk = buckets[b];
      for (std::size_t i = 0; i < bk.params.size(); ++i) {
        tensor_type& g = *params[static_cast<std::size_t>(bk.params[i])].grad;
        const index_t size = g.size();
        if (size == 0) continue;
        if (total <= 0)
          g = T(0);
        else if (!packed_[b])  // a rank alone: the gradient is its own sum
          g = g / static_cast<T>(total);
        else
          g.flatten() =
              data_[b].slice(range(bk.offsets[i], bk.offsets[i] + size)) / static_cast<T>(total);
      }
    }
  }

  int launched_during_backward() const { return launched_during_backward_; }

 private:
  using request_type =
      decltype(std::declval<Comm&>().allreduce_async(std::declval<tensor_type&>(), reduce_op::sum));

  void launch(Comm& comm, params_view params, std::size_t b, bool async) {
    requests_[b].reset();
    // A rank alone has nothing to add: its gradients stay where they are (no copy in or out).
    packed_[b] = comm.size() > 1;
    if (!packed_[b]) return;
    // Traced: the packing and the launch (or, not async, the whole allreduce) on this thread; the
    // collective itself is traced where it runs, with the bucket's number.
    const auto bucket = static_cast<std::int64_t>(b);
    trace_scope traced("bucket", "dp", {"bucket", bucket}, {"elements", data_[b].size()},
                       {"async", async});
    pack(params, b, /*grads=*/true);
    trace_collective_tag tag({"bucket", bucket});
    if (async)
      requests_[b] = comm.allreduce_async(data_[b], reduce_op::sum);
    else
      comm.allreduce(data_[b], reduce_op::sum);
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
  std::vector<tensor_type> data_;  // one contiguous buffer per bucket
  std::vector<std::optional<request_type>> requests_;
  std::vector<char> ready_;               // per parameter
  std::vector<std::size_t> ready_count_;  // per bucket: parameters ready
  std::vector<char> packed_;              // per bucket: the gradients went through data_
  std::size_t next_ = 0;                  // the next bucket to start
  int launched_during_backward_ = 0;
  index_t tail_;
};

}  // namespace meld::detail::distributed
