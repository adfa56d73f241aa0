// The window operations (backend/window.hpp) of the CPU backends: the host loops of
// backend/host_window.hpp, run through executor<cpu<...>>::host_kernel.
#pragma once

#include "../host_window.hpp"
#include "cpu.hpp"

namespace meld {

template <class Policy>
struct window_ops<cpu<Policy>> : detail::host_window_ops<cpu<Policy>> {};

}  // namespace meld
