// The instruction sets meld reports, as bit sets over one list of names: those a translation unit
// is compiled for (the compiler's predefined macros) and those this CPU and operating system run
// (CPUID and XCR0 on x86, xsimd's detection on ARM). build_info() lists both; the first parallel
// assignment compares them (isa_warning.hpp).
#pragma once

#include <array>
#include <cstdint>

#include "../../core/config.hpp"

// MELD_DETAIL_CPUID: this CPU's instruction sets are read with CPUID (x86; ARM asks xsimd).
#if defined(__x86_64__) || defined(__i386__) || defined(_M_AMD64) || defined(_M_IX86)
#define MELD_DETAIL_CPUID 1
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#else
#include "simd.hpp"
#endif

namespace meld::detail {

// A set of instruction sets: bit i stands for isa_names[i].
using isa_set = std::uint32_t;

inline constexpr const char* isa_names[] = {
    "sse2", "sse3", "ssse3",   "sse4.1",   "sse4.2",   "avx",      "fma",
    "fma4", "avx2", "avx512f", "avx512cd", "avx512dq", "avx512bw", "neon",
};
inline constexpr int isa_count = int(sizeof(isa_names) / sizeof(isa_names[0]));

enum isa_bit : isa_set {
  isa_sse2 = 1u << 0,
  isa_sse3 = 1u << 1,
  isa_ssse3 = 1u << 2,
  isa_sse41 = 1u << 3,
  isa_sse42 = 1u << 4,
  isa_avx = 1u << 5,
  isa_fma = 1u << 6,
  isa_fma4 = 1u << 7,
  isa_avx2 = 1u << 8,
  isa_avx512f = 1u << 9,
  isa_avx512cd = 1u << 10,
  isa_avx512dq = 1u << 11,
  isa_avx512bw = 1u << 12,
  isa_neon = 1u << 13,
};

// The instruction sets of the translation unit that reads it. Not `inline` (a namespace-scope
// constexpr variable has internal linkage): each unit gets its own value, from its own flags.
constexpr isa_set compiled_isa = isa_set(0)
#if defined(__SSE2__) || defined(_M_AMD64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
                                 | isa_sse2
#endif
#if defined(__SSE3__)
                                 | isa_sse3
#endif
#if defined(__SSSE3__)
                                 | isa_ssse3
#endif
#if defined(__SSE4_1__)
                                 | isa_sse41
#endif
#if defined(__SSE4_2__)
                                 | isa_sse42
#endif
#if defined(__AVX__)
                                 | isa_avx
#endif
#if defined(__FMA__)
                                 | isa_fma
#endif
#if defined(__FMA4__)
                                 | isa_fma4
#endif
#if defined(__AVX2__)
                                 | isa_avx2
#endif
#if defined(__AVX512F__)
                                 | isa_avx512f
#endif
#if defined(__AVX512CD__)
                                 | isa_avx512cd
#endif
#if defined(__AVX512DQ__)
                                 | isa_avx512dq
#endif
#if defined(__AVX512BW__)
                                 | isa_avx512bw
#endif
#if defined(__ARM_NEON) || defined(_M_ARM64)
                                 | isa_neon
#endif
    ;

#if defined(MELD_DETAIL_CPUID)
// CPUID leaf `leaf`, subleaf `sub`: {eax, ebx, ecx, edx}, zeros where the CPU lacks the leaf.
inline std::array<std::uint32_t, 4> cpuid(unsigned leaf, unsigned sub = 0) {
  std::array<std::uint32_t, 4> r{};
#if defined(_MSC_VER) && !defined(__clang__)
  int x[4];
  __cpuid(x, static_cast<int>(leaf & 0x80000000u));  // the highest leaf of leaf's range
  if (static_cast<unsigned>(x[0]) < leaf) return r;
  __cpuidex(x, static_cast<int>(leaf), static_cast<int>(sub));
  for (int i = 0; i < 4; ++i) r[i] = static_cast<std::uint32_t>(x[i]);
#else
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(leaf, sub, &a, &b, &c, &d)) r = {a, b, c, d};
#endif
  return r;
}

// XCR0, the register states the operating system saves on a context switch. CPUID reports what
// the processor implements; AVX needs the YMM state saved and AVX-512 the ZMM states too, which a
// kernel or hypervisor may leave off (Linux then leaves the flags out of /proc/cpuinfo).
inline std::uint64_t os_saved_states() {
  if (!(cpuid(1)[2] >> 27 & 1)) return 0;  // no OSXSAVE: no xgetbv either
#if defined(_MSC_VER) && !defined(__clang__)
  return _xgetbv(0);
#else
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return static_cast<std::uint64_t>(hi) << 32 | lo;
#endif
}
#endif

// The instruction sets of isa_names that this CPU and OS can run. On x86 from CPUID itself: xsimd
// 8.1's available_architectures() reads the AVX bit from the wrong leaf (0x80000001) and reports
// no AVX (nor FMA) on CPUs that have it.
inline isa_set cpu_isa() {
  isa_set isa = 0;
#if defined(MELD_DETAIL_CPUID)
  const auto bit = [](std::uint32_t reg, int b) { return (reg >> b & 1) != 0; };
  const auto l1 = cpuid(1), l7 = cpuid(7), ext = cpuid(0x80000001u);
  const std::uint64_t saved = os_saved_states();
  const bool avx = bit(l1[2], 28) && (saved & 0x6) == 0x6;  // and the SSE and AVX states
  // ... and the opmask and both halves of the ZMM registers
  const bool avx512f = avx && bit(l7[1], 16) && (saved & 0xe6) == 0xe6;
  const auto add = [&](isa_bit b, bool has) { isa |= has ? isa_set(b) : 0; };
  add(isa_sse2, bit(l1[3], 26));
  add(isa_sse3, bit(l1[2], 0));
  add(isa_ssse3, bit(l1[2], 9));
  add(isa_sse41, bit(l1[2], 19));
  add(isa_sse42, bit(l1[2], 20));
  add(isa_avx, avx);
  add(isa_fma, avx && bit(l1[2], 12));
  add(isa_fma4, avx && bit(ext[2], 16));
  add(isa_avx2, avx && bit(l7[1], 5));
  add(isa_avx512f, avx512f);
  add(isa_avx512cd, avx512f && bit(l7[1], 28));
  add(isa_avx512dq, avx512f && bit(l7[1], 17));
  add(isa_avx512bw, avx512f && bit(l7[1], 30));
#elif defined(__aarch64__) || defined(_M_ARM64) || defined(__ARM_NEON) || defined(_M_ARM)
  const auto a = xsimd::available_architectures();
  if (a.neon || a.neon64) isa |= isa_neon;
#endif
  return isa;
}

}  // namespace meld::detail
