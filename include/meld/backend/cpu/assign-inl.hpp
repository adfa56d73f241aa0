// The definitions of assign.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by assign.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "assign.hpp"

namespace meld::detail::cpu_eval {

[[gnu::cold]] MELD_ONCE MELD_RUNTIME void assign_cursor(char* dst, std::size_t elem,
                                                        const shape_t& shape,
                                                        const strides_t& dst_strides,
                                                        const planned_source& src,
                                                        const leaf_info* leaves, int count) {
  const int n = 1 + count;
  // Operands beyond a small number live on the heap.
  constexpr int small = 8;
  char* base_small[small];
  std::size_t elem_small[small];
  strides_t in_small[small];
  index_t strides_small[small * max_rank] = {};
  index_t inner_small[small];
  access modes_small[small];
  std::unique_ptr<char*[]> base_big;
  std::unique_ptr<std::size_t[]> elem_big;
  std::unique_ptr<strides_t[]> in_big;
  std::unique_ptr<index_t[]> strides_big, inner_big, elem_index_big;
  std::unique_ptr<access[]> modes_big;
  char** base = base_small;
  std::size_t* elems = elem_small;
  strides_t* in = in_small;
  index_t* strides = strides_small;
  index_t* inner = inner_small;
  access* modes = modes_small;
  if (n > small) {
    base = (base_big = std::make_unique<char*[]>(std::size_t(n))).get();
    elems = (elem_big = std::make_unique<std::size_t[]>(std::size_t(n))).get();
    in = (in_big = std::make_unique<strides_t[]>(std::size_t(n))).get();
    strides = (strides_big = std::make_unique<index_t[]>(std::size_t(n) * max_rank)).get();
    inner = (inner_big = std::make_unique<index_t[]>(std::size_t(n))).get();
    modes = (modes_big = std::make_unique<access[]>(std::size_t(n))).get();
  }
  base[0] = dst;
  elems[0] = elem;
  in[0] = dst_strides;
  modes[0] = access::write;
  for (int k = 1; k < n; ++k) {
    const leaf_info& leaf = leaves[k - 1];
    base[k] = const_cast<char*>(leaf.data);
    elems[k] = leaf.elem;
    in[k] = broadcast_strides(leaf.shape, leaf.strides, shape);
    modes[k] = access::read;
  }
  index_t plan_shape[max_rank] = {1};
  const int rank = make_plan_into(n, shape, elems, in, false, plan_shape, strides, inner);
  // plan_ref wants element sizes as index_t
  index_t elem_index_small[small];
  index_t* elem_index = elem_index_small;
  if (n > small) elem_index = (elem_index_big = std::make_unique<index_t[]>(std::size_t(n))).get();
  for (int k = 0; k < n; ++k) elem_index[k] = static_cast<index_t>(elems[k]);
  const plan_ref p{rank, plan_shape, n, strides, base, elem_index, modes};
  const index_t size = shape.product();

  const index_t chunks = chunk_count(size, src.cost);
  // Streaming stores only where the driver passes the destination's rows in place.
  const bool dst_rows_contiguous = strides[rank - 1] == index_t(elem);
  const row_fn fn = dst_rows_contiguous && src.stream && size * index_t(elem) >= stream_store_bytes
                        ? src.stream
                        : src.row;
  run_chunks(p, size, chunks, dst, elem, fn, src.ctx, src.ctx_bytes);
}

[[gnu::cold]] MELD_ONCE MELD_RUNTIME void assign_planned(char* dst, std::size_t elem,
                                                         const shape_t& shape,
                                                         const strides_t& strides,
                                                         const planned_source& src,
                                                         const leaf_info* leaves, int count) {
  const leaf_info out{dst, shape, strides, elem};
  if (!needs_temporary(out, leaves, count))
    return assign_cursor(dst, elem, shape, strides, src, leaves, count);
  struct free_aligned {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(cache_line)); }
  };
  const std::unique_ptr<char, free_aligned> tmp(static_cast<char*>(
      ::operator new(std::size_t(shape.product()) * elem, std::align_val_t(cache_line))));
  const strides_t contiguous = row_major_strides(shape);
  assign_cursor(tmp.get(), elem, shape, contiguous, src, leaves, count);
  const auto bytes = static_cast<index_t>(elem);
  const planned_source copy{&copy_row, nullptr, &bytes, sizeof(bytes), 1};
  const leaf_info from{tmp.get(), shape, contiguous, elem};
  assign_cursor(dst, elem, shape, strides, copy, &from, 1);
}

}  // namespace meld::detail::cpu_eval
