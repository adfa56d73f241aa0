// .npy files and .npz archives: round trips through meld on every backend, files written by numpy
// read by meld and files written by meld read by numpy (tests/surface/npy_reference.py, skipped
// with a warning where /usr/bin/python3 has no numpy), and malformed files refused with the byte
// offset named.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "../backends.hpp"

namespace fs = std::filesystem;
using meld::shape_t;
using meld::tensor;

namespace {

// A directory of its own under the system's temporary directory, removed at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& tag) {
    path = fs::temp_directory_path() / ("meld_npy_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The bytes of a host tensor's elements (C order, this machine's byte order: little-endian).
template <class T>
std::vector<unsigned char> element_bytes(const tensor<T>& t) {
  std::vector<unsigned char> out(static_cast<std::size_t>(t.size()) * sizeof(T));
  if (t.size()) std::memcpy(out.data(), t.data(), out.size());
  return out;
}

bool have_numpy() {
  static const bool yes = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return yes;
}

int run_reference(const char* mode, const fs::path& dir) {
  const std::string cmd =
      std::string("/usr/bin/python3 ") + MELD_NPY_REFERENCE + " " + mode + " " + dir.string();
  return std::system(cmd.c_str());
}

// What npy_reference.py's checks compare numpy's reading with: the host tensor's elements
// (NAME.raw, little-endian C order), shape (NAME.shape) and element type (NAME.dtype), in dir.
template <class T>
void describe(const fs::path& dir, const std::string& name, const tensor<T>& h) {
  const auto bytes = element_bytes(h);
  std::ofstream(dir / (name + ".raw"), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::ofstream shape(dir / (name + ".shape"));
  for (auto n : h.shape()) shape << n << ' ';
  std::ofstream(dir / (name + ".dtype")) << meld::type_name<T>();
}

// The message of the npy_error that f throws ("" if none; another exception fails the test).
template <class F>
std::string npy_error_of(F&& f) {
  try {
    f();
  } catch (const meld::npy_error& e) {
    return e.what();
  }
  return "";
}

// A .npy image with the given header dict (padded as numpy pads it) and data bytes.
[[maybe_unused]] std::vector<unsigned char> make_npy(std::string dict,
                                                     const std::vector<unsigned char>& data,
                                                     int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::vector<unsigned char> out = {
      0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  for (std::size_t i = 0; i < prefix - 8; ++i)
    out.push_back(static_cast<unsigned char>((dict.size() >> (8 * i)) & 0xff));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Offset of `what` in an image made by make_npy with a version-1 header.
[[maybe_unused]] std::size_t offset_in(const std::vector<unsigned char>& image,
                                       const std::string& what) {
  const std::string s(image.begin(), image.end());
  return s.find(what);
}

template <class B, class T>
void check_round_trip(const tensor<T>& h, const fs::path& dir, const std::string& name) {
  INFO(name << " shape " << h.shape());
  const fs::path p = dir / (name + ".npy");
  const tensor<T, B> d = test::on<B>(h);
  meld::save_npy(p, d);
  const tensor<T, B> back = meld::load_npy<T, B>(p);
  REQUIRE(back.shape() == h.shape());
  REQUIRE(element_bytes(test::host(back)) == element_bytes(h));
}

}  // namespace

BACKEND_TEST_CASE("save_npy then load_npy gives the same tensor, bit for bit", "[surface]") {
  temp_dir dir(std::string("rt_") + B::name + (test::is_async<B> ? "_async" : "_sync"));
  auto f = test::random_tensor<float>({3, 4, 5}, 1, -1e3, 1e3);
  f.data()[0] = std::numeric_limits<float>::quiet_NaN();
  f.data()[1] = -std::numeric_limits<float>::infinity();
  check_round_trip<B>(f, dir.path, "f4");
  check_round_trip<B>(test::random_tensor<double>({7}, 2, -1e300, 1e300), dir.path, "f8");
  check_round_trip<B>(test::random_tensor<std::int32_t>({2, 3}, 3, -2e9, 2e9), dir.path, "i4");
  check_round_trip<B>(test::random_tensor<std::int64_t>({1, 1, 2, 1, 3}, 4, -9e18, 9e18), dir.path,
                      "i8");
  check_round_trip<B>(tensor<float>(shape_t{}), dir.path, "rank0");
  check_round_trip<B>(tensor<double>({0, 4}), dir.path, "empty");
  // A strided view of a device tensor is saved in C order of the view.
  const tensor<double> m = meld::arange<double>(12.).reshape({3, 4});
  const tensor<double, B> md = test::on<B>(m);
  meld::save_npy(dir.path / "view.npy", md.transpose().slice(meld::range(0, 4, 2)));
  const tensor<double> expect = m.transpose().slice(meld::range(0, 4, 2));
  const auto back = meld::load_npy<double, B>(dir.path / "view.npy");
  REQUIRE(back.shape() == shape_t{2, 3});
  REQUIRE(element_bytes(test::host(back)) == element_bytes(expect));
}

BACKEND_TEST_CASE("load_npy reads what numpy writes: every dtype, byte order, order and version",
                  "[surface]") {
  if (!have_numpy()) {
    WARN("/usr/bin/python3 has no numpy: the numpy half of the .npy tests is skipped");
    return;
  }
  temp_dir dir(std::string("np_") + B::name + (test::is_async<B> ? "_async" : "_sync"));
  REQUIRE(run_reference("write", dir.path) == 0);
  std::ifstream manifest(dir.path / "manifest.txt");
  int files = 0;
  for (std::string line; std::getline(manifest, line); ++files) {
    std::istringstream fields(line);
    std::string name, dtype;
    fields >> name >> dtype;
    shape_t shape;
    for (meld::index_t n; fields >> n;) shape.push_back(n);
    INFO(name << " " << dtype << " " << shape);
    const fs::path p = dir.path / (name + ".npy");
    const auto raw = read_bytes(dir.path / (name + ".raw"));
    auto check = [&](auto loaded) {
      REQUIRE(loaded.shape() == shape);
      REQUIRE(element_bytes(test::host(loaded)) == raw);
    };
    if (dtype == "float32")
      check(meld::load_npy<float, B>(p));
    else if (dtype == "float64")
      check(meld::load_npy<double, B>(p));
    else if (dtype == "int32")
      check(meld::load_npy<std::int32_t, B>(p));
    else
      check(meld::load_npy<std::int64_t, B>(p));
  }
  REQUIRE(files == 10);
}

BACKEND_TEST_CASE("numpy.load reads what save_npy writes", "[surface]") {
  if (!have_numpy()) {
    WARN("/usr/bin/python3 has no numpy: the numpy half of the .npy tests is skipped");
    return;
  }
  temp_dir dir(std::string("meld_") + B::name + (test::is_async<B> ? "_async" : "_sync"));
  auto write = [&](const std::string& name, const auto& h) {
    meld::save_npy(dir.path / (name + ".npy"), test::on<B>(h));
    describe(dir.path, name, h);
  };
  auto nan = test::random_tensor<float>({4, 5}, 7, -1e4, 1e4);
  nan.data()[3] = std::numeric_limits<float>::quiet_NaN();
  write("meld_f4", nan);
  write("meld_f8", test::random_tensor<double>({2, 3, 4}, 8, -1e300, 1e300));
  write("meld_i4", test::random_tensor<std::int32_t>({9}, 9, -2e9, 2e9));
  write("meld_i8", test::random_tensor<std::int64_t>({3, 1}, 10, -9e18, 9e18));
  write("meld_scalar", tensor<double>(shape_t{}));
  write("meld_empty", tensor<std::int32_t>({2, 0, 3}));
  REQUIRE(run_reference("check", dir.path) == 0);
}

HOST_TEST_CASE("load_npy refuses malformed files, naming the byte", "[surface]") {
  const tensor<float> t{{1, 2, 3}, {4, 5, 6}};
  const std::vector<unsigned char> good = meld::write_npy(t);
  REQUIRE(good.size() == 128 + 24);  // a header padded to 64-byte blocks, then 6 floats
  REQUIRE(meld::read_npy<float>(good).shape() == shape_t{2, 3});
  auto error = [](const std::vector<unsigned char>& bytes) {
    return npy_error_of([&] { (void)meld::read_npy<float>(bytes, "x.npy"); });
  };
  // Every truncation is an error that names a byte.
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::string e = error({good.begin(), good.begin() + static_cast<long>(n)});
    INFO("truncated to " << n << " bytes: " << e);
    REQUIRE(e.rfind("x.npy: byte ", 0) == 0);
  }
  REQUIRE(error({good.begin(), good.end() - 1}) ==
          "x.npy: byte 151: the file ends inside the data: shape {2, 3} of '<f4' needs 6 elements "
          "of 4 bytes from byte 128, and 23 bytes follow");
  auto extra = good;
  extra.push_back(0);
  REQUIRE(error(extra) == "x.npy: byte 152: 1 bytes follow the data of shape {2, 3}");
  auto bad_magic = good;
  bad_magic[2] = 'X';
  REQUIRE(error(bad_magic) ==
          "x.npy: byte 2: not a .npy file (the magic string \\x93NUMPY differs)");
  auto bad_version = good;
  bad_version[6] = 4;
  REQUIRE(error(bad_version) == "x.npy: byte 6: format version 4.0 is not 1.0, 2.0 or 3.0");

  const std::vector<unsigned char> four(4 * 2, 0);
  auto img = make_npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", four);
  REQUIRE(error(img) == "x.npy: byte " + std::to_string(offset_in(img, "Maybe")) +
                            ": 'fortran_order' is neither True nor False");
  img = make_npy("{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", four);
  REQUIRE(error(img).find("byte " + std::to_string(offset_in(img, "'<u2'")) +
                          ": dtype '<u2' is not one meld has") != std::string::npos);
  img = make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", four);
  REQUIRE(error(img).find("byte " + std::to_string(offset_in(img, "[(")) +
                          ": 'descr' is not a string") != std::string::npos);
  img = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", four);
  REQUIRE(error(img) == "x.npy: byte " + std::to_string(offset_in(img, "-2")) +
                            ": an extent of 'shape' is not a nonnegative integer");
  img = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                 four);
  REQUIRE(error(img) == "x.npy: byte " + std::to_string(offset_in(img, "4294967296)")) +
                            ": the element count of 'shape' does not fit in 64 bits");
  img = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000,), }", four);
  REQUIRE(error(img).find(": the file ends inside the data: shape {1000000}") != std::string::npos);
  img = make_npy("{'descr': '<f4', 'fortran_order': False, }", four);
  REQUIRE(error(img).find("the header lacks the key 'shape'") != std::string::npos);
  img = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", four);
  REQUIRE(error(img) == "x.npy: byte " + std::to_string(offset_in(img, "'extra'")) +
                            ": unknown key 'extra' (expected 'descr', 'fortran_order', 'shape')");
  img = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", four);
  img[12] = 200;  // inside 'descr': not ASCII
  REQUIRE(error(img) == "x.npy: byte 12: a byte of value 200 in the header, which is ASCII text");
  // Versions 2.0 and 3.0 have a 4-byte header length.
  REQUIRE(meld::read_npy<float>(
              make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", four, 2))
              .shape() == shape_t{2});
  REQUIRE(meld::read_npy<float>(
              make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", four, 3))
              .shape() == shape_t{2});
  // Another dtype than the one asked for names the reader to use.
  REQUIRE(npy_error_of([&] { (void)meld::read_npy<double>(good, "x.npy"); }) ==
          "x.npy: holds float32 ('<f4'), not float64: read it with load_npy<float> (and convert "
          "with meld::cast if need be)");
  REQUIRE(npy_error_of([] { (void)meld::load_npy<float>("/nonexistent/x.npy"); }) ==
          "load_npy: cannot open /nonexistent/x.npy");
}

// ---- .npz archives --------------------------------------------------------------------------

BACKEND_TEST_CASE("save_npz then load_npz gives the same arrays, by name", "[surface]") {
  temp_dir dir(std::string("npz_") + B::name + (test::is_async<B> ? "_async" : "_sync"));
  const auto w = test::random_tensor<float>({3, 4}, 41, -100, 100);
  const auto n = test::random_tensor<std::int64_t>({5}, 42, -9e18, 9e18);
  const fs::path file = dir.path / "m.npz";
  meld::save_npz(file, "weights", test::on<B>(w), "steps", test::on<B>(n), "scalar",
                 tensor<double>(shape_t{}));
  const meld::npz_archive a = meld::load_npz(file);
  REQUIRE(a.names() == std::vector<std::string>{"weights", "steps", "scalar"});
  REQUIRE(a.contains("steps"));
  REQUIRE_FALSE(a.contains("bias"));
  const tensor<float> w2 = test::host(a.get<float, B>("weights"));
  REQUIRE(element_bytes(w2) == element_bytes(w));
  REQUIRE(element_bytes(test::host(a.get<std::int64_t, B>("steps"))) == element_bytes(n));
  REQUIRE(a.get<double>("scalar").shape() == shape_t{});
  REQUIRE(npy_error_of([&] { (void)a.get<float>("bias"); }) ==
          file.string() + ": no array 'bias' (it holds 'weights', 'steps', 'scalar')");
  REQUIRE(npy_error_of([&] {
            (void)a.get<double>("weights");
          }).find(", member weights.npy: holds float32") != std::string::npos);
}

HOST_TEST_CASE("load_npz reads numpy.savez, numpy.load reads save_npz", "[surface]") {
  if (!have_numpy()) {
    WARN("/usr/bin/python3 has no numpy: the numpy half of the .npz tests is skipped");
    return;
  }
  temp_dir dir("npz_numpy");
  REQUIRE(run_reference("npz-write", dir.path) == 0);
  const meld::npz_archive a = meld::load_npz(dir.path / "numpy.npz");
  REQUIRE(a.names() == std::vector<std::string>{"weights", "bias", "counts", "index", "scalar"});
  auto expect = [&](const auto& t, const std::string& name) {
    INFO(name);
    std::ifstream shape_file(dir.path / (name + ".shape"));
    shape_t shape;
    for (long e; shape_file >> e;) shape.push_back(e);
    REQUIRE(t.shape() == shape);
    REQUIRE(element_bytes(t) == read_bytes(dir.path / (name + ".raw")));
  };
  expect(a.get<float>("weights"), "weights");
  expect(a.get<double>("bias"), "bias");
  expect(a.get<std::int32_t>("counts"), "counts");
  expect(a.get<std::int64_t>("index"), "index");  // Fortran order in the archive
  expect(a.get<double>("scalar"), "scalar");
  // numpy.savez_compressed: refused, saying why.
  const std::string compressed =
      npy_error_of([&] { (void)meld::load_npz(dir.path / "compressed.npz"); });
  INFO(compressed);
  REQUIRE(compressed.find("member 'weights.npy' is compressed (zip method 8, as "
                          "numpy.savez_compressed writes); meld reads stored members") !=
          std::string::npos);

  // The other way: meld's archive, read by numpy.
  meld::npz_writer w;
  auto add = [&](const std::string& name, const auto& t) {
    w.add(name, t);
    describe(dir.path, name, t);
  };
  add("m_f4", test::random_tensor<float>({4, 5}, 43, -1e4, 1e4));
  add("m_f8", test::random_tensor<double>({2, 3, 4}, 44, -1e300, 1e300));
  add("m_i4", test::random_tensor<std::int32_t>({9}, 45, -2e9, 2e9));
  add("m_empty", tensor<std::int64_t>({2, 0, 3}));
  w.save(dir.path / "meld.npz");
  REQUIRE(run_reference("npz-check", dir.path) == 0);
}

HOST_TEST_CASE("load_npz refuses malformed archives, naming the byte", "[surface]") {
  meld::npz_writer w;
  w.add("a", tensor<float>{{1, 2}, {3, 4}});
  w.add("b", meld::from_range<std::int32_t>({7, 8, 9}));
  const std::vector<unsigned char> good = w.bytes();
  REQUIRE(meld::npz_archive(good).get<std::int32_t>("b")(2) == 9);
  auto error = [](const std::vector<unsigned char>& bytes) {
    return npy_error_of([&] { meld::npz_archive(bytes, "x.npz"); });
  };
  // Every truncation and every flipped byte is an error naming a byte (a flipped byte inside a
  // member's data fails its CRC-32; one in a header, a signature, size or offset check).
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::string e = error({good.begin(), good.begin() + static_cast<long>(n)});
    INFO("truncated to " << n << " bytes: " << e);
    REQUIRE(e.rfind("x.npz: byte ", 0) == 0);
  }
  int refused = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0x5a;
    const std::string e = error(bad);
    if (e.empty()) continue;  // a field the reader does not use (time, version, attributes)
    INFO("byte " << i << " flipped: " << e);
    REQUIRE(e.rfind("x.npz: byte ", 0) == 0);
    ++refused;
  }
  REQUIRE(refused > static_cast<int>(good.size()) * 3 / 4);
  auto corrupt = good;
  corrupt[30 + 5 + 128] ^= 1;  // member a's first element, after its local header and npy header
  REQUIRE(error(corrupt).find("member 'a.npy' fails its CRC-32 check") != std::string::npos);
  REQUIRE(error({'P', 'K'}) ==
          "x.npz: byte 2: no zip end record (not an .npz archive, or truncated)");
  REQUIRE(npy_error_of([&] { w.add("a", tensor<float>({1})); }) ==
          "npz_writer::add: 'a' added twice");
  REQUIRE(npy_error_of([] { (void)meld::load_npz("/nonexistent/x.npz"); }) ==
          "load_npz: cannot open /nonexistent/x.npz");
}
