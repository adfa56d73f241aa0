// Matrix products on the CPU: C = alpha A B + beta C for strided operands.
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
// are read in place, within the cache limits gemm_blocked states. A is scaled by alpha while it is
// packed; beta is applied once, by the first k block (the later ones add).
//
// Threads split the output into blocks of whole tiles and never split k, so each element of C is
// computed by the same operations in the same order whatever the thread count: results are
// bitwise identical for 1 or 64 threads.
//
// Integer types use the reference loop below, tiny products plain dot products; a row vector times
// a matrix (or a matrix times a column vector) streams the matrix unpacked, and a product with
// few columns and a long k (a weight gradient) is computed as blocks of dot products. With
// MELD_ENABLE_BLAS defined (the CMake option of that name), float and double go to the system BLAS
// when their strides allow it (gemm_blas.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <type_traits>
#include <vector>

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

// The reference: a cache-blocked i-k-j loop whose inner loop runs along contiguous rows of B and
// C (vectorized by the compiler), with rows of C split over the thread pool. Any strides, any type.
template <class T>
void gemm_reference(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta,
                    matrix_ref<T> c) {
  const index_t m = c.rows, n = c.cols, k = a.cols;
  constexpr index_t kc = 256;  // a block of k: rows of B that stay in cache
  auto rows = [&](index_t i0, index_t i1) {
    for (index_t i = i0; i < i1; ++i) {
      for (index_t j = 0; j < n; ++j) c(i, j) = beta == T(0) ? T(0) : beta * c(i, j);
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        const index_t p1 = std::min(k, p0 + kc);
        for (index_t p = p0; p < p1; ++p) {
          const T s = alpha * a(i, p);
          if (b.cs == 1 && c.cs == 1) {
            const T* brow = b.data + p * b.rs;
            T* crow = c.data + i * c.rs;
            for (index_t j = 0; j < n; ++j) crow[j] += s * brow[j];
          } else {
            for (index_t j = 0; j < n; ++j) c(i, j) += s * b(p, j);
          }
        }
      }
    }
  };
  const index_t work = m * n * std::max<index_t>(k, 1);
  const int threads = thread_pool::global().size();
  const index_t tasks = (threads == 1 || work < (index_t(1) << 18) || thread_pool::in_task())
                            ? 1
                            : std::min<index_t>(m, index_t(threads) * 4);
  if (tasks == 1) return rows(0, m);
  thread_pool::global().parallel_for(tasks,
                                     [&](index_t t) { rows(m * t / tasks, m * (t + 1) / tasks); });
}

// ---- the blocked GEMM ---------------------------------------------------------------------------

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
  bool a_in_place = false, b_in_place = false;
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

template <class T>
void gemm_tiny(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
  for (index_t i = 0; i < c.rows; ++i)
    for (index_t j = 0; j < c.cols; ++j) {
      T s = T(0);
      for (index_t p = 0; p < a.cols; ++p) s += a(i, p) * b(p, j);
      c(i, j) = beta == T(0) ? alpha * s : alpha * s + beta * c(i, j);
    }
}

// ---- a row vector times a matrix ----------------------------------------------------------------

