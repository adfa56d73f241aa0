// Gradient buckets: how data_parallel groups parameters' gradients into contiguous buffers that
// are allreduced together.
//
// Parameters are taken in reverse visit order (backward produces the last layer's gradients
// first) and packed greedily: a bucket is closed when the next parameter would take it past the
// cap; a parameter larger than the cap gets a bucket of its own. The layout is a pure function of
// the parameter sizes, the element size and the cap, so every rank computes the same one.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "../core/config.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// A group of parameter gradients that travel in one allreduce, packed one after the other.
struct gradient_bucket {
  std::vector<int> params;       ///< indices in visit order, in packing order
  std::vector<index_t> offsets;  ///< element offset of each parameter in the bucket
  index_t size = 0;              ///< elements
};

/// Groups parameters of the given element counts into buckets of at most cap_bytes (a parameter
/// larger than the cap gets a bucket of its own), in reverse order (the order backward makes their
/// gradients final). A pure function of its arguments, so every rank gets the same buckets.
inline std::vector<gradient_bucket> make_buckets(std::span<const index_t> sizes,
                                                 std::size_t elem_bytes, std::size_t cap_bytes) {
  std::vector<gradient_bucket> buckets;
  gradient_bucket current;
  std::size_t bytes = 0;
  for (int p = static_cast<int>(sizes.size()) - 1; p >= 0; --p) {
    const std::size_t b = static_cast<std::size_t>(sizes[static_cast<std::size_t>(p)]) * elem_bytes;
    if (!current.params.empty() && bytes + b > cap_bytes) {
      buckets.push_back(std::move(current));
      current = {};
      bytes = 0;
    }
    current.params.push_back(p);
    current.offsets.push_back(current.size);
    current.size += sizes[static_cast<std::size_t>(p)];
    bytes += b;
  }
  if (!current.params.empty()) buckets.push_back(std::move(current));
  return buckets;
}

/// @}

}  // namespace meld
