// The CPU loop of the backends' generate operation: out[i] = g(i) over [0, n), split over the
// thread pool in contiguous pieces (a draw of the counter-based generator costs about as much as
// 20 simple element operations, which decides when the pool is worth waking).
#pragma once

#include "../../core/config.hpp"
#include "../../runtime/thread_pool.hpp"
#include "chunks.hpp"

namespace meld::detail::cpu_eval {

// The loop itself, not inlined: the compiler vectorizes a draw into a large body, which is then
// compiled once for the serial and the parallel path.
template <class V, class G>
MELD_NOINLINE void generate_range(V* out, index_t begin, index_t end, const G& g) {
  for (index_t i = begin; i < end; ++i) out[i] = static_cast<V>(g(i));
}

#if defined(MELD_COMPILED_RUNTIME)
}  // namespace meld::detail::cpu_eval
namespace meld::detail {
template <class T>
struct uniform_draw;  // tensor/random.hpp
template <class T>
struct normal_draw;
}  // namespace meld::detail
namespace meld::detail::cpu_eval {
// The draws of meld::uniform and meld::normal in float and double: compiled in the runtime library.
extern template void generate_range(float*, index_t, index_t, const uniform_draw<float>&);
extern template void generate_range(double*, index_t, index_t, const uniform_draw<double>&);
extern template void generate_range(float*, index_t, index_t, const normal_draw<float>&);
extern template void generate_range(double*, index_t, index_t, const normal_draw<double>&);
#endif

template <class V, class G>
void generate(V* out, index_t n, const G& g) {
  const index_t chunks = chunk_count(n, 20);
  if (chunks == 1) return generate_range(out, 0, n, g);
  thread_pool::global().parallel_for(chunks, [&](index_t c) {
    generate_range(out, chunk_boundary(c, chunks, n, out, sizeof(V)),
                   chunk_boundary(c + 1, chunks, n, out, sizeof(V)), g);
  });
}

}  // namespace meld::detail::cpu_eval