// c (1 x n) = alpha a (1 x k) b (k x n) + beta c when b has a unit stride: bound by reading b once,
// so it is streamed in place, not packed (a 1-row tile would waste most of the micro-kernel).
//   rows of b contiguous:    c += x_p b[p, :], four rows at a time, over fixed chunks of columns
//   columns of b contiguous: c_j = x . b[:, j], with four vector accumulators
// x = alpha a, copied contiguous. Chunks are fixed, so each c_j sees the same operations in the
// same order whatever the thread count.
template <class T>
void gemm_row_vector(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c,
                     int threads) {
  using V = xsimd::batch<T, simd_arch>;
  constexpr index_t W = static_cast<index_t>(V::size);
  const index_t k = a.cols, n = c.cols;
  T* x = gemm_workspace::local().get<T>(k);
  for (index_t p = 0; p < k; ++p) x[p] = alpha * a(0, p);
  auto store = [&](index_t j, T value) {
    T& to = c(0, j);
    to = beta == T(0) ? value : beta * to + value;
  };

  constexpr index_t chunk = 512;  // columns per task: a chunk of accumulators stays in L1
  const index_t chunks = ceil_div(n, chunk);
  auto columns = [&](index_t q) {
    const index_t j0 = q * chunk, width = std::min(chunk, n - j0), vec_end = width / W * W;
    if (b.cs == 1) {
      alignas(64) T acc[chunk];
      std::fill_n(acc, width, T(0));
      index_t p = 0;
      for (; p + 4 <= k; p += 4) {
        const T* r0 = b.data + p * b.rs + j0;
        const T* r1 = r0 + b.rs;
        const T* r2 = r1 + b.rs;
        const T* r3 = r2 + b.rs;
        const V x0(x[p]), x1(x[p + 1]), x2(x[p + 2]), x3(x[p + 3]);
        for (index_t j = 0; j < vec_end; j += W) {
          V s = V::load_aligned(acc + j);
          s = xsimd::fma(x0, V::load_unaligned(r0 + j), s);
          s = xsimd::fma(x1, V::load_unaligned(r1 + j), s);
          s = xsimd::fma(x2, V::load_unaligned(r2 + j), s);
          s = xsimd::fma(x3, V::load_unaligned(r3 + j), s);
          s.store_aligned(acc + j);
        }
        for (index_t j = vec_end; j < width; ++j)
          acc[j] = acc[j] + x[p] * r0[j] + x[p + 1] * r1[j] + x[p + 2] * r2[j] + x[p + 3] * r3[j];
      }
      for (; p < k; ++p) {
        const T* r0 = b.data + p * b.rs + j0;
        for (index_t j = 0; j < width; ++j) acc[j] += x[p] * r0[j];
      }
      for (index_t j = 0; j < width; ++j) store(j0 + j, acc[j]);
    } else {  // b.rs == 1
      const index_t k_end = k / (4 * W) * (4 * W);
      for (index_t j = j0; j < j0 + width; ++j) {
        const T* col = b.data + j * b.cs;
        V s0(T(0)), s1(T(0)), s2(T(0)), s3(T(0));
        for (index_t p = 0; p < k_end; p += 4 * W) {
          s0 = xsimd::fma(V::load_unaligned(x + p), V::load_unaligned(col + p), s0);
          s1 = xsimd::fma(V::load_unaligned(x + p + W), V::load_unaligned(col + p + W), s1);
          s2 = xsimd::fma(V::load_unaligned(x + p + 2 * W), V::load_unaligned(col + p + 2 * W), s2);
          s3 = xsimd::fma(V::load_unaligned(x + p + 3 * W), V::load_unaligned(col + p + 3 * W), s3);
        }
        alignas(64) T lanes[W];
        ((s0 + s1) + (s2 + s3)).store_aligned(lanes);
        T sum = T(0);
        for (index_t l = 0; l < W; ++l) sum += lanes[l];
        for (index_t p = k_end; p < k; ++p) sum += x[p] * col[p];
        store(j, sum);
      }
    }
  };
  const index_t tasks = threads > 1 ? std::min<index_t>(chunks, threads) : 1;
  if (tasks == 1) {
    for (index_t q = 0; q < chunks; ++q) columns(q);
  } else {
    thread_pool::global().parallel_for(tasks, [&](index_t t) {
      for (index_t q = chunks * t / tasks; q < chunks * (t + 1) / tasks; ++q) columns(q);
    });
  }
}

// ---- a thin product with a long k -----------------------------------------------------------

// The tile of gemm_dot: R rows of a times C columns of b, R C vector accumulators (plus R + 1
// vectors of operands) within the register file.
template <class T, class Arch = detail::simd_arch>
struct gemm_dot_tile {
  static constexpr int r = 4;
  static constexpr int c = gemm_tile<T, Arch>::wide_register_file ? 3 : 2;
};

