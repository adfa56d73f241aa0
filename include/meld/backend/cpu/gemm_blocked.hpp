// The blocked, packed matrix product on the CPU (gemm.hpp chooses among it and the unpacked
// products): C = alpha A B + beta C for strided operands.
//
// float and double go through a blocked, packed GEMM of the kind BLIS describes (Van Zee and van de
// Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS Functionality", 2015):
//
//   for jc over n in blocks of NC          B block (KC x NC) lives in L3, shared by all threads
//     for pc over k in blocks of KC
//       pack B[pc:+KC, jc:+NC] into NR-wide panels                        (in parallel)
//       for each task of output rows (in parallel), in blocks of MC rows:
//         pack A[ic:+MC, pc:+KC] into MR-tall panels, times alpha          A block lives in L2
//         for jr over the block's NR panels                                B panel lives in L1
//           for ir over the block's MR panels
//             micro-kernel: the MR x NR tile of C += A panel x B panel     C tile in registers
//
// Packing makes every operand layout (row-major, transposed, any strides, even negative or zero)
// run the same micro-kernel on contiguous panels. An operand already laid out as the kernel reads
// it is not copied: A with contiguous rows or columns (when alpha is 1) and B with contiguous rows
// are read in place, within the cache limits gemm_blocked states; the bfloat16 `vdpbf16ps` kernel
// reads bfloat16 A with contiguous rows in place (B it always packs, k in pairs). A is scaled by
// alpha while it is packed; beta is applied once, by the first k block (the later ones add).
//
// Threads split the output into blocks of whole tiles and never split k, so each element of C is
// computed by the same operations in the same order whatever the thread count: results are
// bitwise identical for 1 or 64 threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "../../core/bfloat16.hpp"
#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "../../runtime/thread_pool.hpp"
#include "cache_sizes.hpp"
#include "gemm_kernel.hpp"
#include "memory.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// A strided matrix: element (i, j) at data[i * rs + j * cs].
template <class T>
struct matrix_ref {
  T* data;
  index_t rows, cols;
  index_t rs, cs;
  MELD_INLINE T& operator()(index_t i, index_t j) const { return data[i * rs + j * cs]; }
  matrix_ref transposed() const { return {data, cols, rows, cs, rs}; }
};

// C = beta C, where beta == 0 writes zeros (NaN in C included): the product of an empty k.
template <class T>
void gemm_scale(T beta, matrix_ref<T> c) {
  for (index_t i = 0; i < c.rows; ++i)
    for (index_t j = 0; j < c.cols; ++j) c(i, j) = beta == T(0) ? T(0) : beta * c(i, j);
}

// Cache blocking: MC rows of A and KC columns (a KC x NC block of B) per step.
struct gemm_blocking {
  index_t mc, kc, nc;
};

// The block sizes for a tile shape and the host's caches. The loop order is BLIS's (a KC x NR
// micro-panel of B is reused by every MR x KC micro-panel of A of a block), with KC chosen larger
// than BLIS's analytical model (Low et al., 2016) would, which keeps the B micro-panel in L1.
// Measured on the AVX-512 Xeon of benchmarks/RESULTS.md (48 KiB L1d, 2 MiB L2), single-threaded
// 2048 x 2048 floats: KC = 192 (B micro-panel in L1) 118 GFLOP/s, 384: 128, 768: 140, 1024: 143,
// 1536: 141. Each k block adds one pass of loads and stores over C, which costs more than
// streaming B's micro-panel from L2 (about 21 bytes per cycle, well within L2's bandwidth).
//   KC: the MR x KC micro-panel of A in half of L1, the KC x NR micro-panel of B in a quarter of
//   L2. MC: the MC x KC block of A in L2 (MC barely mattered: within 3 % from 250 to 1000 rows).
//   NC: the KC x NC block of B in half of L3 (shared), at most 4096 columns (the buffer's size).
// This gives KC = 1024, MC = 510, NC = 4096 for floats there, and KC = 672 for floats on a core
// with 32 KiB L1d and AVX2.
template <class T, class Tile>
gemm_blocking make_gemm_blocking(const cache_sizes& caches) {
  const auto s = static_cast<index_t>(sizeof(T));
  auto round_down = [](index_t v, index_t unit, index_t lo, index_t hi) {
    return std::clamp(v / unit * unit, lo, hi);
  };
  const index_t l1 = static_cast<index_t>(caches.l1), l2 = static_cast<index_t>(caches.l2);
  const index_t l3 = std::max(static_cast<index_t>(caches.l3), l2);
  const index_t kc =
      round_down(std::min(l1 / 2 / (Tile::mr * s), l2 / 4 / (Tile::nr * s)), 16, 128, 2048);
  const index_t mc = round_down(l2 / (kc * s), Tile::mr, Tile::mr * 4, Tile::mr * 512);
  const index_t nc = round_down(l3 / 2 / (kc * s), Tile::nr, Tile::nr * 4, 4096);
  return {mc, kc, nc};
}

