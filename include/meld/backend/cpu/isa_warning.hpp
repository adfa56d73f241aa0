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
[[gnu::cold]] MELD_ONCE MELD_RUNTIME void warn_compiled_isa(isa_set compiled)
#if MELD_RUNTIME_DEFINITIONS
{
  const isa_set missing = cpu_isa() & ~compiled;
  const char* quiet = std::getenv("MELD_NO_ISA_WARNING");
  if (missing == 0 || (quiet && *quiet && std::strcmp(quiet, "0") != 0)) return;
  char text[640] = "";
  std::size_t used = 0;
  const auto add = [&](const char* s) {
    const std::size_t length = std::strlen(s), room = sizeof(text) - 1 - used;
    const std::size_t n = length < room ? length : room;
    std::memcpy(text + used, s, n);
    text[used += n] = '\0';
  };
  const auto add_set = [&](isa_set s) {
    if (s == 0) add(" (none)");
    for (int i = 0; i < isa_count; ++i)
      if (s >> i & 1) {
        add(" ");
        add(isa_names[i]);
      }
  };
  add("meld: this program was compiled for");
  add_set(compiled);
  add(" but this CPU also runs");
  add_set(missing);
  add("; compile with -march=native or link meld::native (MELD_NO_ISA_WARNING=1 silences this)\n");
  std::fputs(text, stderr);  // one call: not interleaved with other threads' output
}
#else
    ;
#endif

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
