// The definitions of isa_warning.hpp's runtime functions (MELD_RUNTIME in core/config.hpp):
// included by isa_warning.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "isa_warning.hpp"

namespace meld::detail {

[[gnu::cold]] MELD_ONCE MELD_RUNTIME void warn_compiled_isa(isa_set compiled) {
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

}  // namespace meld::detail
