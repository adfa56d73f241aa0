// Checkpoints: a model's parameters and buffers, and optionally an optimizer's state, in a
// versioned binary file.
//
//   nn::save_checkpoint("model.ckpt", model);          nn::load_checkpoint("model.ckpt", model);
//   nn::save_checkpoint("run.ckpt", model, optimizer);  nn::load_checkpoint("run.ckpt", model,
//   optimizer);
//
// Loading checks everything before it changes anything: a missing, truncated or corrupted file,
// another format version, another element type, or names and shapes that differ from the model's
// throw nn::checkpoint_error with a message naming the file and what is wrong, and leave the
// model and the optimizer unchanged. Saving writes a temporary file beside the target and renames
// it, so an interrupted save never leaves a half-written checkpoint under the target's name.
//
// Format (version 1), all integers little-endian:
//   "MELDCKPT"  u32 version  u32 element type  u64 file size  u64 entry count
//   entries:    u8 kind (1 parameter, 2 buffer, 3 optimizer state)  u32 name length  name
//               u32 element type  u32 rank  i64 extents[rank]  u64 data bytes  data
//   u32 CRC-32 (IEEE 802.3) of every byte before it
// Element types: 1 float32, 2 float64, 3 int32, 4 int64. Optimizer counters (steps) are int64
// entries of rank 0.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../tensor/convert.hpp"
#include "layer.hpp"
#include "optim/optimizer.hpp"
#include "require_model.hpp"

namespace meld::nn {

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

enum class kind : std::uint8_t { parameter = 1, buffer = 2, optimizer = 3 };

inline const char* kind_name(kind k) {
  switch (k) {
    case kind::parameter:
      return "parameter";
    case kind::buffer:
      return "buffer";
    default:
      return "optimizer state";
  }
}

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32).
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

// Something of the model or optimizer that a checkpoint holds, staged in host memory: tensors
// (of any backend) go through explicit host copies, made by meld::to when saving, and written
// back by commit() once a load has checked everything.
struct slot {
  kind k;
  std::string name;
  std::uint32_t type;
  shape_t shape;
  void* data;         // host memory: the staging copy, or a host value (a step counter)
  std::size_t count;  // elements
  std::shared_ptr<void> staging;
  std::function<void()> commit;  // load: from the staging copy into the tensor
};

enum class staging { save, load };

template <class X>
slot tensor_slot(kind k, std::string_view name, X& t, staging mode) {
  using T = typename X::value_type;
  using B = typename X::backend_type;
  auto host = std::make_shared<tensor<T, cpu<>>>(
      mode == staging::save ? to<cpu<>>(t) : tensor<T, cpu<>>(t.shape(), uninitialized));
  slot s{k,
         std::string(name),
         element_code<T>(),
         t.shape(),
         host->data(),
         static_cast<std::size_t>(t.size()),
         host,
         {}};
  if (mode == staging::load)
    s.commit = [&t, host] {
      if (t.size()) executor<B>::copy_from_host(t, static_cast<const T*>(host->data()));
    };
  return s;
}

// The slots of a model (and optimizer), in visiting order.
template <class M>
void model_slots(M& model, std::vector<slot>& out, staging mode) {
  model.visit_parameters([&](std::string_view name, auto& p, auto&) {
    out.push_back(tensor_slot(kind::parameter, name, p, mode));
  });
  model.visit_buffers([&](std::string_view name, auto& b) {
    out.push_back(tensor_slot(kind::buffer, name, b, mode));
  });
}

template <class O>
void optimizer_slots(O& opt, std::vector<slot>& out, staging mode) {
  opt.visit_state([&](std::string_view name, auto& s) {
    using S = std::remove_cvref_t<decltype(s)>;
    if constexpr (std::is_same_v<S, std::int64_t>) {
      out.push_back({kind::optimizer,
                     std::string(name),
                     element_code<std::int64_t>(),
                     shape_t{},
                     &s,
                     1,
                     nullptr,
                     {}});
    } else {
      out.push_back(tensor_slot(kind::optimizer, name, s, mode));
    }
  });
}

