// The iteration plan of one evaluation: the destination's shape with axes of extent 1 dropped and
// adjacent axes merged wherever every operand is contiguous across them. Contiguous operands of
// one shape become a single flat axis; y = m + v with m {4096, 4096} and v {4096} stays two axes
// with a contiguous inner one.
#pragma once

#include <algorithm>

#include "cursor.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld::detail::cpu_eval {

template <int N>
struct plan {
  int rank = 1;  // >= 1; the last axis is the inner loop
  index_t shape[max_rank] = {1};
  axis_strides strides[N];  // per operand
  index_t size = 1;

  int outer_rank() const { return rank - 1; }
  index_t inner_extent() const { return shape[rank - 1]; }

  // Outer indices and inner index of a linear (row-major) position.
  void unravel(index_t linear, index_t* idx) const {
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = linear % shape[d];
      linear /= shape[d];
    }
  }
};

// shape: the iteration shape; in[k]: the strides of operand k over it (broadcast already).
// With separate_last, the last axis is kept apart (never merged, even of extent 1): axis
// reductions iterate over it.
template <int N>
plan<N> make_plan(const shape_t& shape, const strides_t* in, bool separate_last = false) {
  plan<N> p;
  p.size = shape.product();
  int axes[max_rank];
  int count = 0;
  const int r = shape.size();
  for (int d = 0; d < r - (separate_last ? 1 : 0); ++d)
    if (shape[d] != 1) axes[count++] = d;

  // Build groups from the inner end outwards.
  index_t g_shape[max_rank];
  axis_strides g_strides[max_rank];
  int groups = 0;
  for (int i = count - 1; i >= 0; --i) {
    const int d = axes[i];
    bool merge = groups > 0;
    for (int k = 0; merge && k < N; ++k)
      merge = in[k][d] == g_strides[groups - 1].s[k] * g_shape[groups - 1];
    if (merge) {
      g_shape[groups - 1] *= shape[d];
    } else {
      g_shape[groups] = shape[d];
      for (int k = 0; k < N; ++k) g_strides[groups].s[k] = in[k][d];
      ++groups;
    }
  }
  // groups are inner-first; the plan is outer-first, then the separate axis (if any).
  int rank = 0;
  for (int g = groups - 1; g >= 0; --g, ++rank) {
    p.shape[rank] = g_shape[g];
    for (int k = 0; k < N; ++k) p.strides[k].s[rank] = g_strides[g].s[k];
  }
  if (separate_last) {
    p.shape[rank] = shape[r - 1];
    for (int k = 0; k < N; ++k) p.strides[k].s[rank] = in[k][r - 1];
    ++rank;
  }
  if (rank == 0) {  // a single element
    p.shape[0] = 1;
    for (int k = 0; k < N; ++k) p.strides[k].s[0] = 0;
    rank = 1;
  }
  p.rank = rank;
  return p;
}

}  // namespace meld::detail::cpu_eval

#include "gcc12_warnings.hpp"  // pop
