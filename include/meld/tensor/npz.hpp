// numpy's .npz archives: several named arrays in one zip file, each member a .npy image named
// "<name>.npy" (numpy.savez). meld writes and reads stored (uncompressed) members:
//   meld::npz_writer w;  w.add("weights", W);  w.add("bias", b);  w.save("model.npz");
//   meld::npz_archive a = meld::load_npz("model.npz");  auto W = a.get<float>("weights");
// numpy.load reads what save_npz writes; load_npz reads numpy.savez's files. Compressed members
// (numpy.savez_compressed: deflate) are refused with a message saying so (meld is header-only
// and takes no zlib); so are zip64 archives (members over 4 GiB) and encrypted members.
//
// The zip format (PKWARE's APPNOTE): each member is a local header (signature 0x04034b50, CRC-32,
// sizes, name) followed by its bytes; a central directory lists every member (0x02014b50, with
// the offset of its local header), and an end record (0x06054b50) at the end of the file gives
// the directory's place. Loading trusts nothing: every offset and size is checked against the
// file before use, each member's CRC-32 is verified, and an error (npy_error) names the archive,
// the member and the byte offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../io/crc32.hpp"
#include "npy.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail::npz {

inline void put16(std::vector<unsigned char>& out, std::uint32_t v) {
  out.push_back(static_cast<unsigned char>(v & 0xff));
  out.push_back(static_cast<unsigned char>(v >> 8 & 0xff));
}
inline void put32(std::vector<unsigned char>& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}
// Little-endian fields of zip records (read with npy.hpp's read_le).
inline std::uint32_t get16(const unsigned char* p) {
  return read_le(p, 2);
}
inline std::uint32_t get32(const unsigned char* p) {
  return read_le(p, 4);
}

inline constexpr std::uint32_t local_signature = 0x04034b50, central_signature = 0x02014b50,
                               end_signature = 0x06054b50;
// The date field of 1980-01-01 (the zip epoch): members carry no time, so archives of the same
// arrays are identical bytes.
inline constexpr std::uint32_t zip_date = (0 << 9) | (1 << 5) | 1;

}  // namespace detail::npz

/// An .npz archive being built: add() arrays under names, then save() it (or bytes()).
class npz_writer {
 public:
  /// Adds tensor or view x (any backend; copied to the host once) as member "<name>.npy". Throws
  /// npy_error for an empty name, a name used before, or a member of 4 GiB or more.
  template <class X>
  void add(std::string_view name, const X& x) {
    if (name.empty()) throw npy_error("npz_writer::add: an empty name");
    const std::string file = std::string(name) + ".npy";
    for (const member& m : members_)
      if (m.file == file) throw npy_error(detail::cat("npz_writer::add: '", name, "' added twice"));
    std::vector<unsigned char> data = write_npy(x);
    if (data.size() >= 0xffffffffu || file.size() > 0xffff)
      throw npy_error(detail::cat("npz_writer::add: '", name, "' is ", data.size(),
                                  " bytes; members of 4 GiB or more need zip64, which meld does "
                                  "not write"));
    members_.push_back({file, std::move(data)});
  }

  /// The archive's bytes.
  std::vector<unsigned char> bytes() const {
    using namespace detail::npz;
    std::vector<unsigned char> out, directory;
    for (const member& m : members_) {
      const auto offset = static_cast<std::uint32_t>(out.size());
      const std::uint32_t crc = detail::crc32(m.data.data(), m.data.size());
      const auto size = static_cast<std::uint32_t>(m.data.size());
      const auto name_len = static_cast<std::uint32_t>(m.file.size());
      // Local header: signature, version 2.0, flags, method 0 (stored), time, date, CRC, sizes,
      // name length, extra length, name.
      put32(out, local_signature);
      for (std::uint32_t v : {20u, 0u, 0u, 0u, zip_date}) put16(out, v);
      for (std::uint32_t v : {crc, size, size}) put32(out, v);
      for (std::uint32_t v : {name_len, 0u}) put16(out, v);
      out.insert(out.end(), m.file.begin(), m.file.end());
      out.insert(out.end(), m.data.begin(), m.data.end());
      // Its central directory entry: also version made by, comment length, disk, attributes
      // and the local header's offset.
      put32(directory, central_signature);
      for (std::uint32_t v : {20u, 20u, 0u, 0u, 0u, zip_date}) put16(directory, v);
      for (std::uint32_t v : {crc, size, size}) put32(directory, v);
      for (std::uint32_t v : {name_len, 0u, 0u, 0u, 0u}) put16(directory, v);
      for (std::uint32_t v : {0u, offset}) put32(directory, v);
      directory.insert(directory.end(), m.file.begin(), m.file.end());
    }
    if (out.size() + directory.size() >= 0xffffffffu || members_.size() > 0xffff)
      throw npy_error(
          "npz_writer: the archive needs zip64 (4 GiB or 65,535 members), which meld "
          "does not write");
    const auto directory_offset = static_cast<std::uint32_t>(out.size());
    out.insert(out.end(), directory.begin(), directory.end());
    const auto count = static_cast<std::uint32_t>(members_.size());
    put32(out, end_signature);
    for (std::uint32_t v : {0u, 0u, count, count}) put16(out, v);
    for (std::uint32_t v : {static_cast<std::uint32_t>(directory.size()), directory_offset})
      put32(out, v);
    put16(out, 0);  // comment length
    return out;
  }

