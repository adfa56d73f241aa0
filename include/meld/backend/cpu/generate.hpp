// The CPU loop of the backends' generate operation: out[i] = g(i) over [0, n), split over the
// thread pool in contiguous pieces (a draw of the counter-based generator costs about as much as
// 20 simple element operations, which decides when the pool is worth waking).
#pragma once

#include "../../core/config.hpp"
#include "chunks.hpp"
#include "thread_pool.hpp"

namespace meld::detail::cpu_eval {

template <class V, class G>
void generate(V* out, index_t n, const G& g) {
  auto run = [&](index_t begin, index_t end) {
    for (index_t i = begin; i < end; ++i) out[i] = static_cast<V>(g(i));
  };
  const index_t chunks = chunk_count(n, 20);
  if (chunks == 1) return run(0, n);
  thread_pool::global().parallel_for(chunks, [&](index_t c) {
    run(chunk_boundary(c, chunks, n, out, sizeof(V)),
        chunk_boundary(c + 1, chunks, n, out, sizeof(V)));
  });
}

}  // namespace meld::detail::cpu_eval
