// The one checkpoint file format of meld: what nn's model and optimizer checkpoints and the
// parameter server's shards are saved in. A file is a list of named, typed, shaped arrays; the
// writers decide what the entries are, this header how they are written and read back.
//
// Reading checks everything before anything is used: a missing, truncated or corrupted file
// (every byte is covered by a CRC-32), another format version, entries that run past the end or
// appear twice throw meld::checkpoint_error naming the file and what is wrong; a directory or a
// device (/dev/zero) is refused from its first bytes, and nothing larger than the file is
// allocated. Writing goes through a temporary file of its own beside the target (a unique name,
// so that processes saving to one path do not collide), synced to the disk, renamed over the
// target, then the directory synced: a reader sees the old file or the new one, whole, and an
// interrupted or failed save (a full disk, say) leaves the target untouched and removes its
// temporary file. Errors carry the system's reason (errno). POSIX file I/O.
//
// Format (version 1), all integers little-endian:
//   "MELDCKPT"  u32 version  u32 element type  u64 file size  u64 entry count
//   entries:    u8 kind (1 parameter, 2 buffer, 3 optimizer state, 4 parameter-server shard)
//               u32 name length  name  u32 element type  u32 rank  i64 extents[rank]
//               u64 data bytes  data
//   u32 CRC-32 (IEEE 802.3) of every byte before it
// Element types: 1 float32, 2 float64, 3 int32, 4 int64 (core/element_type.hpp).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/element_type.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "crc32.hpp"

