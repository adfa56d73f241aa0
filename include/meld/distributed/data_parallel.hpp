// data_parallel<Model, Comm>: trains one model on many workers. Every worker holds a replica of
// the model; each step splits the global minibatch along axis 0 into one shard per rank, runs
// forward and backward on each shard, and allreduces the gradients, so that after the step every
// replica holds the gradient of the mean loss over the whole minibatch.
//
// Two ways to run:
//   threads    meld::thread_group group(4); meld::data_parallel dp(model, group);
//              one process, 4 worker threads; rank 0 trains `model` itself, ranks 1..3 replicas
//              of it (Model::replica()). step() takes the global batch and splits it. On a
//              backend with several devices (sim, cuda) replica r lives on device r (modulo the
//              device count) and worker r runs there: each takes its shard from the batch's
//              device and rank 0's parameters device to device.
//   processes  meld::mpi_comm comm(MPI_COMM_WORLD); meld::data_parallel dp(model, comm);
//              one rank per process (mpi_comm, nccl_comm, or a thread_comm used from threads the
//              caller manages). step() takes the global batch (the same on every rank) and keeps
//              this rank's shard; step_local() takes this rank's own shard.
// In both, step_gathered(n, gather, loss) lets each worker gather its own shard of an n-sample
// batch (e.g. shuffled rows of a data set) on its own thread, so no whole batch is copied first.
//
// The training loop is unchanged otherwise: the optimizer updates `model` (the local replica) from
// the averaged gradients, e.g.
//   for (auto& [x, y] : batches) { dp.step(x, y, meld::nn::cross_entropy); opt.step(); }
// In threads mode the other replicas take rank 0's parameters at each step's start: on its device
// they share its elements (sharded too, where all are there), elsewhere they copy them or the
// sharded optimizer's allgather writes them. In process mode every rank runs the same optimizer.
//
// What a step does, and guarantees:
//   * Shards: rank r of P gets the r-th of P contiguous parts of the rows, the first N mod P of
//     them one row longer than the others (N / P rows; a shard may be empty). Each rank scales its
//     output gradient by its shard size, and the summed gradients are divided by the total sample
//     count (a rank alone in a one-step window skips both), so the result is the gradient of the
//     mean loss over all N samples, whatever the split: the full-batch gradient, to float rounding.
//   * Gradients: step() replaces them. At the start of an accumulation window (every synchronized
//     step, or the first micro-step after one) it zeroes them; after a synchronized step every
//     rank holds the same bits.
//   * Buckets: gradients are packed into buckets of at most `bucket_bytes` (25 MB by default),
//     in reverse parameter order (make_buckets: a pure function of the model and the cap, the
//     same on every rank, and checked at construction). A bucket's allreduce starts as soon as
//     its gradients are final, overlapping the rest of backward, when the model reports them: a
//     model with `backward(grad, hook)` calls hook(g) for each parameter gradient g once backward
//     has finished writing it (layer by layer, from the last). A model without that overload is
//     run with backward(grad), and every bucket starts after it returns (no overlap).
//   * Accumulation: inside `auto guard = dp.no_sync();` steps only add gradients locally (no
//     communication); the next step outside it synchronizes the whole window, giving the
//     gradient of the mean over every sample of the window, on every rank.
//   * Uneven epochs (process mode): a rank that runs out of batches calls dp.join(update), where
//     update() is what the others do after each step (the optimizer). It then joins every
//     remaining step with zero samples, applying the same updates, until every rank has joined;
//     no rank waits forever and the replicas stay identical.
//   * Buffers (batch-norm statistics) are broadcast from rank 0 at construction; afterwards each
//     worker keeps its own statistics, computed on its shards (the choice of d2l.ai's multi-GPU
//     chapter; evaluate with rank 0's model). broadcast_buffers = true copies rank 0's buffers to
//     every rank at the start of each window instead (PyTorch DDP's default).
//   * Determinism: the shards, the bucket layout, the collective schedule and the reduction
//     order are fixed, so the same seed and the same number of workers give the same bits.
//   * Failures: a worker that throws aborts the communicator (the others throw comm_error at once
//     instead of waiting), and the step rethrows the exception that caused it. Afterwards the
//     data_parallel refuses further steps.
//   * Sharded optimizer (options.shard_optimizer, ZeRO stage 1): buckets are reduce-scattered, each
//     rank getting the averaged gradients of 1/k of the elements for a meld::sharded_optimizer
//     (sharded_optimizer.hpp); the model's own gradients then hold this worker's sums.
//   * The loss: step() returns an nn::loss_value, the mean over the whole minibatch. Its sums are
//     allreduced on the model's backend with the last gradient bucket (sharded: alone), so nothing
//     is read back on the host until it is read (`double l = dp.step(...)` reads it at once).
//
// Here: the class; its options in data_parallel_options.hpp; in detail/: bucket_engine.hpp (the
// buckets), worker_crew.hpp (threads mode's threads), same_model.hpp (the same-model check),
// replica_params.hpp (a replica's parameters, the shards), step_phases.hpp (timing, traces).
#pragma once