inline void check_unique(const std::vector<slot>& slots) {
  for (std::size_t i = 0; i < slots.size(); ++i)
    for (std::size_t j = i + 1; j < slots.size(); ++j)
      if (slots[i].k == slots[j].k && slots[i].name == slots[j].name)
        throw checkpoint_error(cat("checkpoint: the model has two ", kind_name(slots[i].k),
                                   "s named '", slots[i].name, "'"));
}

inline void save(const std::filesystem::path& path, std::uint32_t element_type,
                 const std::vector<slot>& slots) {
  check_unique(slots);
  writer w;
  w.put_bytes(magic, sizeof magic);
  w.put<std::uint32_t>(format_version);
  w.put<std::uint32_t>(element_type);
  w.put<std::uint64_t>(0);  // the file size, filled in below
  w.put<std::uint64_t>(slots.size());
  for (const slot& s : slots) {
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

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw checkpoint_error(
          cat("cannot write checkpoint '", tmp.string(), "': ", std::strerror(errno)));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out)
      throw checkpoint_error(
          cat("cannot write checkpoint '", tmp.string(), "': ", std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw checkpoint_error(
        cat("cannot rename '", tmp.string(), "' to '", path.string(), "': ", ec.message()));
  }
}

// Reads and validates a checkpoint, then fills `slots` from it; nothing is written into them
// unless every check passes. Without with_optimizer, optimizer entries are ignored (a model alone
// can be loaded from a checkpoint that also holds optimizer state).
inline void load(const std::filesystem::path& path, std::uint32_t element_type,
                 const std::vector<slot>& slots, bool with_optimizer) {
  check_unique(slots);
  const std::string file = path.string();
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw checkpoint_error(cat("cannot open checkpoint '", file, "': ", std::strerror(errno)));
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw checkpoint_error(cat("cannot read checkpoint '", file, "'"));
  }
  if (std::memcmp(bytes.data(), magic, std::min(bytes.size(), sizeof magic)) != 0)
    throw checkpoint_error(
        cat("'", file, "' is not a meld checkpoint (it does not start with ", "\"MELDCKPT\")"));
  if (bytes.size() < header_bytes + checksum_bytes)
    throw checkpoint_error(cat("checkpoint '", file, "' is truncated: ", bytes.size(),
                               " bytes, shorter than its header"));
  reader header(bytes, header_bytes, file);
  header.seek(sizeof magic);
  const auto version = header.get<std::uint32_t>();
  if (version != format_version)
    throw checkpoint_error(cat("checkpoint '", file, "' has format version ", version,
                               "; this build of meld reads version ", format_version));
  const auto type = header.get<std::uint32_t>();
  const auto total = header.get<std::uint64_t>();
  const auto count = header.get<std::uint64_t>();
  if (bytes.size() < total)
    throw checkpoint_error(
        cat("checkpoint '", file, "' is truncated: ", bytes.size(), " of ", total, " bytes"));
  if (bytes.size() > total)
    throw checkpoint_error(cat("checkpoint '", file, "' has ", bytes.size() - total,
                               " unexpected bytes after its end (", total, " bytes)"));
  const std::size_t body = bytes.size() - checksum_bytes;
  std::uint32_t stored;
  copy_little_endian(&stored, bytes.data() + body, 1, 4);
  if (crc32(reinterpret_cast<const unsigned char*>(bytes.data()), body) != stored)
    throw checkpoint_error(
        cat("checkpoint '", file, "' is corrupted: its checksum does not match its contents"));
  if (type != element_type)
    throw checkpoint_error(cat("checkpoint '", file, "' holds ", element_code_name(type),
                               " values, the model has ", element_code_name(element_type)));

  // Entries.
  reader r(bytes, body, file);
  r.seek(header_bytes);
  std::vector<entry> entries;
  for (std::uint64_t i = 0; i < count; ++i) {
    entry e;
    const auto k = r.get<std::uint8_t>();
    if (k < 1 || k > 3)
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

  // Match entries and slots, both ways, before writing anything.
  std::vector<const entry*> source(slots.size(), nullptr);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const slot& s = slots[i];
    for (const entry& e : entries)
      if (e.k == s.k && e.name == s.name) source[i] = &e;
    const entry* e = source[i];
    if (!e)
      throw checkpoint_error(
          cat("checkpoint '", file, "' has no ", kind_name(s.k), " '", s.name, "'",
              s.k == kind::optimizer ? " (another kind of optimizer?)" : " (another model?)"));
    if (e->type != s.type)
      throw checkpoint_error(cat("checkpoint '", file, "': ", kind_name(s.k), " '", s.name,
                                 "' holds ", element_code_name(e->type), ", expected ",
                                 element_code_name(s.type)));
    if (!(e->shape == s.shape))
      throw checkpoint_error(cat("checkpoint '", file, "': ", kind_name(s.k), " '", s.name,
                                 "' has shape ", e->shape, ", the model has ", s.shape));
  }
  for (const entry& e : entries) {
    if (e.k == kind::optimizer && !with_optimizer) continue;
    bool known = false;
    for (const slot& s : slots) known = known || (e.k == s.k && e.name == s.name);
    if (!known)
      throw checkpoint_error(cat("checkpoint '", file, "' has ", kind_name(e.k), " '", e.name,
                                 "', which the ", e.k == kind::optimizer ? "optimizer" : "model",
                                 " does not have (another model?)"));
  }

  // Every check passed: copy into the staging copies, then into the tensors.
  for (std::size_t i = 0; i < slots.size(); ++i)
    copy_little_endian(slots[i].data, bytes.data() + source[i]->offset, slots[i].count,
                       element_code_size(slots[i].type));
  for (const slot& s : slots)
    if (s.commit) s.commit();
}

}  // namespace detail::ckpt

