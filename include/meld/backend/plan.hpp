// The iteration plan of one evaluation, shared by the backends (the CPU loops walk it; the CUDA
// kernels take its coalesced shape and strides): the iteration shape with axes of extent 1 dropped
// and adjacent axes merged wherever every operand is contiguous across them. Contiguous operands of
// one shape become a single flat axis; y = m + v with m {4096, 4096} and v {4096} stays two axes
// with a contiguous inner one.
#pragma once

#include <algorithm>
#include <cstddef>

#include "../core/config.hpp"
#include "../core/shape.hpp"

namespace meld::detail {

// How a row function uses an operand: reads it, writes it, or takes its pointer as it is (the
// driver packs and unpacks rows of read and written operands that are not contiguous).
enum class access : unsigned char { read, write, pointer };

// What the shared loops need to know about a plan, whatever its number of operands.
struct plan_ref {
  int rank;                // >= 1; the last axis is the row
  const index_t* shape;    // [rank]
  int operands;            // operand 0 is the destination, if any
  const index_t* strides;  // [operands][max_rank], in bytes
  char* const* base;       // [operands], element (0, ..., 0)
  const index_t* elem;     // [operands], bytes per element
  const access* modes;     // [operands]
};

template <int N>
struct plan {
  int rank = 1;
  index_t shape[max_rank] = {1};
  index_t size = 1;
  index_t strides[N][max_rank] = {};  // bytes
  char* base[N] = {};
  index_t elem[N] = {};
  access modes[N] = {};
  index_t inner[N] = {};  // stride along the row, in elements

  plan_ref ref() const { return {rank, shape, N, &strides[0][0], base, elem, modes}; }
  // Every operand is contiguous along the row.
  bool contiguous() const {
    for (int k = 0; k < N; ++k)
      if (inner[k] != 1) return false;
    return true;
  }
};

// Operand k: its first element, element size and strides (in elements) over `shape`, broadcast
// already. With separate_last, the last axis is kept apart (never merged, even of extent 1):
// axis reductions iterate over it.
template <int N>
plan<N> make_plan(const shape_t& shape, char* const* base, const std::size_t* elem,
                  const strides_t* in, bool separate_last = false) {
  plan<N> p;
  p.size = shape.product();
  for (int k = 0; k < N; ++k) {
    p.base[k] = base[k];
    p.elem[k] = static_cast<index_t>(elem[k]);
  }
  const int r = shape.size();
  int axes[max_rank];
  int count = 0;
  for (int d = 0; d < r - (separate_last ? 1 : 0); ++d)
    if (shape[d] != 1) axes[count++] = d;

  // Groups of merged axes, built from the inner end outwards.
  index_t g_shape[max_rank];
  index_t g_strides[max_rank][N];
  int groups = 0;
  for (int i = count - 1; i >= 0; --i) {
    const int d = axes[i];
    bool merge = groups > 0;
    for (int k = 0; merge && k < N; ++k)
      merge = in[k][d] == g_strides[groups - 1][k] * g_shape[groups - 1];
    if (merge) {
      g_shape[groups - 1] *= shape[d];
    } else {
      g_shape[groups] = shape[d];
      for (int k = 0; k < N; ++k) g_strides[groups][k] = in[k][d];
      ++groups;
    }
  }
  int rank = 0;
  auto add_axis = [&](index_t extent, auto stride_of) {
    p.shape[rank] = extent;
    for (int k = 0; k < N; ++k) {
      p.strides[k][rank] = stride_of(k) * static_cast<index_t>(elem[k]);
      p.inner[k] = stride_of(k);
    }
    ++rank;
  };
  for (int g = groups - 1; g >= 0; --g)
    add_axis(g_shape[g], [&](int k) { return g_strides[g][k]; });
  if (separate_last) add_axis(shape[r - 1], [&](int k) { return in[k][r - 1]; });
  if (rank == 0) add_axis(1, [](int) { return index_t(0); });  // a single element
  p.rank = rank;
  return p;
}

// Operands 0 .. N-1 of a flat evaluation of n elements: each contiguous from ptrs[k].
template <int N>
plan<N> flat_plan(index_t n, char* const* ptrs, const std::size_t* elems) {
  plan<N> p;
  p.shape[0] = n;
  p.size = n;
  for (int k = 0; k < N; ++k) {
    p.base[k] = ptrs[k];
    p.elem[k] = static_cast<index_t>(elems[k]);
    p.strides[k][0] = p.elem[k];
    p.inner[k] = 1;
  }
  return p;
}

}  // namespace meld::detail
