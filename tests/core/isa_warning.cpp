// A program compiled for less than this CPU runs (tests/CMakeLists.txt compiles it for plain
// x86-64, not -march=native): its first parallel assignment warns on stderr, once, however many
// follow (backend/cpu/isa_warning.hpp). isa_warning.cmake runs it and counts the warnings; the
// first line of its output says whether one is due (this CPU runs instruction sets that the
// program was not compiled for).
#include <meld/essentials.hpp>

#include <cstdio>

int main() {
  const bool due = (meld::detail::cpu_isa() & ~meld::detail::compiled_isa) != 0;
  std::printf("warning due: %s\n", due ? "yes" : "no");
  // Large enough for the thread pool (MELD_NUM_THREADS=2): the flat path twice, then a
  // transposed operand (the planned path).
  constexpr meld::index_t n = 1024;
  const meld::tensor<float> x = meld::arange<float>(float(n * n));
  meld::tensor<float> y({n * n}), m({n, n});
  y = 2.f * x + 1.f;
  y = 3.f * x;
  m = 2.f * x.reshape({n, n}).transpose();
  if (y(10) != 30.f || m(1, 2) != 2.f * float(2 * n + 1)) {
    std::printf("wrong values: %g %g\n", double(y(10)), double(m(1, 2)));
    return 1;
  }
  return 0;
}