// Whether gemm_dot should compute c = a b (after gemm's orientation): a's rows and b's columns
// contiguous along k, k long enough to fill vectors, and c narrow: n <= NR / 2, where the packed
// kernel's NR-wide tiles would compute at least as many columns as it keeps, or n < NR with at
// most MR rows, where each packed panel of B would serve a single tile. Measured on one core of
// the Xeon AMX VM (NR = 64, MR = 6), dot products against the packed kernel: m x n x k = 6 x 25 x
// 10192 (the weight gradient of a 6-channel 5 x 5 convolution) 85 against 366 us, 6 x 63 x 5000 125
// against 265, 64 x 32 x 5000 468 against 541, 256 x 20 x 1500 373 against 444; but 64 x 48 x 5000
// 786 against 641 and 16 x 150 x 1700 230 against 213.
template <class T>
bool gemm_dot_fits(matrix_ref<const T> a, matrix_ref<const T> b, index_t n, index_t k) {
  using V = xsimd::batch<T, simd_arch>;
  using tile = gemm_tile<T>;
  const bool narrow = n <= tile::nr / 2 || (n < tile::nr && a.rows <= tile::mr);
  return a.cs == 1 && b.rs == 1 && narrow && k >= 4 * static_cast<index_t>(V::size);
}

// c (m x n) = alpha a b + beta c for a narrow c and a long k, with a's rows and b's columns
// contiguous along k (gemm_dot_fits): e.g. the weight gradient of a convolution with few input
// channels (conv 1 -> 20, 3 x 3: dW {20 x 9} = g {20 x 676 batch} col^T). There the packed kernel
// computes 64-wide tiles of which 9 columns are kept, after packing col^T into panels that are
// mostly zeros. Here each c_ij is a dot product of two contiguous rows, computed R x C at a time
// (R + C vector loads for R C fused multiply-adds, in vector accumulators), over blocks of k that
// stay in L2 while every tile passes over them; each tile's accumulators are kept between the
// blocks. Threads split the tiles, never k: the same bits for any thread count.
template <class T>
void gemm_dot(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c,
              int threads) {
  using V = xsimd::batch<T, simd_arch>;
  constexpr index_t W = static_cast<index_t>(V::size);
  constexpr int R = gemm_dot_tile<T>::r, C = gemm_dot_tile<T>::c;
  const index_t m = c.rows, n = c.cols, k = a.cols;
  const index_t k_vec = k / W * W;  // the vectorized part; the rest is added per element
  const index_t row_tiles = ceil_div(m, R), col_tiles = ceil_div(n, C),
                tiles = row_tiles * col_tiles;
  // k in blocks whose rows of a and b (m + n of them) take half of L2.
  const auto l2 = static_cast<index_t>(host_cache_sizes().l2);
  const index_t kb =
      std::max<index_t>(W * 64, l2 / 2 / (static_cast<index_t>(sizeof(T)) * (m + n)) / W * W);
  // The accumulators of every tile between blocks (R C vectors each), then R C lane sums.
  T* saved = gemm_workspace::local().get<T>(tiles * R * C * W);

  auto run_tiles = [&](index_t t0, index_t t1) {
    for (index_t p0 = 0; p0 < k_vec; p0 += kb) {
      const index_t p1 = std::min(k_vec, p0 + kb);
      for (index_t t = t0; t < t1; ++t) {
        const index_t i0 = (t / col_tiles) * R, j0 = (t % col_tiles) * C;
        // Rows and columns past the edge repeat the last one (computed, never stored).
        const T* ar[R];
        const T* bc[C];
        unrolled<R>([&](auto r) { ar[r] = a.data + std::min<index_t>(i0 + r, m - 1) * a.rs; });
        unrolled<C>([&](auto q) { bc[q] = b.data + std::min<index_t>(j0 + q, n - 1) * b.cs; });
        T* keep = saved + t * (R * C * W);
        V acc[R][C];
        unrolled<R>([&](auto r) {
          unrolled<C>([&](auto q) {
            acc[r][q] = p0 == 0 ? V(T(0)) : V::load_aligned(keep + (r * C + q) * W);
          });
        });
        for (index_t p = p0; p < p1; p += W) {
          V bv[C];
          unrolled<C>([&](auto q) { bv[q] = V::load_unaligned(bc[q] + p); });
          unrolled<R>([&](auto r) {
            const V av = V::load_unaligned(ar[r] + p);
            unrolled<C>([&](auto q) { acc[r][q] = xsimd::fma(av, bv[q], acc[r][q]); });
          });
        }
        unrolled<R>([&](auto r) {
          unrolled<C>([&](auto q) { acc[r][q].store_aligned(keep + (r * C + q) * W); });
        });
      }
    }
    for (index_t t = t0; t < t1; ++t) {
      const index_t i0 = (t / col_tiles) * R, j0 = (t % col_tiles) * C;
      const T* keep = saved + t * (R * C * W);
      for (index_t r = 0; r < R && i0 + r < m; ++r)
        for (index_t q = 0; q < C && j0 + q < n; ++q) {
          T s = T(0);
          if (k_vec > 0)
            for (index_t l = 0; l < W; ++l) s += keep[(r * C + q) * W + l];
          const T* ai = a.data + (i0 + r) * a.rs;
          const T* bj = b.data + (j0 + q) * b.cs;
          for (index_t p = k_vec; p < k; ++p) s += ai[p] * bj[p];
          T& to = c(i0 + r, j0 + q);
          to = beta == T(0) ? alpha * s : alpha * s + beta * to;
        }
    }
  };
  const index_t tasks = threads > 1 ? std::min<index_t>(tiles, threads) : 1;
  if (tasks == 1) return run_tiles(0, tiles);
  thread_pool::global().parallel_for(
      tasks, [&](index_t t) { run_tiles(tiles * t / tasks, tiles * (t + 1) / tasks); });
}

}  // namespace meld::detail::cpu_eval