#include <any>
#include <array>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../backend/device.hpp"
#include "../nn/gradient_hook.hpp"
#include "../nn/loss_value.hpp"
#include "../nn/model.hpp"
#include "../tensor/convert.hpp"
#include "buckets.hpp"
#include "buffer.hpp"
#include "communicator.hpp"
#include "data_parallel_options.hpp"
#include "detail/bucket_engine.hpp"
#include "detail/replica_params.hpp"
#include "detail/same_model.hpp"
#include "detail/scoped_flag.hpp"
#include "detail/step_phases.hpp"
#include "detail/worker_crew.hpp"
#include "parameter_shard.hpp"
#include "thread_comm.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// Data-parallel training of a model over the ranks of a communicator: each step() splits the
/// minibatch over the workers, runs forward and backward on each, and averages the gradients with
/// bucketed allreduces that overlap backward, so that every replica holds the same parameters.
/// Throws comm_error when a collective fails and std::invalid_argument for models whose parameter
/// layouts differ between ranks.
template <nn::model Model, communicator Comm>
class data_parallel {
 public:
  /// The model type.
  using model_type = Model;
  /// The communicator type.
  using comm_type = Comm;
  /// The model's element type.
  using value_type = typename Model::value_type;
  /// The model's backend.
  using backend_type = typename Model::backend_type;
  /// The tensors the model takes and returns.
  using tensor_type = tensor<value_type, backend_type>;
  /// What step() returns: the mean loss over the minibatch, read on demand.
  using loss_type = nn::loss_value<value_type, backend_type>;

  /// Process mode: this process is rank comm.rank() of comm.size().
  data_parallel(Model& model, Comm& comm, const data_parallel_options& options = {})
      : options_(options), threads_mode_(false) {
    auto w = std::make_unique<worker>();
    w->model = &model;
    w->comm = &comm;
    w->device = detail::distributed::device_of(model);
    workers_.push_back(std::move(w));
    setup();
  }

  /// Threads mode: group.size() workers in this process; rank 0 trains `model`.
  data_parallel(Model& model, thread_group& group,
                const data_parallel_options& options = {}) requires std::same_as<Comm, thread_comm>
      : options_(options), threads_mode_(true) {
    for (int r = 0; r < group.size(); ++r) {
      auto w = std::make_unique<worker>();
      if (r == 0) {
        w->model = &model;
        w->device = detail::distributed::device_of(model);
      } else {
        // Replica r on device r of the backend (modulo the count: several workers may share one).
        w->device = r % memory<backend_type>::device_count();
        device_guard<backend_type> on(w->device);
        w->owned = std::make_unique<Model>(model.replica());
        w->model = w->owned.get();
      }
      w->comm = &group.comm(r);
      workers_.push_back(std::move(w));
    }
    if (group.size() > 1) crew_ = std::make_unique<detail::distributed::worker_crew>(group.size());
    setup();
  }

  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  // ---- training ---------------------------------------------------------------------------------

