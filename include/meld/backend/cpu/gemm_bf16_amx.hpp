// The AMX micro-kernel for products of bfloat16 operands into a float C (gemm_bf16.hpp chooses it
// where the build targets AMX-BF16 and the CPU and Linux let this process use it). AMX holds eight
// tile registers of 16 rows x 64 bytes; one tdpbf16ps multiplies a 16 x 32 bfloat16 tile of A by a
// 32 x 16 tile of B into a 16 x 16 float tile: 8,192 multiply-adds (a vdpbf16ps does 32). A loop of
// independent tdpbf16ps ran at 1,795 GFLOP/s on one core of the Xeon AMX VM, 13 times that core's
// float FMA peak (134). The kernel keeps a 32 x 32 block of C in four tiles and, for each 32 steps
// of k, loads two tiles of A and two of B and issues four products (2 x 2, as eight registers
// allow).
//
// Packing pairs k as for vdpbf16ps (gemm_bf16_dot.hpp; B's panels are the same), with k rounded
// up to whole tiles, 16 words, of zeros and A's words in rows of a tile:
//
//   A panel (32 x kc): word (r, q) at a[(q / 16 * 32 + r) * 16 + q % 16]  -- a 16-word row per r
//   B panel (kc x 32): word (q, j) at b[q * 32 + j]                       -- as vdpbf16ps's
//
// so that a tile of A is 16 rows of 64 contiguous bytes and a tile of B is 16 rows of one panel
// (row stride 128 bytes). Like vdpbf16ps, tdpbf16ps treats subnormal inputs as zero and flushes
// subnormal results; it rounds to nearest even whatever MXCSR says.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "../../core/gcc12_warnings.hpp"
#include "gemm_bf16_dot.hpp"

// g++ spells the targets' macros __AMX_TILE__ and __AMX_BF16__, clang __AMXTILE__ and __AMXBF16__.
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) &&                            \
    (defined(__AMX_BF16__) || defined(__AMXBF16__)) && defined(__AVX512BF16__) && \
    defined(__linux__) && defined(__x86_64__)
#define MELD_DETAIL_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

#if defined(MELD_DETAIL_AMX)

// Whether this process may run AMX-BF16: the CPU has it (CPUID leaf 7: AMX-TILE and AMX-BF16),
// Linux grants the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, once per process: without it
// the first tile instruction faults), and MELD_NO_AMX is not set (which keeps the vdpbf16ps kernel,
// for comparisons).
inline bool amx_bf16_usable() {
  static const bool usable = [] {
    if (const char* off = std::getenv("MELD_NO_AMX"); off && *off && std::string_view(off) != "0")
      return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    constexpr unsigned amx_bf16 = 1u << 22, amx_tile = 1u << 24;
    if ((edx & amx_bf16) == 0 || (edx & amx_tile) == 0) return false;
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
  }();
  return usable;
}

struct bf16_amx_kernel : bf16_pair_packing<2> {
  static constexpr int mr = 32;
  static constexpr index_t tile_words = 16;  // pairs of k in a tile row: 64 bytes
  static constexpr index_t steps(index_t kc) {
    return (kc + 2 * tile_words - 1) / (2 * tile_words) * tile_words;
  }

  // Block sizes: tile loads take their operands from L2 fast enough that, unlike the vector
  // kernels' (gemm.hpp), the A micro-panel need not stay in L1, and long blocks of k save passes
  // over C. KC: the B micro-panel in a quarter of L2; MC: the A block in half of it; NC as the
  // vector kernels'. On the Xeon AMX VM (2 MiB L2: KC 2048, MC 256), one thread, best of 7
  // interleaved runs, GFLOP/s for KC 384 (the vector kernels' rule), 1024 and 2048: 512^3 343,
  // 374, 387; 1024^3 330, 389, 396; 2048^3 654, 864, 848.
  static const gemm_blocking& blocking() {
    static const gemm_blocking b = [] {
      const cache_sizes& caches = host_cache_sizes();
      const auto l2 = static_cast<index_t>(caches.l2);
      const index_t l3 = std::max(static_cast<index_t>(caches.l3), l2);
      const index_t kc = std::clamp<index_t>(l2 / 4 / (nr * 2) / 32 * 32, 256, 2048);
      const index_t mc = std::clamp<index_t>(l2 / 2 / (kc * 2) / mr * mr, 2 * mr, 64 * mr);
      const index_t nc = std::clamp<index_t>(l3 / 2 / (kc * 2) / nr * nr, 4 * nr, 4096);
      return gemm_blocking{mc, kc, nc};
    }();
    return b;
  }

