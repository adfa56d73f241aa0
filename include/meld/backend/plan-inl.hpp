// The definitions of plan.hpp's runtime functions (MELD_RUNTIME in core/config.hpp): included
// by plan.hpp where they are compiled, header-only or in the runtime library.
#pragma once

#include "plan.hpp"

namespace meld::detail {

[[gnu::cold]] MELD_ONCE MELD_RUNTIME int make_plan_into(int n, const shape_t& shape,
                                                        const std::size_t* elem,
                                                        const strides_t* in, bool separate_last,
                                                        index_t* shape_out, index_t* strides_out,
                                                        index_t* inner) {
  const int r = shape.size();
  int axes[max_rank];
  int count = 0;
  for (int d = 0; d < r - (separate_last ? 1 : 0); ++d)
    if (shape[d] != 1) axes[count++] = d;

  // Groups of merged axes, built from the inner end outwards: group g's extent in shape_out[g]
  // and operand k's stride (in elements) in strides_out[k * max_rank + g]; reversed below.
  auto stride = [&](int k, int g) -> index_t& { return strides_out[k * max_rank + g]; };
  int groups = 0;
  for (int i = count - 1; i >= 0; --i) {
    const int d = axes[i];
    bool merge = groups > 0;
    for (int k = 0; merge && k < n; ++k)
      merge = in[k][d] == stride(k, groups - 1) * shape_out[groups - 1];
    if (merge) {
      shape_out[groups - 1] *= shape[d];
    } else {
      shape_out[groups] = shape[d];
      for (int k = 0; k < n; ++k) stride(k, groups) = in[k][d];
      ++groups;
    }
  }
  std::reverse(shape_out, shape_out + groups);
  for (int k = 0; k < n; ++k) {
    std::reverse(&stride(k, 0), &stride(k, 0) + groups);
    inner[k] = groups > 0 ? stride(k, groups - 1) : 0;
  }
  int rank = groups;
  if (separate_last) {
    shape_out[rank] = shape[r - 1];
    for (int k = 0; k < n; ++k) stride(k, rank) = inner[k] = in[k][r - 1];
    ++rank;
  }
  if (rank == 0) {  // a single element
    shape_out[0] = 1;
    for (int k = 0; k < n; ++k) stride(k, 0) = inner[k] = 0;
    rank = 1;
  }
  for (int k = 0; k < n; ++k)
    for (int d = 0; d < rank; ++d) stride(k, d) *= static_cast<index_t>(elem[k]);
  return rank;
}

}  // namespace meld::detail