  /// One step on the global minibatch (axis 0 is the batch; every rank passes the same one in
  /// process mode). Returns the mean loss over the minibatch (inside no_sync: over this process's
  /// shards) as an nn::loss_value, which stays on the model's backend until read.
  template <class Targets, class Loss>
  loss_type step(const tensor_type& inputs, const Targets& targets, const Loss& loss) {
    const index_t n = detail::distributed::check_batch(inputs, targets, "step");
    if (world_size() == 1 && n > 0 && inputs.device() == workers_[0]->device &&
        targets.device() == workers_[0]->device) {
      // One worker: its shard is the whole batch, used where it is (no copy).
      check_usable();
      if (window_start_) window_batches_ = 0;
      const totals known{window_batches_ += static_cast<double>(n), static_cast<double>(n)};
      return run_step([&](worker& w, bool sync, bool fresh) {
        return worker_step(w, inputs, &targets, n, loss, sync, fresh, &known);
      });
    }
    return step_gathered<Targets>(
        n,
        [&](index_t lo, index_t hi, tensor_type& x, Targets& t) {
          detail::distributed::take_rows(x, inputs, lo, hi);
          detail::distributed::take_rows(t, targets, lo, hi);
        },
        loss);
  }

  /// One step on a global minibatch of n samples that the workers gather themselves:
  /// gather(lo, hi, inputs, targets) fills a worker's shard, rows [lo, hi) of the batch (axis 0
  /// of both of size hi - lo), on that worker's thread and device, and is not called for an empty
  /// shard. Threads mode calls it from every worker at once (for disjoint rows), so the shards are
  /// copied in parallel, straight from where the samples are, instead of a whole batch being
  /// gathered first and each shard copied out of it. inputs and targets are the worker's own,
  /// reused from the last step (gather may keep their memory when the shapes match). Process mode:
  /// every rank passes the same n, and the rank gathers only its shard.
  template <class Targets, class Gather, class Loss>
  loss_type step_gathered(index_t n, Gather&& gather, const Loss& loss) {
    if (n < 0)
      throw std::invalid_argument(
          detail::cat("data_parallel::step_gathered: a batch of ", n, " samples"));
    const int P = world_size();
    // Every rank knows the global batch: the sample counts are known without communicating.
    check_usable();
    if (window_start_) window_batches_ = 0;
    const totals known{window_batches_ += static_cast<double>(n), static_cast<double>(n)};
    return run_step([&](worker& w, bool sync, bool fresh) {
      const int r = w.comm->rank();
      const index_t lo = detail::distributed::part_begin(n, P, r),
                    hi = detail::distributed::part_begin(n, P, r + 1);
      if (hi == lo)
        return worker_step(w, w.x, static_cast<const Targets*>(nullptr), 0, loss, sync, fresh,
                           &known);
      Targets& t = detail::distributed::held<Targets>(w.targets);
      gather(lo, hi, w.x, t);
      if (w.x.rank() < 1 || t.rank() < 1 || w.x.shape()[0] != hi - lo || t.shape()[0] != hi - lo)
        throw shape_error(detail::cat("data_parallel::step_gathered: the shard of rows [", lo, ", ",
                                      hi, ") of rank ", r, " was gathered as inputs ", w.x.shape(),
                                      " and targets ", t.shape(), " (axis 0 must be ", hi - lo,
                                      ")"));
      return worker_step(w, w.x, &t, hi - lo, loss, sync, fresh, &known);
    });
  }

  /// Process mode: one step on this rank's own shard (any number of rows, 0 included; the shards
  /// of different ranks may differ in size).
  template <class Targets, class Loss>
  loss_type step_local(const tensor_type& inputs, const Targets& targets, const Loss& loss) {
    if (threads_mode_)
      throw std::logic_error(
          "data_parallel::step_local: in threads mode step() takes the global batch and splits it");
    const index_t n = detail::distributed::check_batch(inputs, targets, "step_local");
    return run_step([&](worker& w, bool sync, bool fresh) {
      return worker_step(w, inputs, n ? &targets : nullptr, n, loss, sync, fresh);
    });
  }

