// numpy's .npy files: meld::save_npy(path, t) and meld::load_npy<T>(path), and the same on bytes
// in memory (write_npy, read_npy). The format (numpy/lib/format.py, NEP 1): the magic
// "\x93NUMPY", a major and a minor version byte, the header's length (2 bytes little-endian in
// version 1, 4 bytes in versions 2 and 3), a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ending in '\n', then the elements. Element types: float32 ('f4'),
// float64 ('f8'), int32 ('i4'), int64 ('i8'), either byte order, C or Fortran order.
//
// Loading trusts nothing in the file: every field is checked, the data's size is checked against
// the file's before anything is allocated, and an error (npy_error) names the byte offset where
// the file went wrong.
#pragma once

#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "convert.hpp"
#include "tensor.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// A .npy file (or buffer) that cannot be read or written: the message names the file, the byte
/// offset and what was wrong there.
class npy_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// The dtype string numpy writes for T, little-endian.
template <class T>
constexpr const char* npy_descr() {
  static_assert(std::is_arithmetic_v<T>,
                "meld::write_npy: numpy has no bfloat16 dtype; write meld::cast<float>(t)");
  if constexpr (std::is_same_v<T, float>)
    return "<f4";
  else if constexpr (std::is_same_v<T, double>)
    return "<f8";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "<i4";
  else
    return "<i8";
}

// What a header says.
struct npy_header {
  char kind = 0;  // 'f' or 'i'
  std::size_t itemsize = 0;
  bool big_endian = false;
  bool fortran_order = false;
  shape_t shape;
  std::size_t data_offset = 0;  // where the elements start
  std::string descr;
};

[[noreturn]] inline void npy_fail(std::string_view name, std::size_t at, const std::string& what) {
  throw npy_error(cat(name, ": byte ", at, ": ", what));
}

// Reads a header's dict, reporting errors at absolute byte offsets.
class npy_header_parser {
 public:
  npy_header_parser(std::string_view text, std::size_t base, std::string_view name)
      : text_(text), base_(base), name_(name) {}

  void parse(npy_header& h) {
    skip_space();
    expect('{');
    bool have_descr = false, have_order = false, have_shape = false;
    for (;;) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const std::size_t key_at = pos_;
      const std::string key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (have_descr) fail(key_at, "the key 'descr' appears twice");
        have_descr = true;
        const std::size_t at = pos_;
        if (peek() != '\'' && peek() != '"')
          fail(at,
               "'descr' is not a string: meld reads plain dtypes (float32, float64, int32, "
               "int64), not structured ones");
        h.descr = string_literal();
        read_descr(h, at);
      } else if (key == "fortran_order") {
        if (have_order) fail(key_at, "the key 'fortran_order' appears twice");
        have_order = true;
        h.fortran_order = boolean();
      } else if (key == "shape") {
        if (have_shape) fail(key_at, "the key 'shape' appears twice");
        have_shape = true;
        h.shape = shape_tuple();
      } else {
        fail(key_at, "unknown key '" + key + "' (expected 'descr', 'fortran_order', 'shape')");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != '}') {
        fail(pos_, "expected ',' or '}' after the value of '" + key + "'");
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail(pos_, "unexpected text after the header's dict");
    if (!have_descr || !have_order || !have_shape)
      fail(pos_, std::string("the header lacks the key '") +
                     (!have_descr   ? "descr"
                      : !have_order ? "fortran_order"
                                    : "shape") +
                     "'");
  }

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    npy_fail(name_, base_ + at, what);
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) {
      if (pos_ >= text_.size())
        fail(pos_, std::string("the header ends where '") + c + "' was expected");
      fail(pos_, std::string("expected '") + c + "'");
    }
    ++pos_;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(pos_, "expected a quoted string");
    const std::size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail(pos_, "escapes in strings are not part of a .npy header");
      ++pos_;
    }
    if (pos_ >= text_.size()) fail(start - 1, "a string that does not end");
    return std::string(text_.substr(start, pos_++ - start));
  }
  bool boolean() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail(pos_, "'fortran_order' is neither True nor False");
  }
  shape_t shape_tuple() {
    expect('(');
    shape_t shape;
    index_t count = 1;  // the product of the extents, checked as they come
    for (;;) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      const std::size_t at = pos_;
      if (peek() < '0' || peek() > '9')
        fail(at, "an extent of 'shape' is not a nonnegative integer");
      index_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (!mul_fits(v, 10, v) || !add_fits(v, peek() - '0', v))
          fail(at, "an extent of 'shape' does not fit in 64 bits");
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2's long integers
      if (shape.size() == max_rank)
        fail(at, cat("'shape' has more than ", max_rank, " axes, meld's largest rank"));
      if (v != 0 && count != 0 && !mul_fits(count, v, count))
        fail(at, "the element count of 'shape' does not fit in 64 bits");
      if (v == 0) count = 0;
      shape.push_back(v);
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        fail(pos_, "expected ',' or ')' in 'shape'");
      }
    }
    return shape;
  }
  void read_descr(npy_header& h, std::size_t at) {
    const std::string& d = h.descr;
    const bool known_size = d.size() == 3 && (d[2] == '4' || d[2] == '8');
    const bool known_kind = d.size() == 3 && (d[1] == 'f' || d[1] == 'i');
    const bool known_order = !d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '=');
    if (!known_size || !known_kind || !known_order)
      fail(at, "dtype '" + d +
                   "' is not one meld has (float32 '<f4', float64 '<f8', int32 '<i4', "
                   "int64 '<i8', in either byte order)");
    h.kind = d[1];
    h.itemsize = static_cast<std::size_t>(d[2] - '0');
    h.big_endian = d[0] == '>' || (d[0] == '=' && std::endian::native == std::endian::big);
  }

  std::string_view text_;
  std::size_t base_;
  std::string_view name_;
  std::size_t pos_ = 0;
};

