// The phases of one data_parallel worker's step, timed with the steady clock as they happen: as
// the step's timing, as traced ranges on the worker's thread (core/trace.hpp), and, under an NVTX
// tool, as NVTX ranges opened and closed at the same boundaries.
#pragma once

#include <chrono>

#include "../../core/trace.hpp"

namespace meld::detail::distributed {

// t0: the step starts (construction); t1: forward and loss are done (forward_done); t2: backward
// is done, with the buckets launched inside it (backward_done); t3: the allreduces are waited for
// (wait_done; t2 where nothing was waited for). timing() ends the step.
class step_clock {
 public:
  using clock = std::chrono::steady_clock;

  // with_forward false: a step that runs no forward (a joined rank's) starts at backward.
  explicit step_clock(int rank, bool with_forward = true) noexcept
      : rank_(rank), nvtx_((trace_sinks.load(std::memory_order_relaxed) & trace_to_nvtx) != 0) {
    open("step");
    open("forward");
    t_[0] = clock::now();
    if (!with_forward) forward_done();
  }
  void forward_done() noexcept {
    t_[1] = clock::now();
    close();
    open("backward");
  }
  // then_wait: the allreduce wait follows (a synchronized step).
  void backward_done(bool then_wait) noexcept {
    t_[2] = t_[3] = clock::now();
    close();
    if (then_wait) open("allreduce wait");
  }
  void wait_done() noexcept {
    t_[3] = clock::now();
    close();
  }
  // The step's Timing (step_timing) up to now, without its bucket counts; records the phases.
  template <class Timing>
  Timing timing() {
    const auto now = clock::now();
    while (open_ > 0) close();
    if (trace_enabled()) [[unlikely]] {
      const trace_arg r{"rank", rank_};
      trace_complete("step", "dp", trace_ns(t_[0]), trace_ns(now), r);
      trace_complete("forward", "dp", trace_ns(t_[0]), trace_ns(t_[1]), r);
      trace_complete("backward", "dp", trace_ns(t_[1]), trace_ns(t_[2]), r);
      if (t_[3] > t_[2])
        trace_complete("allreduce wait", "dp", trace_ns(t_[2]), trace_ns(t_[3]), r);
    }
    const auto s = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
    return Timing{s(now - t_[0]), s(t_[1] - t_[0]), s(t_[2] - t_[1]), s(t_[3] - t_[2]), 0, 0};
  }
  ~step_clock() {
    while (open_ > 0) close();  // a step that threw
  }
  step_clock(const step_clock&) = delete;
  step_clock& operator=(const step_clock&) = delete;

 private:
  void open(const char* phase) noexcept {
    if (!nvtx_) return;
    trace_nvtx_push(phase, "dp", {"rank", rank_});
    ++open_;
  }
  void close() noexcept {
    if (open_ == 0) return;
    trace_nvtx_pop();
    --open_;
  }
  int rank_;
  bool nvtx_;     // an NVTX tool listened when the step began
  int open_ = 0;  // NVTX ranges open: the step and its current phase
  clock::time_point t_[4];
};

}  // namespace meld::detail::distributed
