// A warning, once per program, where the code that runs meld's CPU kernels was compiled for fewer
// instruction sets than this CPU runs: meld's SIMD width is chosen at compile time, so a build
// without -march flags gets SSE2 kernels on an AVX-512 machine, several times slower, silently.
// TensorFlow's "This binary was not compiled to use: AVX2 FMA" is the convention followed.
// MELD_NO_ISA_WARNING=1 silences it.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../core/config.hpp"
#include "isa.hpp"

namespace meld::detail {

// Writes the warning to stderr when this CPU runs instruction sets that `compiled` lacks, unless
// MELD_NO_ISA_WARNING is set to something other than "" or "0".
[[gnu::cold]] void warn_compiled_isa(isa_set compiled);

// Set by the first check: later ones cost a load and a predictable branch.
inline std::atomic<bool> isa_checked{false};

// Called where an assignment goes to the thread pool. compiled_isa is read here, in the caller's
// translation unit, which compiled the kernels (with meld::runtime, not the library's flags).
MELD_INLINE void check_compiled_isa() {
  if (isa_checked.load(std::memory_order_relaxed)) [[likely]]
    return;
  if (!isa_checked.exchange(true, std::memory_order_relaxed)) warn_compiled_isa(compiled_isa);
}

}  // namespace meld::detail

#if MELD_RUNTIME_DEFINITIONS
#include "isa_warning-inl.hpp"
#endif
