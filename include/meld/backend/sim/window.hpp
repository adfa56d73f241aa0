// The window operations (backend/window.hpp) on the simulated device: the CPU's loops, run as the
// device's kernels through executor<sim<...>>::host_kernel.
#pragma once

#include "../cpu/window.hpp"
#include "executor.hpp"

namespace meld {

template <class Policy>
struct window_ops<sim<Policy>> : detail::host_window_ops<sim<Policy>> {};

}  // namespace meld
