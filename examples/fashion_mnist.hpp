// Fashion-MNIST from its gzip-compressed IDX files (as Debian's dataset-fashion-mnist installs
// them under /usr/share/datasets/fashion-mnist/), read with zlib, into meld tensors:
//
//   fashion_mnist::dataset train = fashion_mnist::load(dir, fashion_mnist::split::train);
//   train.images   tensor<float>        {n, 1, 28, 28}, pixel values 0..255
//   train.labels   tensor<std::int64_t> {n}, classes 0..9
//   train.pixels   std::vector<std::uint8_t> {n 28 28}, the images as the file's bytes (what the
//                  input pipeline gathers batches from)
//
// A missing, truncated or malformed file, or one of no images, throws fashion_mnist::load_error
// naming the file and what is wrong with it. standardization_of / standardize scale pixels to
// mean 0 and deviation 1 (constant images are only centred). Shared by the training examples.
#pragma once

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <meld/meld.hpp>

namespace fashion_mnist {

inline constexpr const char* default_directory = "/usr/share/datasets/fashion-mnist";
inline constexpr int classes = 10;
inline constexpr int rows = 28, cols = 28;
inline constexpr const char* class_names[classes] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

class load_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class split { train, test };

// What standardizes pixels to mean 0 and standard deviation 1: x' = (x - mean) * scale, from the
// training set (and applied to both splits). Images that are all the same value (deviation 0)
// get scale 1, and `constant` says so: dividing by their deviation would make every input NaN.
struct standardization {
  float mean = 0, scale = 1;
  bool constant = false;
};

struct dataset {
  meld::tensor<float> images;         // {n, 1, 28, 28}, 0..255 (until standardized)
  meld::tensor<std::int64_t> labels;  // {n}
  // The same images as the file's bytes, and what maps them to `images`: images = (pixels -
  // from_pixels.mean) * from_pixels.scale, bit for bit. The input pipeline gathers its batches
  // from these, a quarter of the bytes to read (batch_pipeline.hpp). Empty when `images` no longer
  // follow from them (standardized twice).
  std::vector<std::uint8_t> pixels;
  standardization from_pixels;
  meld::index_t size() const { return labels.size(); }
};

// The two files of a split.
inline std::filesystem::path images_file(const std::filesystem::path& dir, split s) {
  return dir / (s == split::train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz");
}
inline std::filesystem::path labels_file(const std::filesystem::path& dir, split s) {
  return dir / (s == split::train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz");
}

namespace detail {

// The whole decompressed content of a gzip file (a plain file is read as it is, as zlib does).
inline std::vector<unsigned char> read_gzip(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw load_error(name +
                     ": no such file (install Debian's dataset-fashion-mnist package, or "
                     "pass --data with the directory holding the four IDX files)");
  gzFile f = gzopen(name.c_str(), "rb");
  if (!f) throw load_error(name + ": cannot open: " + std::strerror(errno));
  std::vector<unsigned char> out;
  unsigned char buffer[1 << 16];
  for (;;) {
    const int n = gzread(f, buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(f, &code);
      gzclose(f);
      throw load_error(name + ": not a valid gzip file (" + why + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buffer, buffer + n);
  }
  // A gzip stream cut short reads as a short file; zlib reports it at close.
  int code = 0;
  const std::string why = gzerror(f, &code);
  gzclose(f);
  if (code != Z_OK && code != Z_STREAM_END)
    throw load_error(name + ": not a valid gzip file (" + why + ")");
  return out;
}

inline std::uint32_t big_endian32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// Checks an IDX header (unsigned bytes, the given rank) and returns its extents.
inline std::vector<std::uint32_t> idx_extents(const std::vector<unsigned char>& bytes, int rank,
                                              const std::string& name) {
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() < header)
    throw load_error(name + ": truncated: " + std::to_string(bytes.size()) +
                     " bytes, shorter than an IDX header");
  if (bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] != rank)
    throw load_error(name + ": not an IDX file of unsigned bytes with " + std::to_string(rank) +
                     " dimensions (magic " + std::to_string(big_endian32(bytes.data())) +
                     ", expected " + std::to_string(0x800 + rank) + ")");
  std::vector<std::uint32_t> extents;
  std::uint64_t count = 1;
  bool overflow = false;  // three extents of 2^22 announce 2^66 bytes, which wraps to 0
  for (int i = 0; i < rank; ++i) {
    extents.push_back(big_endian32(bytes.data() + 4 + 4 * i));
    overflow = overflow || (extents.back() != 0 && count > UINT64_MAX / extents.back());
    count *= extents.back();
  }
  if (overflow)
    throw load_error(name + ": the header's extents announce more than 2^64 bytes of data");
  if (bytes.size() - header != count)
    throw load_error(name + ": " + (bytes.size() - header < count ? "truncated" : "too long") +
                     ": the header announces " + std::to_string(count) +
                     " bytes of data, the file has " + std::to_string(bytes.size() - header));
  return extents;
}

}  // namespace detail

// Loads a split; `limit` > 0 keeps only its first `limit` samples.
inline dataset load(const std::filesystem::path& dir, split s, meld::index_t limit = 0) {
  const std::filesystem::path image_path = images_file(dir, s), label_path = labels_file(dir, s);
  const std::string image_name = image_path.string(), label_name = label_path.string();
  const std::vector<unsigned char> image_bytes = detail::read_gzip(image_path);
  const auto ie = detail::idx_extents(image_bytes, 3, image_name);
  if (ie[1] != rows || ie[2] != cols)
    throw load_error(image_name + ": images are " + std::to_string(ie[1]) + "x" +
                     std::to_string(ie[2]) + ", expected 28x28");
  const std::vector<unsigned char> label_bytes = detail::read_gzip(label_path);
  const auto le = detail::idx_extents(label_bytes, 1, label_name);
  if (le[0] != ie[0])
    throw load_error(label_name + ": " + std::to_string(le[0]) + " labels for " +
                     std::to_string(ie[0]) + " images in " + image_name);

  if (ie[0] == 0)
    throw load_error(image_name +
                     ": holds no images (its header says 0): nothing to train or "
                     "test on");
  const meld::index_t n = limit > 0 ? std::min<meld::index_t>(limit, ie[0]) : ie[0];
  dataset d{meld::tensor<float>({n, 1, rows, cols}, meld::uninitialized),
            meld::tensor<std::int64_t>({n}, meld::uninitialized),
            {},
            {}};
  const unsigned char* pixels = image_bytes.data() + 16;
  d.pixels.assign(pixels, pixels + n * rows * cols);
  float* out = d.images.data();
  for (meld::index_t i = 0; i < n * rows * cols; ++i) out[i] = static_cast<float>(pixels[i]);
  const unsigned char* labels = label_bytes.data() + 8;
  std::int64_t* lab = d.labels.data();
  for (meld::index_t i = 0; i < n; ++i) {
    if (labels[i] >= classes)
      throw load_error(label_name + ": label " + std::to_string(labels[i]) + " of sample " +
                       std::to_string(i) + " is not a class 0..9");
    lab[i] = labels[i];
  }
  return d;
}

inline standardization standardization_of(const dataset& train) {
  if (train.size() == 0) throw load_error("standardization: the training set has no images");
  const float mean = meld::mean(train.images);
  const double deviation =
      std::sqrt(static_cast<double>(meld::mean(meld::square(train.images - mean))));
  const double scale = 1.0 / deviation;
  if (!(deviation > 0) || !std::isfinite(static_cast<float>(scale))) return {mean, 1.f, true};
  return {mean, static_cast<float>(scale), false};
}

inline void standardize(dataset& d, const standardization& s) {
  d.images = (d.images - s.mean) * s.scale;
  // The bytes still give the images when they were the bytes' values: (p - 0) * 1 is p.
  const bool from_bytes = d.from_pixels.mean == 0 && d.from_pixels.scale == 1;
  if (from_bytes)
    d.from_pixels = s;
  else
    d.pixels.clear();
}

}  // namespace fashion_mnist