  /// Process mode, after this rank's last batch: takes part in the other ranks' remaining steps
  /// with no samples, calling after_each_step() after each (pass the optimizer step, so that this
  /// replica stays identical to the others), until every rank has joined.
  template <class F>
  void join(F&& after_each_step) {
    if (threads_mode_) return;  // every worker takes part in every step() already
    check_usable();
    for (;;) {
      bool more = false;
      guarded([&](worker& w) {
        const bool fresh = window_start_;
        if (fresh) begin_window(w);
        w.read(*w.model, sizes_);
        w.loss = loss_type();
        detail::distributed::step_clock phases(w.comm->rank(), /*with_forward=*/false);
        more = synchronize(w, 0, /*active=*/false, false, phases, nullptr);
      });
      if (!more) return;
      window_start_ = true;
      after_each_step();
    }
  }
  /// join() with nothing to do after each step.
  void join() {
    join([] {});
  }

  /// Inside the guard's lifetime, steps accumulate gradients without communicating.
  using no_sync_guard = detail::distributed::scoped_flag;
  /// A guard: steps in its lifetime accumulate gradients; the next step after it averages them all.
  [[nodiscard]] no_sync_guard no_sync() { return no_sync_guard(no_sync_); }

  // ---- the model --------------------------------------------------------------------------------

  /// The model this process trains (rank 0's in threads mode): give it to the optimizer.
  Model& model() { return *workers_[0]->model; }
  /// Local replica i (threads mode: rank i; process mode: only 0).
  Model& replica(int i) { return *workers_.at(static_cast<std::size_t>(i))->model; }
  /// The number of workers in this process (threads mode: every rank; process mode: 1).
  int local_workers() const { return static_cast<int>(workers_.size()); }
  /// The number of ranks in all.
  int world_size() const { return workers_[0]->comm->size(); }
  /// This process's rank (0 in threads mode).
  int rank() const { return workers_[0]->comm->rank(); }
  /// The gradient buckets, in the order they are allreduced (the same on every rank).
  const std::vector<gradient_bucket>& buckets() const { return plan_.buckets; }
  /// Where the time of the last step went.
  const step_timing& last_timing() const { return timing_; }

  /// Whether the gradients are sharded (options.shard_optimizer: see sharded_optimizer.hpp).
  bool sharded() const { return options_.shard_optimizer; }
  /// Collective: rank 0's parameters to every replica (after changing model()'s parameters
  /// outside an optimizer that every rank runs, e.g. loading a checkpoint on rank 0 alone).
  void broadcast_parameters() {
    for (auto& w : workers_) w->read(*w->model, sizes_);
    // As at a step's start: a broadcast would write shared elements from two threads at once.
    guarded([&](worker& w) {
      if (takes_parameters())
        take_rank_0_parameters(w);
      else
        w.buckets->broadcast_parameters(*w.comm, w.params);
    });
  }

  /// The model-like operations an optimizer or checkpoint uses act on model(); train() and
  /// zero_grad() act on every local replica.
  template <class F>
  void visit_parameters(F&& f) {
    model().visit_parameters(std::forward<F>(f));
  }
  /// Visits model()'s buffers.
  template <class F>
  void visit_buffers(F&& f) {
    model().visit_buffers(std::forward<F>(f));
  }
  /// Sets training or evaluation mode on every local replica.
  void train(bool on) {
    for (auto& w : workers_) w->model->train(on);
  }
  /// Zeroes the gradients of every local replica.
  void zero_grad() {
    for (auto& w : workers_) w->model->zero_grad();
  }

 private:
  // It updates the workers' shards, on their threads, and allgathers the parameters.
  template <template <class> class, class>
  friend class sharded_optimizer;

