// The Fashion-MNIST loader of the examples on IDX files written here: a valid pair loads; a
// missing file, bad gzip, wrong magic, wrong image size, truncated data, label out of range and
// mismatched counts are each refused with a message naming the file.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../support.hpp"
#include "batch_pipeline.hpp"
#include "fashion_mnist.hpp"

namespace fs = std::filesystem;

namespace {

void write_gz(const fs::path& p, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  REQUIRE(f);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
  gzclose(f);
}

void put32(std::vector<unsigned char>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<unsigned char>(x >> s));
}

std::vector<unsigned char> images(std::uint32_t n, std::uint32_t rows = 28,
                                  std::uint32_t cols = 28) {
  std::vector<unsigned char> v = {0, 0, 8, 3};
  put32(v, n);
  put32(v, rows);
  put32(v, cols);
  for (std::uint32_t i = 0; i < n * rows * cols; ++i)
    v.push_back(static_cast<unsigned char>(i * 7));
  return v;
}
std::vector<unsigned char> labels(std::uint32_t n) {
  std::vector<unsigned char> v = {0, 0, 8, 1};
  put32(v, n);
  for (std::uint32_t i = 0; i < n; ++i) v.push_back(static_cast<unsigned char>(i % 10));
  return v;
}

struct fixture {
  fs::path dir = fs::temp_directory_path() / "meld_test_fashion_mnist";
  fixture() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~fixture() { fs::remove_all(dir); }
  fs::path images_path() const {
    return fashion_mnist::images_file(dir, fashion_mnist::split::test);
  }
  fs::path labels_path() const {
    return fashion_mnist::labels_file(dir, fashion_mnist::split::test);
  }
  std::string error() const {
    return test::message_of<fashion_mnist::load_error>(
        [&] { fashion_mnist::load(dir, fashion_mnist::split::test); });
  }
};

}  // namespace

TEST_CASE("fashion_mnist: a valid IDX pair loads, with a limit", "[nn]") {
  fixture f;
  write_gz(f.images_path(), images(5));
  write_gz(f.labels_path(), labels(5));
  const auto d = fashion_mnist::load(f.dir, fashion_mnist::split::test);
  REQUIRE(d.images.shape() == meld::shape_t{5, 1, 28, 28});
  REQUIRE(d.labels.shape() == meld::shape_t{5});
  REQUIRE(d.images(1, 0, 0, 3) == float(static_cast<unsigned char>((784 + 3) * 7)));
  REQUIRE(d.labels(4) == 4);
  const auto few = fashion_mnist::load(f.dir, fashion_mnist::split::test, 2);
  REQUIRE(few.size() == 2);
}