namespace meld {

/// \addtogroup nn
/// @{

/// A checkpoint that cannot be saved or loaded; the message names the file and what is wrong.
class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail::ckpt {

inline constexpr char magic[8] = {'M', 'E', 'L', 'D', 'C', 'K', 'P', 'T'};
inline constexpr std::uint32_t format_version = 1;
inline constexpr std::size_t header_bytes = 8 + 4 + 4 + 8 + 8;
inline constexpr std::size_t checksum_bytes = 4;
inline constexpr std::uint32_t max_name_bytes = 1 << 16;

enum class kind : std::uint8_t { parameter = 1, buffer = 2, optimizer = 3, shard = 4 };
inline constexpr std::uint8_t last_kind = 4;

inline const char* kind_name(kind k) {
  switch (k) {
    case kind::parameter:
      return "parameter";
    case kind::buffer:
      return "buffer";
    case kind::shard:
      return "parameter-server shard";
    default:
      return "optimizer state";
  }
}

using ::meld::detail::crc32;  // io/crc32.hpp

// Copies n elements of `size` bytes, reversing each element's bytes on big-endian machines.
inline void copy_little_endian(void* dst, const void* src, std::size_t n, std::size_t size) {
  std::memcpy(dst, src, n * size);
  if constexpr (std::endian::native == std::endian::big) {
    auto* p = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t a = 0, b = size - 1; a < b; ++a, --b)
        std::swap(p[i * size + a], p[i * size + b]);
  }
}

class writer {
 public:
  template <class I>
  void put(I value) {
    static_assert(std::is_integral_v<I>);
    unsigned char b[sizeof(I)];
    copy_little_endian(b, &value, 1, sizeof(I));
    bytes_.append(reinterpret_cast<const char*>(b), sizeof(I));
  }
  void put_bytes(const void* p, std::size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  void put_elements(const void* p, std::size_t n, std::size_t size) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + n * size);
    copy_little_endian(bytes_.data() + at, p, n, size);
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

// A bounds-checked cursor over the file's bytes.
class reader {
 public:
  reader(const std::string& bytes, std::size_t end, const std::string& file)
      : bytes_(bytes), end_(end), file_(file) {}
  template <class I>
  I get() {
    need(sizeof(I));
    I value;
    copy_little_endian(&value, bytes_.data() + pos_, 1, sizeof(I));
    pos_ += sizeof(I);
    return value;
  }
  std::string_view take(std::size_t n) {
    need(n);
    std::string_view s(bytes_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  std::size_t position() const { return pos_; }
  void seek(std::size_t pos) { pos_ = pos; }

 private:
  void need(std::size_t n) const {
    if (n > end_ - pos_)
      throw checkpoint_error(cat("checkpoint '", file_, "' is corrupted: an entry at byte ", pos_,
                                 " runs past the end of the data"));
  }
  const std::string& bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
  const std::string& file_;
};

struct entry {
  kind k;
  std::string name;
  std::uint32_t type;
  shape_t shape;
  std::size_t offset;  // of the data in the file
  std::size_t bytes;
};

// ---- file I/O: POSIX calls, for fsync and for errno in every message ---------------------------

// A file descriptor, closed when it goes out of scope (unless closed or released before).
class descriptor {
 public:
  explicit descriptor(int fd) : fd_(fd) {}
  descriptor(descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  ~descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  // Closes now and returns errno on failure (0 on success): a failed close can be a failed write.
  int close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// Writes all n bytes; returns 0 or the errno of the failed write.
inline int write_fully(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ::ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

// Reads up to n bytes (fewer only at the end of the file); returns the count, or -errno.
inline ::ssize_t read_fully(int fd, char* p, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ::ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return static_cast<::ssize_t>(got);
}

// A new, empty file beside `path`, of a name no other save uses (the process id and a random
// number: another process or thread saving to the same path writes its own), opened for writing.
inline descriptor create_temporary(const std::filesystem::path& path, std::string& name) {
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    // splitmix64 of what differs between saves: the clock, a per-process counter, the thread.
    std::uint64_t x =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (counter.fetch_add(1) << 40) ^ std::hash<std::thread::id>{}(std::this_thread::get_id());
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%016llx", static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(x));
    name = path.string() + suffix;
    descriptor f(::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (f.is_open() || errno != EEXIST || attempt == 100) return f;
  }
}

// Makes a rename in `dir` durable. Filesystems that cannot sync a directory say EINVAL: nothing
// more can be done there.
inline int sync_directory(const std::filesystem::path& dir) {
  descriptor d(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.is_open()) return errno;
  if (::fsync(d.get()) != 0 && errno != EINVAL) return errno;
  return d.close();
}

// Writes `bytes` to `path` through a temporary file (see the top of this file).
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  const std::string target = path.string();
  std::string tmp;
  descriptor f = create_temporary(path, tmp);
  if (!f.is_open())
    throw checkpoint_error(cat("cannot write checkpoint '", target, "': cannot create '", tmp,
                               "': ", std::strerror(errno)));
  auto fail = [&](const char* step, int error) {
    if (f.is_open()) f.close();
    ::unlink(tmp.c_str());
    return checkpoint_error(cat("cannot write checkpoint '", target, "': ", step, " '", tmp,
                                "' failed: ", std::strerror(error),
                                " (the temporary file is removed; '", target, "' is unchanged)"));
  };
  if (const int e = write_fully(f.get(), bytes.data(), bytes.size())) throw fail("writing", e);
  if (::fsync(f.get()) != 0) throw fail("syncing", errno);
  if (const int e = f.close()) throw fail("closing", e);
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw checkpoint_error(cat("cannot rename '", tmp, "' to '", target, "': ", std::strerror(e),
                               " (the temporary file is removed)"));
  }
  if (const int e = sync_directory(path.parent_path()))
    throw checkpoint_error(cat("checkpoint '", target, "' was written, but syncing its directory '",
                               path.parent_path().string(), "' failed: ", std::strerror(e)));
}

// A checkpoint file's size and bytes: all of them, or only the header when the size it declares
// is not the file's (then load() reports the truncation or the extra bytes from the sizes alone).
struct file_contents {
  std::string bytes;
  std::uint64_t size = 0;
};

// Reads a checkpoint file. The header is read and checked first (the magic, and the declared
// size against the file's), so that a directory, a device or another kind of file is refused
// from its first bytes, and nothing larger than the file is ever allocated.
inline file_contents read_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  descriptor f(::open(name.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f.is_open())
    throw checkpoint_error(cat("cannot open checkpoint '", name, "': ", std::strerror(errno)));
  struct ::stat st {};
  if (::fstat(f.get(), &st) != 0)
    throw checkpoint_error(cat("cannot read checkpoint '", name, "': ", std::strerror(errno)));
  if (S_ISDIR(st.st_mode))
    throw checkpoint_error(cat("checkpoint '", name, "' is a directory, not a checkpoint file"));
  auto read_error = [&](::ssize_t r) {
    return checkpoint_error(
        cat("cannot read checkpoint '", name, "': ", std::strerror(static_cast<int>(-r))));
  };
  // A regular file's size is known; anything else (a pipe, a device) is read in pieces up to one
  // byte past the size its header declares.
  const bool sized = S_ISREG(st.st_mode);
  file_contents out;
  out.bytes.resize(header_bytes);
  const ::ssize_t got = read_fully(f.get(), out.bytes.data(), header_bytes);
  if (got < 0) throw read_error(got);
  out.bytes.resize(static_cast<std::size_t>(got));
  out.size = sized ? static_cast<std::uint64_t>(st.st_size) : out.bytes.size();
  if (std::memcmp(out.bytes.data(), magic, std::min(out.bytes.size(), sizeof magic)) != 0)
    throw checkpoint_error(
        cat("'", name, "' is not a meld checkpoint (it does not start with \"MELDCKPT\")"));
  if (out.bytes.size() < header_bytes) {  // shorter than a header (now, if it was not before)
    out.size = out.bytes.size();
    return out;
  }
  std::uint64_t declared;
  copy_little_endian(&declared, out.bytes.data() + 16, 1, 8);
  if (sized && declared != out.size) return out;
  const std::uint64_t limit = sized ? out.size : std::min(declared, std::uint64_t(1) << 62) + 1;
  while (out.bytes.size() < limit) {
    const std::size_t at = out.bytes.size();
    const std::size_t piece =
        static_cast<std::size_t>(sized ? limit - at : std::min<std::uint64_t>(limit - at, 1 << 20));
    out.bytes.resize(at + piece);
    const ::ssize_t r = read_fully(f.get(), out.bytes.data() + at, piece);
    if (r < 0) throw read_error(r);
    out.bytes.resize(at + static_cast<std::size_t>(r));
    if (static_cast<std::size_t>(r) < piece) break;  // the end of the file
  }
  if (!sized) out.size = out.bytes.size();
  if (out.bytes.size() != out.size)  // the file changed while it was read
    throw checkpoint_error(cat("checkpoint '", name, "' changed while it was read (", out.size,
                               " bytes, then ", out.bytes.size(), ")"));
  return out;
}

// An array to write: data points at `count` host elements of type `type`.
struct record {
  kind k;
  std::string name;
  std::uint32_t type;
  shape_t shape;
  const void* data;
  std::size_t count;
};

// The bytes of a checkpoint file holding `records` (their (kind, name) pairs distinct).
inline std::string encode(std::uint32_t element_type, const std::vector<record>& records) {
  writer w;
  w.put_bytes(magic, sizeof magic);
  w.put<std::uint32_t>(format_version);
  w.put<std::uint32_t>(element_type);
  w.put<std::uint64_t>(0);  // the file size, filled in below
  w.put<std::uint64_t>(records.size());
  for (const record& s : records) {
    w.put<std::uint8_t>(static_cast<std::uint8_t>(s.k));
    w.put<std::uint32_t>(static_cast<std::uint32_t>(s.name.size()));
    w.put_bytes(s.name.data(), s.name.size());
    w.put<std::uint32_t>(s.type);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(s.shape.size()));
    for (index_t d : s.shape) w.put<std::int64_t>(d);
    const std::size_t size = element_code_size(s.type);
    w.put<std::uint64_t>(s.count * size);
    w.put_elements(s.data, s.count, size);
  }
  std::string& bytes = w.bytes();
  const std::uint64_t total = bytes.size() + checksum_bytes;
  copy_little_endian(bytes.data() + 16, &total, 1, 8);
  const std::uint32_t crc =
      crc32(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  w.put<std::uint32_t>(crc);
  return std::move(w.bytes());
}

// A checkpoint file read and checked: its element type, its entries (in bounds, each (kind,
// name) once, the checksum verified) and its bytes.
struct checked_file {
  std::string file;
  std::uint32_t type = 0;
  std::vector<entry> entries;
  std::string bytes;

  const entry* find(kind k, std::string_view name) const {
    for (const entry& e : entries)
      if (e.k == k && e.name == name) return &e;
    return nullptr;
  }
  // Copies entry e's elements (converted from little-endian) to dst.
  void copy(const entry& e, void* dst) const {
    const std::size_t size = element_code_size(e.type);
    copy_little_endian(dst, bytes.data() + e.offset, e.bytes / size, size);
  }
};

// Reads and checks a checkpoint file (see the top of this file).
inline checked_file decode(const std::filesystem::path& path) {
  const std::string file = path.string();
  file_contents raw = read_file(path);  // the magic is checked
  const std::string& bytes = raw.bytes;

  const std::uint64_t size = raw.size;
  if (size < header_bytes + checksum_bytes)
    throw checkpoint_error(
        cat("checkpoint '", file, "' is truncated: ", size, " bytes, shorter than its header"));
  reader header(bytes, header_bytes, file);
  header.seek(sizeof magic);
  const auto version = header.get<std::uint32_t>();
  if (version != format_version)
    throw checkpoint_error(cat("checkpoint '", file, "' has format version ", version,
                               "; this build of meld reads version ", format_version));
  const auto type = header.get<std::uint32_t>();
  const auto total = header.get<std::uint64_t>();
  const auto count = header.get<std::uint64_t>();
  if (size < total)
    throw checkpoint_error(
        cat("checkpoint '", file, "' is truncated: ", size, " of ", total, " bytes"));
  if (size > total)
    throw checkpoint_error(cat("checkpoint '", file, "' has ", size - total,
                               " unexpected bytes after its end (", total, " bytes)"));
  // Here the whole file has been read: bytes.size() == size == total.
  const std::size_t body = bytes.size() - checksum_bytes;
  std::uint32_t stored;
  copy_little_endian(&stored, bytes.data() + body, 1, 4);
  if (crc32(reinterpret_cast<const unsigned char*>(bytes.data()), body) != stored)
    throw checkpoint_error(
        cat("checkpoint '", file, "' is corrupted: its checksum does not match its contents"));

  // Entries.
  reader r(bytes, body, file);
  r.seek(header_bytes);
  std::vector<entry> entries;  // checked: in bounds, each (kind, name) once
  for (std::uint64_t i = 0; i < count; ++i) {
    entry e;
    const auto k = r.get<std::uint8_t>();
    if (k < 1 || k > last_kind)
      throw checkpoint_error(
          cat("checkpoint '", file, "' is corrupted: entry ", i, " has unknown kind ", int(k)));
    e.k = static_cast<kind>(k);
    const auto name_len = r.get<std::uint32_t>();
    if (name_len > max_name_bytes)
      throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: entry ", i,
                                 " has a name of ", name_len, " bytes"));
    e.name = std::string(r.take(name_len));
    e.type = r.get<std::uint32_t>();
    if (e.type < 1 || e.type > 4)
      throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: ", kind_name(e.k), " '",
                                 e.name, "' has unknown element type ", e.type));
    const auto rank = r.get<std::uint32_t>();
    if (rank > static_cast<std::uint32_t>(max_rank))
      throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: ", kind_name(e.k), " '",
                                 e.name, "' has rank ", rank));
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < rank; ++d) {
      const auto extent = r.get<std::int64_t>();
      if (extent < 0 || (extent > 0 && elements > (std::uint64_t(1) << 62) / std::uint64_t(extent)))
        throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: ", kind_name(e.k), " '",
                                   e.name, "' has extent ", extent));
      e.shape.push_back(extent);
      elements *= static_cast<std::uint64_t>(extent);
    }
    const auto data_bytes = r.get<std::uint64_t>();
    if (data_bytes != elements * element_code_size(e.type))
      throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: ", kind_name(e.k), " '",
                                 e.name, "' of shape ", e.shape, " has ", data_bytes,
                                 " bytes of data"));
    e.offset = r.position();
    e.bytes = static_cast<std::size_t>(data_bytes);
    r.take(e.bytes);
    for (const entry& other : entries)
      if (other.k == e.k && other.name == e.name)
        throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: ", kind_name(e.k), " '",
                                   e.name, "' appears twice"));
    entries.push_back(std::move(e));
  }
  if (r.position() != body)
    throw checkpoint_error(cat("checkpoint '", file, "' is corrupted: ", body - r.position(),
                               " bytes after its last entry"));

  checked_file out;
  out.file = file;
  out.type = type;
  out.entries = std::move(entries);
  out.bytes = std::move(raw.bytes);
  return out;
}

}  // namespace detail::ckpt

/// @}

}  // namespace meld
