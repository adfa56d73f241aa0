// The CPU backend tag: tensors in host memory, evaluated with xsimd on the calling thread and the
// thread pool.
#pragma once

#include "../policy.hpp"

namespace meld {

/// \addtogroup backends
/// @{

/// The CPU backend: host memory, xsimd evaluation on meld's thread pool. Policy is meld::sync (the
/// default: work runs before the call returns) or meld::async (work is queued on a meld::stream).
template <class Policy = sync>
struct cpu {
  /// The execution policy, meld::sync or meld::async.
  using policy = Policy;
  /// The backend's name in messages.
  static constexpr const char* name = "cpu";
  static constexpr bool host_accessible = true;  ///< the host reads and writes elements directly
};

/// @}

}  // namespace meld