template <class T, class Tile = gemm_tile<T>>
const gemm_blocking& default_gemm_blocking() {
  static const gemm_blocking blocking = make_gemm_blocking<T, Tile>(host_cache_sizes());
  return blocking;
}

// A per-thread buffer for packed panels, grown on demand and kept for the next product (fresh
// memory costs a page fault per 4 KiB on first touch: runtime/host_memory.hpp). Its size is
// bounded by the block sizes: a KC x NC block of B and, per thread, an MC x KC block of A.
class gemm_workspace {
 public:
  gemm_workspace() = default;
  gemm_workspace(const gemm_workspace&) = delete;
  gemm_workspace& operator=(const gemm_workspace&) = delete;
  ~gemm_workspace() { std::free(data_); }

  template <class T>
  T* get(index_t elements) {
    const std::size_t bytes = static_cast<std::size_t>(elements) * sizeof(T);
    if (bytes > bytes_) {
      std::free(data_);
      data_ = nullptr;
      bytes_ = 0;
      data_ = host_allocate(bytes);  // aligned to a cache line at least; throws when it cannot
      bytes_ = bytes;
    }
    return static_cast<T*>(data_);
  }

  // The calling thread's workspace (a product's tasks use their caller's).
  static gemm_workspace& local() {
    thread_local gemm_workspace w;
    return w;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

inline index_t ceil_div(index_t a, index_t b) {
  return (a + b - 1) / b;
}

// C = alpha A B + beta C with a packed micro-kernel (Kernel: packed_kernel in gemm_kernel.hpp, or
// gemm_bf16_dot.hpp's or gemm_bf16_amx.hpp's), on `threads` threads of the global pool. m, n, k >
// 0; alpha != 0.
template <class Kernel, class SA, class SB, class T>
void gemm_blocked(T alpha, matrix_ref<const SA> a, matrix_ref<const SB> b, T beta, matrix_ref<T> c,
                  const gemm_blocking& blocking, int threads) {
  constexpr int MR = Kernel::mr, NR = Kernel::nr;
  using P = typename Kernel::packed;
  const index_t m = c.rows, n = c.cols, k = a.cols;
  const index_t kc_max = std::min(blocking.kc, k);
  const index_t nc_max = std::min(blocking.nc, ceil_div(n, NR) * NR);
  const index_t mc_panels = std::max<index_t>(1, blocking.mc / MR);
  const index_t m_panels = ceil_div(m, MR);

  // Tasks: mt blocks of whole row panels (each at most MC rows, so that its A block fits in L2;
  // a multiple of the thread count, so that the threads get equal shares) times nt blocks of
  // column panels (more than one only when there are fewer row panels than threads).
  index_t mt = ceil_div(m_panels, mc_panels);
  if (threads > 1) mt = std::min(m_panels, ceil_div(mt, threads) * threads);
  const index_t nt_max = threads > 1 && mt < threads ? ceil_div(threads, mt) : 1;

  // Every buffer exists before C is written, so that a failed allocation leaves C as it was: the
  // packed B block, shared by the tasks, and a packed A block for each task that can run at once
  // (a task takes a free one when it starts).
  thread_pool& pool = thread_pool::global();
  const index_t slots = threads > 1 ? std::min<index_t>(mt * nt_max, pool.size()) : 1;
  constexpr index_t align = 64 / sizeof(P);
  const index_t steps_max = Kernel::steps(kc_max);  // packed steps of a panel: k, or k's pairs
  const index_t b_size = steps_max * nc_max;
  const index_t a_size = ceil_div(std::min(mc_panels, m_panels) * MR * steps_max, align) * align;
  P* packed_b = gemm_workspace::local().get<P>(b_size + slots * a_size);
  std::vector<std::atomic<bool>> slot_taken(static_cast<std::size_t>(slots));

  // Operands the kernel reads where they are instead of packing them (packing is up to a sixth
  // of a training step's products): A when alpha is 1 and its rows or columns are contiguous, B
  // when its rows are. An operand whose k steps are rows of memory (B, or A with contiguous
  // columns) is read in place while the rows a k block spans fit in a quarter of L2, the share of
  // a packed B micro-panel: with longer or power-of-two strides its rows fall on few cache sets
  // and pages, and each row panel of A that reads it again misses (in place ran at 40 % of the
  // packed speed for n = 1024 squared). B is read in place whatever its span when at most three
  // row panels read it: a convolution's forward product, W {out, in kh kw} times the im2col
  // matrix, for 6 and 16 output channels (LeNet-5's) 1.6 - 2.2 x faster; with a 16 KiB row
  // stride in place was 1.3 x faster for 18 rows, even for 30 and slower from 48 (the Xeon AMX
  // VM, one core). Panels at the edge (fewer than MR rows or NR columns) are still packed, with
  // zeros past the edge.
  constexpr bool reads_in_place = requires {
    &Kernel::multiply_in_place;
  };
  // A bfloat16 kernel reads bfloat16 A with contiguous rows in place when every block's k is whole
  // pairs of the rows (alpha is applied to its accumulators).
  constexpr bool reads_pairs_in_place = std::is_same_v<SA, bfloat16> && requires {
    Kernel::reads_bfloat16_a_in_place;
  };
  bool a_in_place = false, b_in_place = false;
  if constexpr (reads_pairs_in_place) a_in_place = a.cs == 1 && k % 2 == 0 && kc_max % 2 == 0;
  if constexpr (reads_in_place) {
    const auto spans_little = [&](index_t row_stride) {
      return static_cast<std::size_t>(std::abs(row_stride) * kc_max) * sizeof(T) <=
             host_cache_sizes().l2 / 4;
    };
    a_in_place = alpha == T(1) && (a.cs == 1 || (a.rs == 1 && spans_little(a.cs)));
    b_in_place = b.cs == 1 && (m <= 3 * MR || spans_little(b.rs));
  }

  for (index_t jc = 0; jc < n; jc += nc_max) {
    const index_t nc = std::min(nc_max, n - jc);
    const index_t n_panels = ceil_div(nc, NR);
    const index_t nt = threads > 1 && mt < threads ? std::min(n_panels, ceil_div(threads, mt)) : 1;
    for (index_t pc = 0; pc < k; pc += kc_max) {
      const index_t kc = std::min(kc_max, k - pc), steps = Kernel::steps(kc);
      const T beta_now = pc == 0 ? beta : T(1);  // the first k block applies beta, later ones add

      const index_t pack_tasks = std::min<index_t>(n_panels, threads);
      auto pack_b = [&](index_t t) {
        for (index_t q = n_panels * t / pack_tasks; q < n_panels * (t + 1) / pack_tasks; ++q) {
          const index_t j = jc + q * NR;
          if (b_in_place && n - j >= NR) continue;
          Kernel::pack_b(b.data + pc * b.rs + j * b.cs, b.rs, b.cs, std::min<index_t>(NR, n - j),
                         kc, packed_b + q * NR * steps);
        }
      };
      if (pack_tasks == 1)
        pack_b(0);
      else
        pool.parallel_for(pack_tasks, pack_b);

      auto block = [&](index_t t) {
        const index_t im = t / nt, in = t % nt;
        const index_t p_end = m_panels * (im + 1) / mt;
        const index_t q0 = n_panels * in / nt, q1 = n_panels * (in + 1) / nt;
        index_t slot = 0;
        for (bool free = false; !slot_taken[std::size_t(slot)].compare_exchange_strong(
                 free, true, std::memory_order_acquire);
             free = false)
          slot = (slot + 1) % slots;
        P* packed_a = packed_b + b_size + slot * a_size;
        // A kernel with per-thread state (AMX's tile configuration) sets it up for the task.
        constexpr bool has_task_state = requires {
          Kernel::begin_task();
        };
        if constexpr (has_task_state) Kernel::begin_task();
        for (index_t p0 = m_panels * im / mt; p0 < p_end; p0 += mc_panels) {
          const index_t p1 = std::min(p_end, p0 + mc_panels);
          for (index_t p = p0; p < p1; ++p) {
            const index_t i = p * MR;
            if (a_in_place && m - i >= MR) continue;
            Kernel::pack_a(a.data + i * a.rs + pc * a.cs, a.rs, a.cs, std::min<index_t>(MR, m - i),
                           kc, alpha, packed_a + (p - p0) * MR * steps);
          }
          for (index_t q = q0; q < q1; ++q) {
            const index_t j = jc + q * NR, cols = std::min<index_t>(NR, n - j);
            const P* panel_b = packed_b + q * NR * steps;
            for (index_t p = p0; p < p1; ++p) {
              const index_t i = p * MR, rows = std::min<index_t>(MR, m - i);
              const P* panel_a = packed_a + (p - p0) * MR * steps;
              T* tile_c = c.data + i * c.rs + j * c.cs;
              // C's tile = the A panel times the B panel (+ beta C) into `to`, row stride ld.
              auto multiply = [&](T beta_to, T* to, index_t ld) {
                if constexpr (reads_in_place) {
                  const bool a_here = a_in_place && rows == MR, b_here = b_in_place && cols == NR;
                  Kernel::multiply_in_place(cols, steps,
                                            a_here ? a.data + i * a.rs + pc * a.cs : panel_a,
                                            a_here ? a.rs : 1, a_here ? a.cs : MR,
                                            b_here ? b.data + pc * b.rs + j : panel_b,
                                            b_here ? b.rs : NR, beta_to, to, ld);
                } else {
                  if constexpr (reads_pairs_in_place) {
                    if (a_in_place && rows == MR) {
                      Kernel::multiply(steps, a.data + i * a.rs + pc, a.rs, panel_b, alpha, beta_to,
                                       to, ld);
                      return;
                    }
                  }
                  Kernel::multiply(steps, panel_a, panel_b, alpha, beta_to, to, ld);
                }
              };
              if (rows == MR && cols == NR && c.cs == 1) {
                multiply(beta_now, tile_c, c.rs);
                continue;
              }
              // An edge tile, or C without unit column stride: compute the whole tile aside and
              // keep the part inside C.
              alignas(64) T tile[MR * NR];
              multiply(T(0), tile, NR);
              for (index_t r = 0; r < rows; ++r)
                for (index_t jj = 0; jj < cols; ++jj) {
                  T& to = tile_c[r * c.rs + jj * c.cs];
                  to = beta_now == T(0) ? tile[r * NR + jj] : beta_now * to + tile[r * NR + jj];
                }
            }
          }
        }
        if constexpr (has_task_state) Kernel::end_task();
        slot_taken[std::size_t(slot)].store(false, std::memory_order_release);
      };
      if (threads == 1) {
        for (index_t t = 0; t < mt * nt; ++t) block(t);
      } else {
        pool.parallel_for(mt * nt, block);
      }
    }
  }
}

// Products below this many multiply-adds (m n k) stay on one thread: waking the pool costs a few
// microseconds, in which one core does ~2^17 multiply-adds.
inline constexpr index_t gemm_parallel_work = index_t(1) << 17;

// Products below this many multiply-adds use plain dot products: packing does not pay there
// (measured: the packed kernel is already 2x faster at 8 x 8 x 8, even with B transposed).
inline constexpr index_t gemm_small_work = index_t(1) << 9;

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