  using bucket_engine = detail::distributed::bucket_engine<value_type, backend_type, Comm>;

  // A worker: its replica (the parameters as detail::distributed::replica_params reads them), its
  // communicator and the state of its step.
  struct worker : detail::distributed::replica_params<tensor_type> {
    Model* model = nullptr;
    std::unique_ptr<Model> owned;
    Comm* comm = nullptr;
    int device = 0;  // of the backend: where this worker's replica and tensors live
    std::optional<bucket_engine> buckets;
    std::array<double, 3> counts{};  // window samples, step samples, active
    double window_samples = 0;
    tensor_type x, grad_out;
    std::any targets;
    loss_type loss;         // this step's, on the worker's device
    tensor_type loss_sums;  // {2}: {loss sum, targets out of range}, allreduced
    step_timing timing;
    std::optional<parameter_shard<value_type, backend_type>> shard;  // over the engine's tensors
  };

  // Whether thread replicas take rank 0's parameters (unsharded always; sharded where all are on
  // its device: each rank writes its shard of them, no allgather), and replica w taking them.
  bool takes_parameters() const {
    return threads_mode_ && (!options_.shard_optimizer || one_device_);
  }
  void take_rank_0_parameters(worker& w) {  // (after every worker's read())
    if (takes_parameters() && &w != workers_[0].get())
      detail::distributed::take_parameters(w, *workers_[0], w.device == workers_[0]->device);
  }

  int local_index(const worker& w) const {
    for (std::size_t i = 0; i < workers_.size(); ++i)
      if (workers_[i].get() == &w) return static_cast<int>(i);
    return -1;
  }

  void check_usable() const {
    if (!failure_.empty())
      throw std::logic_error("data_parallel: unusable after a failed step: " + failure_);
  }

  // Runs f(worker) on every local worker (threads: in parallel), aborting the communicator when
  // one throws, and rethrows the exception that caused the failure.
  template <class F>
  void guarded(F&& f) {
    check_usable();
    auto job = [&](int i) {
      worker& w = *workers_[static_cast<std::size_t>(i)];
      try {
        device_guard<backend_type> on(w.device);  // the worker's temporaries on its device
        f(w);
      } catch (const comm_error&) {
        throw;
      } catch (const std::exception& e) {
        w.comm->abort(detail::cat("data_parallel failed on rank ", w.comm->rank(), ": ", e.what()));
        throw;
      } catch (...) {
        w.comm->abort(detail::cat("data_parallel failed on rank ", w.comm->rank()));
        throw;
      }
    };
    std::vector<std::exception_ptr> errors;
    if (crew_) {
      errors = crew_->run(job);
    } else {
      try {
        job(0);
      } catch (...) {
        errors.push_back(std::current_exception());
      }
    }
    for (const auto& e : errors)
      if (e) {
        try {
          thread_group::rethrow_root_cause(errors);
        } catch (const std::exception& ex) {
          failure_ = ex.what();
          throw;
        } catch (...) {
          failure_ = "unknown exception";
          throw;
        }
      }
  }

  template <class F>
  loss_type run_step(F&& per_worker) {
    check_usable();
    const bool sync = !no_sync_;
    const bool fresh = window_start_;
    // Pointers to every replica's parameters, taken here so that workers can read rank 0's.
    for (auto& w : workers_) w->read(*w->model, sizes_);
    if (fresh && threads_mode_ && options_.broadcast_buffers) {
      // Buffers are copied before any worker runs forward (which updates rank 0's).
      guarded([&](worker& w) {
        if (&w == workers_[0].get()) return;
        for (std::size_t i = 0; i < w.buffers.size(); ++i)
          meld::copy(*w.buffers[i], *workers_[0]->buffers[i]);
      });
    }
    // Synchronized, every rank returns the reduced loss of the whole batch (rank 0's is kept);
    // inside no_sync, each local worker's shard loss, added up here.
    std::vector<loss_type> parts(workers_.size());
    guarded([&](worker& w) {
      parts[static_cast<std::size_t>(local_index(w))] = per_worker(w, sync, fresh);
    });
    loss_type result = std::move(parts[0]);
    if (!sync)
      for (std::size_t i = 1; i < parts.size(); ++i) result += parts[i];
    window_start_ = sync;
    timing_ = workers_[0]->timing;
    return result;
  }

