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

// The planning of make_plan for n operands, into caller-provided arrays: shape[max_rank],
// strides[n * max_rank] (operand k's axis d at k * max_rank + d, in bytes; entries past the rank
// are left alone) and inner[n]; returns the rank. Not a template: compiled once whatever the
// number of operands. Cold (optimized for size): it runs once per evaluation that needs a plan.
[[gnu::cold]] int make_plan_into(int n, const shape_t& shape, const std::size_t* elem,
                                 const strides_t* in, bool separate_last, index_t* shape_out,
                                 index_t* strides_out, index_t* inner);

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
  p.rank = make_plan_into(N, shape, elem, in, separate_last, p.shape, &p.strides[0][0], p.inner);
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

#if MELD_RUNTIME_DEFINITIONS
#include "plan-inl.hpp"
#endif
