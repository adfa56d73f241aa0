// Splitting work over the thread pool: how many pieces an evaluation is worth, where their
// boundaries fall (never two threads in one cache line of the destination), and the loop that runs
// a plan's rows in those pieces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "../../core/gcc12_warnings.hpp"
#include "../../runtime/thread_pool.hpp"
#include "../plan.hpp"
#include "loops.hpp"
#include "simd.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// Work (elements x operation cost) below which an evaluation stays on the calling thread.
// Measured with benchmarks/threshold.cpp (target meld_bench_threshold) on a 2-vCPU
// VM: waking the pool costs 2-4 us, in which one core does ~40k simple element operations in
// cache.
inline constexpr index_t parallel_work_threshold = index_t(1) << 16;

MELD_INLINE index_t chunk_count(index_t elements, int cost) {
  const index_t work = elements * (cost + 2);
  // Small work is decided before touching the pool (a function-local static and a thread-local).
  if (work < 2 * parallel_work_threshold) return 1;
  const int threads = thread_pool::global().size();
  if (threads == 1 || thread_pool::in_task()) return 1;
  return std::clamp<index_t>(work / parallel_work_threshold, 1, index_t(threads) * 4);
}

// Boundary i of `chunks` pieces of [0, n), moved down to a cache-line boundary of the destination
// (which starts at byte address `dst`, elements of `elem` bytes) so that no two threads write
// one line.
inline index_t chunk_boundary(index_t i, index_t chunks, index_t n, const void* dst,
                              std::size_t elem) {
  if (i >= chunks) return n;
  const index_t per_line = std::max<index_t>(1, index_t(cache_line / elem));
  const index_t misalign =
      static_cast<index_t>(reinterpret_cast<std::uintptr_t>(dst) % cache_line) /
      static_cast<index_t>(elem);
  const index_t raw = n / chunks * i + (n % chunks) * i / chunks;
  return std::clamp<index_t>((raw + misalign) / per_line * per_line - misalign, 0, n);
}

// Runs fn over [0, n) of a plan in `chunks` pieces on the pool. Each piece gets its own copy of
// the row state `ctx` (cursors are trivially copyable; they are not shared between threads).
// Not a template: compiled once, whatever the expression.
void run_chunks(const plan_ref& p, index_t n, index_t chunks, const void* dst, std::size_t elem,
                row_fn fn, const void* ctx, std::size_t ctx_bytes);

}  // namespace meld::detail::cpu_eval

#if MELD_RUNTIME_DEFINITIONS
#include "chunks-inl.hpp"
#endif

MELD_GCC12_WARNINGS_ON
