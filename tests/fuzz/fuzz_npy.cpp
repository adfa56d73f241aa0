// libFuzzer target: meld::read_npy on arbitrary bytes, for each element type, and the same bytes
// as an .npz archive (meld::npz_archive, then every member for each element type). A read must
// succeed or throw npy_error; a tensor that was read must survive write_npy and read_npy again
// with the same shape and the same element bits (the writer's C order and byte order against
// whatever order the input had). Another exception, a crash or a sanitizer report is a finding.
//
// The seeds under tests/fuzz/corpus/fuzz_npy are files numpy wrote (tests/surface/npy_reference.py
// write DIR): each dtype, both byte orders, Fortran order, header versions 1.0 to 3.0; and two
// archives (npz_*: numpy.savez's and meld's).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <meld/meld.hpp>

namespace {

template <class T>
void read_and_rewrite(std::span<const unsigned char> bytes) {
  meld::tensor<T> t;
  try {
    t = meld::read_npy<T>(bytes, "input");
  } catch (const meld::npy_error&) {
    return;
  }
  const std::vector<unsigned char> again = meld::write_npy(t);
  const meld::tensor<T> back = meld::read_npy<T>(again, "rewritten");
  if (!(back.shape() == t.shape())) std::abort();
  if (t.size() &&
      std::memcmp(back.data(), t.data(), static_cast<std::size_t>(t.size()) * sizeof(T)) != 0)
    std::abort();
}

template <class T>
void read_member(const meld::npz_archive& a, const std::string& name) {
  try {
    (void)a.get<T>(name);
  } catch (const meld::npy_error&) {
  }
}

void read_archive(std::span<const unsigned char> bytes) {
  std::optional<meld::npz_archive> a;
  try {
    a.emplace(std::vector<unsigned char>(bytes.begin(), bytes.end()), "input");
  } catch (const meld::npy_error&) {
    return;
  }
  for (const std::string& name : a->names()) {
    read_member<float>(*a, name);
    read_member<double>(*a, name);
    read_member<std::int32_t>(*a, name);
    read_member<std::int64_t>(*a, name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const unsigned char> bytes(data, size);
  read_and_rewrite<float>(bytes);
  read_and_rewrite<double>(bytes);
  read_and_rewrite<std::int32_t>(bytes);
  read_and_rewrite<std::int64_t>(bytes);
  read_archive(bytes);
  return 0;
}
