// The window operations (backend/window.hpp) on the simulated device: the host loops of
// backend/host_window.hpp, run as the device's kernels through executor<sim<...>>::host_kernel.
#pragma once

#include "../host_window.hpp"
#include "sim.hpp"

namespace meld {

template <class Policy>
struct window_ops<sim<Policy>> : detail::host_window_ops<sim<Policy>> {};

}  // namespace meld