#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
#include "gemm_blas.hpp"
#endif

namespace meld::detail::cpu_eval {

// Whether the packed kernel should compute c = a b (m x n, over k) as c^T = b^T a^T: a c narrower
// than a tile (n < NR) wastes most of each tile's columns, and the transpose puts n into the tiles'
// MR rows instead. Taken when that at least halves the tile area computed, over one k block at
// most: with a longer k, gemm_dot's dot products (where they fit) do better. Measured on one core
// of the Xeon AMX VM (m = 256): n = 10 and 16, k = 128: 80 and 110 GFLOP/s transposed against 32
// and 35 as dot products; k = 512: 81 and 111 against 68 and 73; k = 4096: 56 and 80 against 65
// and 83. n = 32, k = 128 (not a dot product): 157 against 106 in 64-wide tiles.
template <class T>
bool gemm_transposed_fits(index_t m, index_t n, index_t k) {
  using tile = gemm_tile<T>;
  const auto area = [](index_t rows, index_t cols) {
    return ceil_div(rows, tile::mr) * tile::mr * ceil_div(cols, tile::nr) * tile::nr;
  };
  return n < tile::nr && k <= default_gemm_blocking<T>().kc && 2 * area(n, m) <= area(m, n);
}

// c = alpha a b + beta c for float or double with m, n, k > 0 and alpha != 0, c storing rows
// with unit stride where it can.
template <class T>
void gemm_oriented(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
  if (gemm_blas(alpha, a, b, beta, c)) return;
#endif
  const index_t m = c.rows, n = c.cols, k = a.cols;
  const index_t work = m * n * k;
  if (work < gemm_small_work) return gemm_tiny(alpha, a, b, beta, c);
  const int threads =
      work < gemm_parallel_work || thread_pool::in_task() ? 1 : thread_pool::global().size();
  if (m == 1 && (b.cs == 1 || b.rs == 1)) return gemm_row_vector(alpha, a, b, beta, c, threads);
  if (gemm_transposed_fits<T>(m, n, k))
    return gemm_blocked<packed_kernel<T>>(alpha, b.transposed(), a.transposed(), beta,
                                          c.transposed(), default_gemm_blocking<T>(), threads);
  if (gemm_dot_fits(a, b, n, k)) return gemm_dot(alpha, a, b, beta, c, threads);
  gemm_blocked<packed_kernel<T>>(alpha, a, b, beta, c, default_gemm_blocking<T>(), threads);
}

// The entry point the executor calls: c = alpha a b + beta c. c does not overlap a or b. With
// alpha == 0 (or k == 0), a and b are not read; with beta == 0, c is not read (BLAS semantics).
template <class T>
void gemm(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
  const index_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) return gemm_scale(beta, c);
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    gemm_reference(alpha, a, b, beta, c);
  } else {
    // The kernel stores rows of C with vector instructions: when C is column-major, compute the
    // transposed product C^T = B^T A^T instead (nothing moves). A column vector C becomes a row.
    if ((c.cs != 1 && c.rs == 1) || (n == 1 && m > 1))
      gemm_oriented(alpha, b.transposed(), a.transposed(), beta, c.transposed());
    else
      gemm_oriented(alpha, a, b, beta, c);
  }
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