inline std::uint32_t read_le(const unsigned char* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses and checks the preamble and header of a .npy buffer, and that the data fits exactly.
inline npy_header read_npy_header(std::span<const unsigned char> bytes, std::string_view name) {
  auto fail = [&](std::size_t at, const std::string& what) { npy_fail(name, at, what); };
  static constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  for (std::size_t i = 0; i < 6; ++i) {
    if (i >= bytes.size()) fail(bytes.size(), "the file ends inside the magic string \\x93NUMPY");
    if (bytes[i] != magic[i]) fail(i, "not a .npy file (the magic string \\x93NUMPY differs)");
  }
  if (bytes.size() < 8) fail(bytes.size(), "the file ends before the format version");
  const unsigned major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(6, cat("format version ", major, ".", minor, " is not 1.0, 2.0 or 3.0"));
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) fail(bytes.size(), "the file ends inside the header length");
  const std::size_t header_len = read_le(bytes.data() + 8, static_cast<int>(len_bytes));
  const std::size_t start = 8 + len_bytes;
  if (bytes.size() - start < header_len)
    fail(bytes.size(), cat("the file ends inside the header (", header_len, " bytes from byte ",
                           start, " announced)"));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + start), header_len);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (major < 3 ? (c > 126 || (c < 32 && c != '\n' && c != '\t' && c != '\r')) : c == 0)
      fail(start + i, cat("a byte of value ", static_cast<unsigned>(c), " in the header, which is ",
                          major < 3 ? "ASCII" : "UTF-8", " text"));
  }
  npy_header h;
  npy_header_parser(text, start, name).parse(h);
  h.data_offset = start + header_len;
  const index_t count = h.shape.product();
  const std::size_t have = bytes.size() - h.data_offset;
  const std::size_t need = static_cast<std::size_t>(count) * h.itemsize;
  if (count != 0 && (static_cast<std::size_t>(count) > SIZE_MAX / h.itemsize || need > have))
    fail(bytes.size(), cat("the file ends inside the data: shape ", h.shape, " of '", h.descr,
                           "' needs ", count, " elements of ", h.itemsize, " bytes from byte ",
                           h.data_offset, ", and ", have, " bytes follow"));
  if (need < have)
    fail(h.data_offset + need, cat(have - need, " bytes follow the data of shape ", h.shape));
  return h;
}

template <class T>
T load_element(const unsigned char* p, bool swap) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap)
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

}  // namespace detail

