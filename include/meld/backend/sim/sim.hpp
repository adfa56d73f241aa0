// meld::sim<Policy>: a simulated device. Its memory lives in host RAM but behaves like a GPU's:
// the host cannot address it (not in the types: data() and element access do not compile; not at
// run time either: a stray host dereference of a sim pointer faults), there are several devices
// (MELD_SIM_DEVICES, default 4) of bounded memory (MELD_SIM_MEMORY bytes each, default 16 GiB),
// sim<async> runs its work on stream worker threads as cuda<async> runs it on the GPU, and every
// transfer between host and device is counted. Its kernels are the CPU backend's evaluation on
// the readable view of the memory: no numeric code of its own.
//
// What it is for: running every GPU code path (nn, data_parallel, the examples, your own code) on
// a machine without a GPU, so that a host loop over device memory, a missing synchronization or a
// hidden host round trip shows in CI.
//
//   using dev = meld::sim<>;                          // or meld::sim<meld::async>
//   meld::device_guard<dev> on(1);                    // tensors created here live on device 1
//   auto x = meld::to<dev>(host_tensor);              // counted: one host-to-device transfer
//   meld::reset_sim_transfers(); step(); assert(meld::sim_transfers().to_host_calls == 1);
#pragma once

#include <atomic>
#include <cstdint>

#include "../policy.hpp"

namespace meld {

/// \addtogroup backends
/// @{

/// The simulated device: memory in host RAM that the types treat as device memory (no host access;
/// a stray host dereference faults with a message), several devices (meld::device_guard), work on
/// per-device streams under meld::async, counted transfers (meld::sim_transfers). It runs every GPU
/// code path on machines without a GPU.
template <class Policy = sync>
struct sim {
  /// The execution policy, meld::sync or meld::async.
  using policy = Policy;
  /// The backend's name in messages.
  static constexpr const char* name = "sim";
  static constexpr bool host_accessible = false;  ///< elements are read through meld::to
};

/// Transfers between host and sim devices since the start of the process or the last reset:
/// meld::to in either direction, and the value of each reduction to a scalar (which a GPU copies
/// back). Copies between devices are not host transfers and are counted apart.
struct transfer_counts {
  std::uint64_t to_device_calls = 0, to_device_bytes = 0;
  std::uint64_t to_host_calls = 0, to_host_bytes = 0;
  std::uint64_t device_to_device_calls = 0, device_to_device_bytes = 0;
  /// @var to_device_calls
  /// Number of host to device copies.
  /// @var to_device_bytes
  /// Bytes copied from the host to devices.
  /// @var to_host_calls
  /// Number of device to host copies.
  /// @var to_host_bytes
  /// Bytes copied from devices to the host.
  /// @var device_to_device_calls
  /// Number of device to device copies.
  /// @var device_to_device_bytes
  /// Bytes copied between devices.
};

namespace detail {
struct sim_counters {
  std::atomic<std::uint64_t> values[6] = {};
  static sim_counters& get() {
    static sim_counters c;
    return c;
  }
  void count(int which, std::uint64_t bytes) {
    values[2 * which].fetch_add(1, std::memory_order_relaxed);
    values[2 * which + 1].fetch_add(bytes, std::memory_order_relaxed);
  }
};
enum sim_transfer : int { to_device = 0, to_host = 1, device_to_device = 2 };
}  // namespace detail

/// The transfers counted so far (all sim devices, every thread).
inline transfer_counts sim_transfers() {
  auto& v = detail::sim_counters::get().values;
  return {v[0].load(), v[1].load(), v[2].load(), v[3].load(), v[4].load(), v[5].load()};
}

/// Sets every transfer count back to 0.
inline void reset_sim_transfers() {
  for (auto& v : detail::sim_counters::get().values) v.store(0);
}

/// @}

}  // namespace meld
