// The definitions of loops.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by loops.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "loops.hpp"

namespace meld::detail::cpu_eval {

MELD_ONCE MELD_RUNTIME void copy_elements(char* to, index_t to_stride, const char* from,
                                          index_t from_stride, index_t n, index_t elem) {
  auto loop = [&](auto size) {
    if (from_stride == 0 && to_stride == index_t(decltype(size)::value)) {
      // Replicating one value (a broadcast operand) into a contiguous buffer: a fill, which the
      // compiler vectorizes (the element-by-element memcpy loop ran at a few cycles an element:
      // 10 % of a LeNet step, replicating each bias of a convolution over a row).
      constexpr std::size_t bytes = decltype(size)::value;
      using word = std::conditional_t<
          bytes == 8, std::uint64_t,
          std::conditional_t<bytes == 4, std::uint32_t,
                             std::conditional_t<bytes == 2, std::uint16_t, std::uint8_t>>>;
      word value;
      std::memcpy(&value, from, bytes);
      index_t i = 0;
#if !defined(__CUDACC__)
      using V = xsimd::batch<word, simd_arch>;
      const V v(value);
      for (; i + index_t(V::size) <= n; i += index_t(V::size))
        v.store_unaligned(reinterpret_cast<word*>(to + i * index_t(bytes)));
#endif
      for (; i < n; ++i) std::memcpy(to + i * index_t(bytes), &value, bytes);
      return;
    }
    for (index_t i = 0; i < n; ++i) std::memcpy(to + i * to_stride, from + i * from_stride, size);
  };
  switch (elem) {
    case 4:
      return loop(std::integral_constant<std::size_t, 4>{});
    case 8:
      return loop(std::integral_constant<std::size_t, 8>{});
    case 2:
      return loop(std::integral_constant<std::size_t, 2>{});
    case 1:
      return loop(std::integral_constant<std::size_t, 1>{});
    default:
      for (index_t i = 0; i < n; ++i)
        std::memcpy(to + i * to_stride, from + i * from_stride, std::size_t(elem));
  }
}

[[gnu::cold]] MELD_ONCE MELD_RUNTIME void run_rows(const plan_ref& p, index_t begin, index_t end,
                                                   row_fn fn, void* ctx) {
  if (begin >= end) return;
  const int outer = p.rank - 1;
  const int n = p.operands;
  index_t idx[max_rank] = {};
  index_t linear = begin;
  for (int d = p.rank - 1; d >= 0; --d) {
    idx[d] = linear % p.shape[d];
    linear /= p.shape[d];
  }

  // Per operand: the start of the current row, the pointer passed to fn, and a buffer if packed.
  constexpr int small = 16;
  char* small_ptrs[3 * small];
  std::unique_ptr<char*[]> big_ptrs(n > small ? new char*[3 * n] : nullptr);
  char** row = n > small ? big_ptrs.get() : small_ptrs;
  char** at = row + n;
  char** buffer = at + n;
  auto packed = [&](int k) {
    return p.modes[k] != access::pointer && p.strides[k * max_rank + outer] != p.elem[k];
  };
  auto buffer_size = [&](int k) { return std::size_t(piece_elems * p.elem[k] + 63) / 64 * 64; };
  std::size_t buffer_bytes = 0;
  for (int k = 0; k < n; ++k)
    if (packed(k)) buffer_bytes += buffer_size(k);
  alignas(64) char small_buffer[16384];
  std::unique_ptr<char[]> big_buffer(
      buffer_bytes > sizeof(small_buffer) ? new char[buffer_bytes + 64] : nullptr);
  char* storage = small_buffer;
  if (big_buffer) {
    const auto address = reinterpret_cast<std::uintptr_t>(big_buffer.get());
    storage = big_buffer.get() + ((64 - address % 64) % 64);
  }
  for (int k = 0, offset = 0; k < n; ++k) {
    buffer[k] = packed(k) ? storage + offset : nullptr;
    if (packed(k)) offset += static_cast<int>(buffer_size(k));
  }
  const char* replicated_from[small] = {};  // broadcast source already in the buffer (small n)

  for (int k = 0; k < n; ++k) {
    row[k] = p.base[k];
    for (int d = 0; d < outer; ++d) row[k] += idx[d] * p.strides[k * max_rank + d];
  }
  const index_t extent = p.shape[outer];
  index_t j = idx[outer];
  for (;;) {
    const index_t stop = std::min(extent, j + (end - begin));
    if (buffer_bytes == 0) {
      for (int k = 0; k < n; ++k) at[k] = row[k] + j * p.strides[k * max_rank + outer];
      fn(ctx, at, j, stop - j);
    } else {
      for (index_t q = j; q < stop; q += piece_elems) {
        const index_t m = std::min(piece_elems, stop - q);
        for (int k = 0; k < n; ++k) {
          const index_t inner = p.strides[k * max_rank + outer];
          char* src = row[k] + q * inner;
          if (!buffer[k]) {
            at[k] = src;
          } else {
            at[k] = buffer[k];
            if (p.modes[k] != access::read) continue;
            if (inner != 0) {
              copy_elements(buffer[k], p.elem[k], src, inner, m, p.elem[k]);
            } else if (k >= small || replicated_from[k] != src) {
              // As many copies as the longest piece of this plan's rows can use.
              copy_elements(buffer[k], p.elem[k], src, 0, std::min(piece_elems, extent), p.elem[k]);
              if (k < small) replicated_from[k] = src;
            }
          }
        }
        fn(ctx, at, q, m);
        for (int k = 0; k < n; ++k)
          if (buffer[k] && p.modes[k] == access::write)
            copy_elements(row[k] + q * p.strides[k * max_rank + outer],
                          p.strides[k * max_rank + outer], buffer[k], p.elem[k], m, p.elem[k]);
      }
    }
    begin += stop - j;
    if (begin >= end) return;
    j = 0;
    for (int d = outer - 1; d >= 0; --d) {
      if (++idx[d] < p.shape[d]) {
        for (int k = 0; k < n; ++k) row[k] += p.strides[k * max_rank + d];
        break;
      }
      idx[d] = 0;
      for (int k = 0; k < n; ++k) row[k] -= (p.shape[d] - 1) * p.strides[k * max_rank + d];
    }
  }
}

}  // namespace meld::detail::cpu_eval