  template <class E>
  static void pack_a(const E* a, index_t rs, index_t cs, index_t rows, index_t kc,
                     float /*alpha: applied to the accumulators*/, std::uint32_t* to) {
    const index_t n = steps(kc), blocks = n / tile_words;
    auto word = [&](index_t r, index_t q) -> std::uint32_t& {
      return to[(q / tile_words * mr + r) * tile_words + q % tile_words];
    };
    index_t r_done = 0;
    if (rs == 1 && cs != 1) {
      // Column-major A (a transposed view, as the output gradient of a weight gradient): 16 rows
      // of 16 pairs are built as 16 words of each pair (along the rows) and transposed in
      // registers.
      const index_t q_full = kc / 32 * 16;
      r_done = rows / 16 * 16;
      for (index_t r0 = 0; r0 < r_done; r0 += 16) {
        for (index_t q0 = 0; q0 < q_full; q0 += 16) {
          __m512i v[16];
          for (int q = 0; q < 16; ++q) v[q] = interleave16(a + r0 + 2 * (q0 + q) * cs, cs);
          transpose16x16(v);
          for (int r = 0; r < 16; ++r) _mm512_storeu_si512(&word(r0 + r, q0), v[r]);
        }
        for (index_t r = r0; r < r0 + 16; ++r)
          for (index_t q = q_full; q < n; ++q)
            word(r, q) = 2 * q < kc ? pair(a + r, cs, 2 * q, kc) : 0u;
      }
    }
    for (index_t r = r_done; r < mr; ++r) {
      if (r >= rows) {
        for (index_t t = 0; t < blocks; ++t)
          std::memset(&word(r, t * tile_words), 0, tile_words * sizeof(std::uint32_t));
        continue;
      }
      const E* row = a + r * rs;
      index_t q = 0;
      if (cs == 1) {
        // Whole tile rows: 32 contiguous elements, copied (bfloat16) or rounded (float) at once.
        for (; 2 * (q + tile_words) <= kc; q += tile_words) {
          std::uint32_t* out = &word(r, q);
          if constexpr (std::is_same_v<E, bfloat16>) {
            std::memcpy(out, row + 2 * q, 64);
          } else {
            const __m512bh w = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 2 * q + 16),
                                                   _mm512_loadu_ps(row + 2 * q));
            _mm512_storeu_si512(out, (__m512i)w);
          }
        }
      }
      for (; q < n; ++q) word(r, q) = 2 * q < kc ? pair(row, cs, 2 * q, kc) : 0u;
    }
  }

  template <class E>
  static void pack_b(const E* b, index_t rs, index_t cs, index_t cols, index_t kc,
                     std::uint32_t* to) {
    bf16_pair_packing::pack_b(b, rs, cs, cols, kc, to);
    const index_t filled = (kc + 1) / 2;
    std::memset(to + filled * nr, 0,
                std::size_t((steps(kc) - filled) * nr) * sizeof(std::uint32_t));
  }

  // C (MR x NR at c, row stride ldc) = alpha A_panel B_panel + beta C over `steps` pairs of k;
  // beta == 0 writes C without reading it. With alpha == 1 and beta 0 or 1 (a product, and its
  // later k blocks) the tiles load and store C directly; otherwise they go through a buffer.
  MELD_NOINLINE static void multiply(index_t steps, const std::uint32_t* a, const std::uint32_t* b,
                                     float alpha, float beta, float* c, index_t ldc) {
    const bool direct = alpha == 1.f && (beta == 0.f || beta == 1.f);
    const auto c_stride = static_cast<long>(ldc * sizeof(float));
    if (direct && beta == 1.f) {
      _tile_loadd(0, c, c_stride);
      _tile_loadd(1, c + 16, c_stride);
      _tile_loadd(2, c + 16 * ldc, c_stride);
      _tile_loadd(3, c + 16 * ldc + 16, c_stride);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    constexpr long a_stride = tile_words * sizeof(std::uint32_t), b_stride = nr * sizeof(float);
    for (index_t q = 0; q < steps; q += tile_words) {
      _tile_loadd(4, a, a_stride);
      _tile_loadd(5, a + 16 * tile_words, a_stride);
      _tile_loadd(6, b, b_stride);
      _tile_loadd(7, b + 16, b_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
      a += mr * tile_words;
      b += tile_words * nr;
    }
    if (direct) {
      _tile_stored(0, c, c_stride);
      _tile_stored(1, c + 16, c_stride);
      _tile_stored(2, c + 16 * ldc, c_stride);
      _tile_stored(3, c + 16 * ldc + 16, c_stride);
      return;
    }
    alignas(64) float tile[mr * nr];
    constexpr long t_stride = nr * sizeof(float);
    _tile_stored(0, tile, t_stride);
    _tile_stored(1, tile + 16, t_stride);
    _tile_stored(2, tile + 16 * nr, t_stride);
    _tile_stored(3, tile + 16 * nr + 16, t_stride);
    const __m512 scale = _mm512_set1_ps(alpha), keep = _mm512_set1_ps(beta);
    for (int r = 0; r < mr; ++r)
      unrolled<nv>([&](auto v) {
        float* out = c + r * ldc + v * 16;
        const __m512 ab = _mm512_mul_ps(scale, _mm512_load_ps(tile + r * nr + v * 16));
        _mm512_storeu_ps(out, beta == 0.f ? ab : _mm512_fmadd_ps(keep, _mm512_loadu_ps(out), ab));
      });
  }

  // The tile registers' shapes, every tile 16 rows of 64 bytes (palette 1): a thread's state, set
  // when a task of a product starts on the thread (gemm_blocked) rather than by every call of
  // multiply (which may be as short as one step of 32 k), and released when the task ends, which
  // marks the 8 KiB of tile data unused again: nothing to save on a context switch, and no other
  // code on the thread meets a configuration it did not set.
  static void begin_task() {
    struct alignas(64) tile_config {
      std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
      std::uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
      std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
    };
    static constexpr tile_config config{};
    _tile_loadconfig(&config);
  }
  static void end_task() { _tile_release(); }
};

#endif

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