  // ---- per worker -------------------------------------------------------------------------------

  void begin_window(worker& w) {
    take_rank_0_parameters(w);
    if (!threads_mode_ && options_.broadcast_buffers)
      for (tensor_type* b : w.buffers) w.comm->broadcast(*b, 0);
    w.model->zero_grad();
    w.window_samples = 0;
  }

  // The samples of the window and of the step over every rank, known without communicating.
  struct totals {
    double window, step;
  };

  template <class Targets, class Loss>
  loss_type worker_step(worker& w, const tensor_type& x, const Targets* t, index_t n,
                        const Loss& loss, bool sync, bool fresh, const totals* known = nullptr) {
    detail::distributed::step_clock phases(w.comm->rank());
    if (fresh) begin_window(w);
    w.window_samples += static_cast<double>(n);
    w.loss = loss_type();
    const bool alone = sync && fresh && w.comm->size() == 1;
    if (n > 0) {
      const tensor_type out = w.model->forward(x);
      auto l = loss(out, *t, w.grad_out);
      if constexpr (nn::is_loss_value<decltype(l)>)
        w.loss = std::move(l);
      else  // a loss computed on the host
        w.loss = loss_type::from_mean(static_cast<double>(l), static_cast<double>(n));
      if (!alone) w.grad_out *= static_cast<value_type>(n);  // the shard's summed loss's gradient
    }
    phases.forward_done();
    if (!sync) {
      if (n > 0) w.model->backward(w.grad_out);
      phases.backward_done(/*then_wait=*/false);
      w.timing = phases.timing<step_timing>();
      return std::move(w.loss);
    }
    synchronize(w, n, /*active=*/true, n > 0, phases, known, alone);
    return loss_type(tensor_type(w.loss_sums), w.counts[1], w.loss.classes());
  }

  // This step's loss as {sum, targets out of range} on the worker's device, in w.loss_sums: what
  // every rank allreduces (zeros for a rank without samples).
  void stage_loss(worker& w) {
    if (!(w.loss_sums.shape() == shape_t{2}) || w.loss_sums.device() != w.device)
      w.loss_sums = tensor_type({2});
    else
      w.loss_sums = value_type(0);
    w.loss.add_sums_to(w.loss_sums);
  }

  // The collective part of a synchronized step: the counts (unless `known`), the loss, then the
  // buckets (launched during backward when the model reports ready gradients), then the averaged
  // gradients (already the mean where `mean`). Returns whether any rank was active.
  bool synchronize(worker& w, index_t n, bool active, bool run_backward,
                   detail::distributed::step_clock& phases, const totals* known,
                   bool mean = false) {
    Comm& c = *w.comm;
    std::optional<typename Comm::request> counts_request;
    if (known) {
      w.counts = {known->window, known->step, 1.0};
    } else {
      w.counts = {w.window_samples, static_cast<double>(n), active ? 1.0 : 0.0};
      if constexpr (Comm::memory_kind == comm_memory::host) {
        counts_request = c.allreduce_async(std::span<double>(w.counts), reduce_op::sum);
      } else {  // a device communicator: the numbers go through a tensor on the device
        tensor<double> host({3}, uninitialized);
        for (int i = 0; i < 3; ++i) host(i) = w.counts[static_cast<std::size_t>(i)];
        tensor<double, backend_type> on_device = meld::to<backend_type>(host);
        c.allreduce(on_device, reduce_op::sum);
        host = meld::to<cpu<>>(on_device);
        for (int i = 0; i < 3; ++i) w.counts[static_cast<std::size_t>(i)] = host(i);
      }
    }
    stage_loss(w);
    w.buckets->tail() = w.loss_sums;  // reduced with the last bucket
    w.buckets->start();
    if (run_backward) {
      if constexpr (nn::reports_ready_gradients<Model>) {
        nn::gradient_ready_hook<value_type, backend_type> hook;
        hook.context = &w;
        hook.notify = [](void* p, tensor_type& g) {
          worker& wk = *static_cast<worker*>(p);
          wk.buckets->mark_ready(*wk.comm, wk.params, wk.index_of(g), /*during_backward=*/true);
        };
        w.model->backward(w.grad_out, hook);
      } else {
        w.model->backward(w.grad_out);
      }
    }
    phases.backward_done(/*then_wait=*/true);
    for (std::size_t i = 0; i < w.params.size(); ++i)
      w.buckets->mark_ready(c, w.params, static_cast<int>(i), /*during_backward=*/false);
    w.buckets->finish(c);
    if (counts_request) counts_request->wait();
    w.buckets->wait();
    w.loss_sums = w.buckets->tail();
    phases.wait_done();
    w.buckets->unpack_mean(w.params, mean ? 1.0 : w.counts[0]);
    w.timing = phases.timing<step_timing>();
    w.timing.buckets = static_cast<int>(plan_.buckets.size());
    w.timing.buckets_during_backward = w.buckets->launched_during_backward();
    return w.counts[2] > 0;
  }

