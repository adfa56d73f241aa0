// libFuzzer target: the examples' Fashion-MNIST loader (examples/fashion_mnist.hpp) on arbitrary
// bytes. The first two bytes of the input give the length of the images file, the rest after it is
// the labels file; both are written as they are (zlib reads a file that is not gzip as it is, and
// a gzip one decompressed). The loader must return a well-formed data set or throw
// fashion_mnist::load_error: another exception, a crash or a sanitizer report is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "fashion_mnist.hpp"

namespace {

// The two files, in the working directory (CTest's is build/.../tests/fuzz/fuzz_idx), rewritten
// for every input. (libFuzzer ends without running atexit handlers: a directory of its own per
// process would stay behind after every run.)
const std::filesystem::path& directory() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = "fuzz_idx.input";
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const std::filesystem::path& p, const std::uint8_t* data, std::size_t n) {
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f || std::fwrite(data, 1, n, f) != n || std::fclose(f) != 0) {
    std::perror(p.c_str());
    std::abort();  // the harness, not the loader
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t images = std::min<std::size_t>(size - 2, std::size_t(data[0]) << 8 | data[1]);
  const auto split = fashion_mnist::split::test;
  write(fashion_mnist::images_file(directory(), split), data + 2, images);
  write(fashion_mnist::labels_file(directory(), split), data + 2 + images, size - 2 - images);
  try {
    const fashion_mnist::dataset d = fashion_mnist::load(directory(), split);
    const meld::index_t n = d.size();
    if (n < 1 || !(d.images.shape() == meld::shape_t{n, 1, 28, 28})) std::abort();
    for (float x : d.images)
      if (!(x >= 0 && x <= 255)) std::abort();
    for (std::int64_t y : d.labels)
      if (y < 0 || y >= fashion_mnist::classes) std::abort();
  } catch (const fashion_mnist::load_error&) {
  }
  return 0;
}
