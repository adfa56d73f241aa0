// The definitions of chunks.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by chunks.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "chunks.hpp"

namespace meld::detail::cpu_eval {

MELD_RUNTIME void run_chunks(const plan_ref& p, index_t n, index_t chunks, const void* dst,
                             std::size_t elem, row_fn fn, const void* ctx, std::size_t ctx_bytes) {
  auto run = [&](index_t begin, index_t end) {
    alignas(64) unsigned char local[512];
    std::unique_ptr<unsigned char[]> big(ctx_bytes > sizeof(local) ? new unsigned char[ctx_bytes]
                                                                   : nullptr);
    void* copy = big ? static_cast<void*>(big.get()) : static_cast<void*>(local);
    std::memcpy(copy, ctx, ctx_bytes);
    run_rows(p, begin, end, fn, copy);
  };
  if (chunks == 1) return run(0, n);
  thread_pool::global().parallel_for(chunks, [&](index_t i) {
    run(chunk_boundary(i, chunks, n, dst, elem), chunk_boundary(i + 1, chunks, n, dst, elem));
  });
}

}  // namespace meld::detail::cpu_eval