  // ---- construction -----------------------------------------------------------------------------

  void setup() {
    Model& m0 = *workers_[0]->model;
    m0.visit_parameters(
        [&](std::string_view, tensor_type& p, tensor_type&) { sizes_.push_back(p.size()); });
    plan_ = detail::distributed::bucket_plan(sizes_, sizeof(value_type), options_.bucket_bytes);
    for (const auto& w : workers_) one_device_ = one_device_ && w->device == workers_[0]->device;
    guarded([&](worker& w) {
      detail::distributed::check_same_model(*w.comm, *w.model, options_.bucket_bytes);
      w.read(*w.model, sizes_);
      w.buckets.emplace(plan_, /*tail: the loss sums=*/2,
                        options_.shard_optimizer ? w.comm->size() : 0, w.comm->rank());
      if (options_.shard_optimizer)
        w.shard.emplace(w.comm->rank(), w.buckets->parameter_shard(), w.buckets->gradient_shard());
      // Rank 0's parameters (through the buckets) and buffers go to every rank.
      w.buckets->broadcast_parameters(*w.comm, w.params);
      for (tensor_type* b : w.buffers) w.comm->broadcast(*b, 0);
    });
  }

  data_parallel_options options_;
  bool threads_mode_;
  bool one_device_ = true;  // every local replica on rank 0's device
  std::vector<std::unique_ptr<worker>> workers_;
  std::unique_ptr<detail::distributed::worker_crew> crew_;
  std::vector<index_t> sizes_;
  detail::distributed::bucket_plan plan_;
  bool no_sync_ = false;
  bool window_start_ = true;
  std::string failure_;
  step_timing timing_;
  double window_batches_ = 0;  // step(): the samples of the current window's global batches
};

/// Deduces data_parallel<Model, Comm> from data_parallel(model, comm).
template <class Model, class Comm>
data_parallel(Model&, Comm&) -> data_parallel<Model, Comm>;
/// Deduces data_parallel<Model, Comm> from data_parallel(model, comm, options).
template <class Model, class Comm>
data_parallel(Model&, Comm&, const data_parallel_options&) -> data_parallel<Model, Comm>;
/// Deduces data_parallel<Model, thread_comm> from data_parallel(model, group).
template <class Model>
data_parallel(Model&, thread_group&) -> data_parallel<Model, thread_comm>;
/// Deduces data_parallel<Model, thread_comm> from data_parallel(model, group, options).
template <class Model>
data_parallel(Model&, thread_group&, const data_parallel_options&)
    -> data_parallel<Model, thread_comm>;

/// @}
}  // namespace meld
