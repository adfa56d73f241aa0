// The phases of one data_parallel worker's step, timed with the steady clock: as the step's
// timing, and as traced ranges on the worker's thread (core/trace.hpp).
#pragma once

#include <chrono>

#include "../../core/trace.hpp"

namespace meld::detail::dist {

// t0: the step starts; t1: forward and loss are done; t2: backward is done (with the buckets
// launched inside it); t3: the allreduces are waited for (t2 or earlier where nothing was
// waited for). Returns the Timing (step_timing) of the step up to now, without its bucket counts.
template <class Timing>
Timing step_phases(int rank, std::chrono::steady_clock::time_point t0,
                   std::chrono::steady_clock::time_point t1,
                   std::chrono::steady_clock::time_point t2,
                   std::chrono::steady_clock::time_point t3) {
  const auto now = std::chrono::steady_clock::now();
  if (t3 < t2) t3 = t2;
  if (trace_enabled()) [[unlikely]] {
    const trace_arg r{"rank", rank};
    trace_complete("step", "dp", trace_ns(t0), trace_ns(now), r);
    trace_complete("forward", "dp", trace_ns(t0), trace_ns(t1), r);
    trace_complete("backward", "dp", trace_ns(t1), trace_ns(t2), r);
    if (t3 > t2) trace_complete("allreduce wait", "dp", trace_ns(t2), trace_ns(t3), r);
  }
  const auto s = [](std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  return Timing{s(now - t0), s(t1 - t0), s(t2 - t1), s(t3 - t2), 0, 0};
}

}  // namespace meld::detail::dist
