// CRC-32 (IEEE 802.3, reflected, as zlib's crc32): the checksum of meld's checkpoint files and
// of the members of .npz archives (zip).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace meld::detail {

inline std::uint32_t crc32(const unsigned char* data, std::size_t n) {
  static constexpr auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace meld::detail
