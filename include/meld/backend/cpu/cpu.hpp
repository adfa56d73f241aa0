// The CPU backend tag: tensors in host memory, evaluated with xsimd on the calling thread and the
// thread pool.
#pragma once

#include "../policy.hpp"

namespace meld {

template <class Policy = sync>
struct cpu {
  using policy = Policy;
  static constexpr const char* name = "cpu";
  static constexpr bool host_accessible = true;  // the host reads and writes elements directly
};

}  // namespace meld