  /// Writes the archive to `path` (numpy.load reads it). Throws npy_error when it cannot.
  void save(const std::filesystem::path& path) const {
    const std::vector<unsigned char> b = bytes();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw npy_error(detail::cat("save_npz: cannot open ", path.string(), " for writing"));
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    out.close();
    if (!out) throw npy_error(detail::cat("save_npz: cannot write ", path.string()));
  }

 private:
  struct member {
    std::string file;
    std::vector<unsigned char> data;
  };
  std::vector<member> members_;
};

/// Writes the arrays under their names: save_npz("m.npz", "w", W, "b", b) is numpy.savez's
/// np.savez("m.npz", w=W, b=b).
template <class... NamesAndArrays>
void save_npz(const std::filesystem::path& path, const NamesAndArrays&... args) {
  static_assert(sizeof...(args) % 2 == 0, "meld::save_npz(path, name, array, name, array, ...)");
  npz_writer w;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto all = std::forward_as_tuple(args...);
    (w.add(std::get<2 * I>(all), std::get<2 * I + 1>(all)), ...);
  }
  (std::make_index_sequence<sizeof...(args) / 2>{});
  w.save(path);
}

/// An .npz archive read whole into memory (load_npz, read_npz): its members' names and arrays.
class npz_archive {
 public:
  /// Parses the archive's bytes; `name` is what error messages call it. Throws npy_error naming
  /// the member and byte offset of what is wrong (see the header's comment).
  explicit npz_archive(std::vector<unsigned char> bytes, std::string name = "npz")
      : bytes_(std::move(bytes)), name_(std::move(name)) {
    parse();
  }