TEST_CASE("fashion_mnist: every malformed input is named", "[nn]") {
  fixture f;
  const std::string img = f.images_path().string(), lab = f.labels_path().string();
  REQUIRE_THAT(f.error(),
               Catch::Matchers::Contains(img) && Catch::Matchers::Contains("no such file"));

  write_gz(f.images_path(), images(3));
  REQUIRE_THAT(f.error(),
               Catch::Matchers::Contains(lab) && Catch::Matchers::Contains("no such file"));

  write_gz(f.labels_path(), labels(4));
  REQUIRE_THAT(f.error(), Catch::Matchers::Contains("4 labels for 3 images"));

  auto bad_magic = images(3);
  bad_magic[2] = 9;
  write_gz(f.images_path(), bad_magic);
  REQUIRE_THAT(f.error(),
               Catch::Matchers::Contains(img) && Catch::Matchers::Contains("not an IDX file"));

  write_gz(f.images_path(), images(3, 20, 20));
  REQUIRE_THAT(f.error(), Catch::Matchers::Contains("images are 20x20, expected 28x28"));

  auto short_images = images(3);
  short_images.resize(short_images.size() - 10);
  write_gz(f.images_path(), short_images);
  REQUIRE_THAT(f.error(), Catch::Matchers::Contains(img) && Catch::Matchers::Contains("truncated"));

  write_gz(f.images_path(), images(3));
  auto bad_label = labels(3);
  bad_label.back() = 12;
  write_gz(f.labels_path(), bad_label);
  REQUIRE_THAT(f.error(),
               Catch::Matchers::Contains(lab) && Catch::Matchers::Contains("label 12 of sample 2"));

  // A gzip stream cut in the middle.
  write_gz(f.labels_path(), labels(3));
  {
    std::string gz;
    {
      std::ifstream in(f.images_path(), std::ios::binary);
      gz.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::ofstream out(f.images_path(), std::ios::binary | std::ios::trunc);
    out.write(gz.data(), static_cast<std::streamsize>(gz.size() / 2));
  }
  REQUIRE_THAT(f.error(), Catch::Matchers::Contains(img));
}

TEST_CASE("fashion_mnist: a set of no images is refused, naming the file", "[nn]") {
  fixture f;
  write_gz(f.images_path(), images(0));
  write_gz(f.labels_path(), labels(0));
  REQUIRE_THAT(f.error(), Catch::Matchers::Contains(f.images_path().string()) &&
                              Catch::Matchers::Contains("holds no images"));
  // Extents whose product wraps around 2^64 (to 0, here) are not an empty file.
  std::vector<unsigned char> wrap = {0, 0, 8, 3};
  for (int i = 0; i < 3; ++i) put32(wrap, 1u << 22);
  write_gz(f.images_path(), wrap);
  REQUIRE_THAT(f.error(), Catch::Matchers::Contains("more than 2^64 bytes"));
}

TEST_CASE("fashion_mnist: constant images are centred, never divided by a zero deviation", "[nn]") {
  fixture f;
  std::vector<unsigned char> flat = {0, 0, 8, 3};
  for (std::uint32_t x : {3u, 28u, 28u}) put32(flat, x);
  flat.resize(flat.size() + 3 * 784, 7);
  write_gz(f.images_path(), flat);
  write_gz(f.labels_path(), labels(3));
  auto d = fashion_mnist::load(f.dir, fashion_mnist::split::test);
  const auto norm = fashion_mnist::standardization_of(d);
  REQUIRE(norm.constant);
  REQUIRE(norm.mean == 7.f);
  REQUIRE(norm.scale == 1.f);
  fashion_mnist::standardize(d, norm);
  for (float x : d.images) REQUIRE(x == 0.f);

  // Ordinary images: mean 0 and deviation 1 afterwards, against sums in double.
  write_gz(f.images_path(), images(4));
  write_gz(f.labels_path(), labels(4));
  d = fashion_mnist::load(f.dir, fashion_mnist::split::test);
  const auto s = fashion_mnist::standardization_of(d);
  REQUIRE_FALSE(s.constant);
  fashion_mnist::standardize(d, s);
  double sum = 0, squares = 0;
  for (float x : d.images) sum += x, squares += double(x) * x;
  const double n = double(d.images.size());
  REQUIRE(sum / n == Approx(0).margin(1e-5));
  REQUIRE(squares / n == Approx(1).epsilon(1e-4));
}

TEST_CASE("fashion_mnist: batches gathered from the bytes are the standardized images, bit for bit",
          "[nn]") {
  fixture f;
  write_gz(f.images_path(), images(5));
  write_gz(f.labels_path(), labels(5));
  auto d = fashion_mnist::load(f.dir, fashion_mnist::split::test);
  REQUIRE(d.pixels.size() == 5 * 784);
  for (std::size_t i = 0; i < d.pixels.size(); ++i)
    REQUIRE(float(d.pixels[i]) == d.images.data()[i]);
  const std::vector<meld::index_t> order = {4, 0, 3, 1};
  meld::tensor<float> batch({0});
  meld::tensor<std::int64_t> batch_labels({0});
  auto same_rows = [&](meld::index_t first, meld::index_t count) {
    fashion_mnist::gather(d, order, first, count, batch, batch_labels);
    REQUIRE(batch.shape() == meld::shape_t{count, 1, 28, 28});
    for (meld::index_t i = 0; i < count; ++i) {
      const meld::index_t s = order[std::size_t(first + i)];
      REQUIRE(std::memcmp(batch.data() + i * 784, d.images.data() + s * 784, 784 * sizeof(float)) ==
              0);
      REQUIRE(batch_labels.data()[i] == d.labels.data()[s]);
    }
  };
  same_rows(0, 3);  // the raw values
  fashion_mnist::standardize(d, fashion_mnist::standardization_of(d));
  REQUIRE(d.pixels.size() == 5 * 784);
  REQUIRE(d.images.data()[1] != float(d.pixels[1]));
  same_rows(1, 3);  // (p - mean) * scale, as the tensor expression computed it
  // Standardized twice, the images no longer follow from the bytes: gathered as floats.
  fashion_mnist::standardize(d, {0.5f, 2.f, false});
  REQUIRE(d.pixels.empty());
  same_rows(0, 4);
}
