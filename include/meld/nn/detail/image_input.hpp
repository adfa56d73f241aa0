// What convolution and pooling layers share: their image input's check, and the window geometry
// and operations of the backend (backend/window.hpp: part of the backend contract, which each
// backend's executor brings).
#pragma once

#include <string>

#include "../../backend/window.hpp"
#include "../layer.hpp"

namespace meld::nn {

using meld::size2;

namespace detail {

using meld::detail::planes;
using meld::detail::window2d;

// Checks that x is {batch, channels, height, width} (channels as given, unless negative).
inline void expect_image_batch(const std::string& layer, const shape_t& s, index_t channels) {
  if (s.size() != 4 || (channels >= 0 && s[1] != channels))
    throw shape_error(cat(layer, ": the input has shape ", s, ", expected {batch, ",
                          channels >= 0 ? std::to_string(channels) : std::string("channels"),
                          ", height, width}"));
}

}  // namespace detail
}  // namespace meld::nn