/// Reads a .npy image in memory (see load_npy). `name` is what error messages call it.
template <class T, class Backend = cpu<>>
tensor<T, Backend> read_npy(std::span<const unsigned char> bytes, std::string_view name = "npy") {
  static_assert(element_type<T> && std::is_arithmetic_v<T> && !std::is_const_v<T>,
                "meld::read_npy<T>: T must be float, double, std::int32_t or std::int64_t");
  const detail::npy_header h = detail::read_npy_header(bytes, name);
  const char kind = std::is_floating_point_v<T> ? 'f' : 'i';
  if (h.kind != kind || h.itemsize != sizeof(T)) {
    const char* file_type = h.kind == 'f' ? (h.itemsize == 4 ? "float32" : "float64")
                                          : (h.itemsize == 4 ? "int32" : "int64");
    const char* reader = h.kind == 'f' ? (h.itemsize == 4 ? "float" : "double")
                                       : (h.itemsize == 4 ? "std::int32_t" : "std::int64_t");
    throw npy_error(detail::cat(name, ": holds ", file_type, " ('", h.descr, "'), not ",
                                type_name<T>(), ": read it with load_npy<", reader,
                                "> (and convert with meld::cast if need be)"));
  }
  // The elements as the file stores them: a Fortran-order file holds the transpose of the
  // reversed shape in C order.
  shape_t stored = h.shape;
  if (h.fortran_order) std::reverse(stored.begin(), stored.end());
  tensor<T> host(stored, uninitialized);
  const bool swap = h.big_endian != (std::endian::native == std::endian::big);
  const unsigned char* src = bytes.data() + h.data_offset;
  T* dst = host.data();
  for (index_t i = 0; i < host.size(); ++i)
    dst[i] = detail::load_element<T>(src + static_cast<std::size_t>(i) * sizeof(T), swap);
  if (h.fortran_order && h.shape.size() > 1) host = tensor<T>(host.transpose());
  if constexpr (std::is_same_v<Backend, cpu<>>)
    return host;
  else
    return to<Backend>(host);
}

/// Reads a .npy file written by numpy (numpy.save), PyTorch (through numpy) or save_npy, as a
/// tensor on Backend (copied to the device once). The file must hold T's dtype ('<f4' for float,
/// '<f8' double, '<i4' int32, '<i8' int64; either byte order; C or Fortran order; header version
/// 1.0, 2.0 or 3.0). Throws npy_error naming the file and the byte offset of what is wrong: a
/// bad magic string or version, a malformed header, another dtype, truncated or extra data.
template <class T, class Backend = cpu<>>
tensor<T, Backend> load_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw npy_error(detail::cat("load_npy: cannot open ", path.string()));
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) throw npy_error(detail::cat("load_npy: cannot read ", path.string()));
  return read_npy<T, Backend>(bytes, path.string());
}

/// The .npy image of a tensor or view of any backend (copied to the host once): version 1.0, C
/// order, little-endian.
template <class X>
requires(detail::is_tensor<X> ||
         requires { typename X::storage_type; }) std::vector<unsigned char> write_npy(const X& x) {
  using T = std::remove_const_t<value_t<X>>;
  std::string dict =
      detail::cat("{'descr': '", detail::npy_descr<T>(), "', 'fortran_order': False, 'shape': (");
  for (int a = 0; a < x.rank(); ++a)
    dict += detail::cat(x.shape()[a], a == 0 && x.rank() == 1 ? "," : a + 1 < x.rank() ? ", " : "");
  dict += "), }";
  // numpy pads the header with spaces and a final newline to a multiple of 64 bytes. (Version
  // 1.0's 2-byte length always suffices: a shape has at most max_rank axes.)
  const std::size_t padded = (10 + dict.size() + 1 + 63) / 64 * 64;
  const std::size_t header_len = padded - 10;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  const tensor<T> host = detail::host_elements(x);
  // The preamble: the magic string, version 1.0, the header's length (2 bytes, little-endian).
  std::string head = "\x93NUMPY";
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(header_len & 0xff);
  head += static_cast<char>(header_len >> 8);
  head += dict;
  // One allocation and two copies (inserting into a vector piece by piece set off g++ 12's
  // -Wstringop-overflow, a false positive).
  const std::size_t start = head.size(), bytes = static_cast<std::size_t>(host.size()) * sizeof(T);
  std::vector<unsigned char> out(start + bytes);
  std::memcpy(out.data(), head.data(), start);
  if (bytes) std::memcpy(out.data() + start, host.data(), bytes);
  if constexpr (std::endian::native == std::endian::big)
    for (std::size_t i = start; i < out.size(); i += sizeof(T))
      std::reverse(out.begin() + static_cast<long>(i),
                   out.begin() + static_cast<long>(i + sizeof(T)));
  return out;
}

/// Writes a tensor or view of any backend to a .npy file that numpy.load reads (see write_npy).
/// Throws npy_error when the file cannot be written.
template <class X>
void save_npy(const std::filesystem::path& path, const X& x) {
  const std::vector<unsigned char> bytes = write_npy(x);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw npy_error(detail::cat("save_npy: cannot open ", path.string(), " for writing"));
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw npy_error(detail::cat("save_npy: cannot write ", path.string()));
}

/// @}

}  // namespace meld