/// Saves the model's parameters and buffers to path (see the format above). Throws
/// checkpoint_error when the file cannot be written.
template <class M>
void save_checkpoint(const std::filesystem::path& path, M& model) {
  static_assert(require_model<M>(), "meld::nn::save_checkpoint: see the messages above");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::save);
  detail::ckpt::save(path, element_code<typename M::value_type>(), slots);
}

/// Saves the model's parameters and buffers and the optimizer's state to path.
template <class M, class O>
void save_checkpoint(const std::filesystem::path& path, M& model, O& optimizer) {
  static_assert(require_model<M>(), "meld::nn::save_checkpoint: see the messages above");
  static_assert(optim::optimizer<O>,
                "meld::nn::save_checkpoint: the third argument must satisfy meld::optim::optimizer "
                "(step(), zero_grad(), visit_state(f), model_type)");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::save);
  detail::ckpt::optimizer_slots(optimizer, slots, detail::ckpt::staging::save);
  detail::ckpt::save(path, element_code<typename M::value_type>(), slots);
}

/// Loads parameters and buffers; optimizer state in the file is ignored.
template <class M>
void load_checkpoint(const std::filesystem::path& path, M& model) {
  static_assert(require_model<M>(), "meld::nn::load_checkpoint: see the messages above");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::load);
  detail::ckpt::load(path, element_code<typename M::value_type>(), slots, false);
}

/// Loads parameters, buffers and the optimizer's state (all or nothing).
template <class M, class O>
void load_checkpoint(const std::filesystem::path& path, M& model, O& optimizer) {
  static_assert(require_model<M>(), "meld::nn::load_checkpoint: see the messages above");
  static_assert(optim::optimizer<O>,
                "meld::nn::load_checkpoint: the third argument must satisfy meld::optim::optimizer "
                "(step(), zero_grad(), visit_state(f), model_type)");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::load);
  detail::ckpt::optimizer_slots(optimizer, slots, detail::ckpt::staging::load);
  detail::ckpt::load(path, element_code<typename M::value_type>(), slots, true);
}

}  // namespace meld::nn