  /// The arrays' names, in the archive's order (without ".npy").
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const member& m : members_) n.push_back(m.name);
    return n;
  }
  /// Whether the archive holds an array named `name`.
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  /// The array named `name`, as a tensor of T on Backend (see read_npy for the dtypes). Throws
  /// npy_error naming the archive's arrays when it has none of that name.
  template <class T, class Backend = cpu<>>
  tensor<T, Backend> get(std::string_view name) const {
    const member* m = find(name);
    if (!m) {
      std::string known;
      for (const member& k : members_) known += (known.empty() ? "'" : ", '") + k.name + "'";
      throw npy_error(detail::cat(name_, ": no array '", name, "' (it holds ",
                                  known.empty() ? std::string("none") : known, ")"));
    }
    return read_npy<T, Backend>(std::span<const unsigned char>(bytes_).subspan(m->offset, m->size),
                                detail::cat(name_, ", member ", m->name, ".npy"));
  }

 private:
  struct member {
    std::string name;
    std::size_t offset, size;
  };

  const member* find(std::string_view name) const {
    for (const member& m : members_)
      if (m.name == name) return &m;
    return nullptr;
  }

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw npy_error(detail::cat(name_, ": byte ", at, ": ", what));
  }

  void parse() {
    using namespace detail::npz;
    const unsigned char* b = bytes_.data();
    const std::size_t n = bytes_.size();
    // The end record: 22 bytes and a comment of up to 65,535, found from the end.
    std::size_t end = n;
    for (std::size_t back = 22; back <= n && back <= 22 + 0xffff; ++back)
      if (get32(b + n - back) == end_signature && n - back + 22 + get16(b + n - back + 20) == n) {
        end = n - back;
        break;
      }
    if (end == n) fail(n, "no zip end record (not an .npz archive, or truncated)");
    const std::uint32_t count = get16(b + end + 10), dir_size = get32(b + end + 12),
                        dir_offset = get32(b + end + 16);
    if (count == 0xffff || dir_size == 0xffffffffu || dir_offset == 0xffffffffu)
      fail(end, "a zip64 archive (members over 4 GiB), which meld does not read");
    if (get16(b + end + 4) != 0 || get16(b + end + 6) != 0 || get16(b + end + 8) != count)
      fail(end + 4, "a multi-disk zip archive");
    if (std::size_t(dir_offset) + dir_size > end)
      fail(end + 12, detail::cat("the central directory (", dir_size, " bytes at ", dir_offset,
                                 ") runs past the end record"));
    std::size_t p = dir_offset;
    for (std::uint32_t i = 0; i < count; ++i) {
      if (p + 46 > std::size_t(dir_offset) + dir_size || get32(b + p) != central_signature)
        fail(p, detail::cat("central directory entry ", i, " is missing or malformed"));
      const std::uint32_t flags = get16(b + p + 8), method = get16(b + p + 10),
                          crc = get32(b + p + 16), csize = get32(b + p + 20),
                          usize = get32(b + p + 24), name_len = get16(b + p + 28),
                          extra_len = get16(b + p + 30), comment_len = get16(b + p + 32),
                          local = get32(b + p + 42);
      const std::size_t entry_end = p + 46 + name_len + extra_len + comment_len;
      if (entry_end > std::size_t(dir_offset) + dir_size)
        fail(p, detail::cat("central directory entry ", i, " runs past the directory"));
      std::string file(reinterpret_cast<const char*>(b + p + 46), name_len);
      if (flags & 1) fail(p + 8, detail::cat("member '", file, "' is encrypted"));
      if (method != 0)
        fail(p + 10, detail::cat("member '", file, "' is compressed (zip method ", method,
                                 ", as numpy.savez_compressed writes); meld reads stored "
                                 "members (numpy.savez)"));
      if (csize != usize || csize == 0xffffffffu || local == 0xffffffffu)
        fail(p + 20, detail::cat("member '", file, "' has sizes ", csize, " and ", usize,
                                 " (zip64 or inconsistent)"));
      // Its local header, and the data after it.
      if (std::size_t(local) + 30 > dir_offset || get32(b + local) != local_signature)
        fail(local, detail::cat("member '", file, "': no local header at its offset ", local));
      const std::size_t data =
          std::size_t(local) + 30 + get16(b + local + 26) + get16(b + local + 28);
      if (data > dir_offset || get16(b + local + 26) != name_len ||
          std::memcmp(b + local + 30, file.data(), name_len) != 0)
        fail(local + 26, detail::cat("member '", file, "': its local header names another file"));
      if (data + usize > dir_offset)
        fail(local, detail::cat("member '", file, "' (", usize, " bytes at ", data,
                                ") runs past the members"));
      if (detail::crc32(b + data, usize) != crc)
        fail(data, detail::cat("member '", file, "' fails its CRC-32 check (corrupted)"));
      if (file.size() < 5 || file.compare(file.size() - 4, 4, ".npy") != 0)
        fail(p + 46, detail::cat("member '", file, "' is not a .npy file"));
      file.resize(file.size() - 4);
      if (find(file)) fail(p + 46, detail::cat("member '", file, ".npy' appears twice"));
      members_.push_back({std::move(file), data, usize});
      p = entry_end;
    }
  }

  std::vector<unsigned char> bytes_;
  std::string name_;
  std::vector<member> members_;
};

/// Reads an .npz file (numpy.savez's, or save_npz's) into memory. Throws npy_error when it
/// cannot be read or is malformed (naming the byte).
inline npz_archive load_npz(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw npy_error(detail::cat("load_npz: cannot open ", path.string()));
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) throw npy_error(detail::cat("load_npz: cannot read ", path.string()));
  return npz_archive(std::move(bytes), path.string());
}

/// @}

}  // namespace meld
