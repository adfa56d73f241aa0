// Must NOT compile, for each MELD_NARROWING_CASE: an assignment that would lose values without
// meld::cast. The tests that build this file (surface_narrowing_<case>) check the message.
#include <cstdint>

#include <meld/meld.hpp>

int main() {
  meld::tensor<float> f({4});
  meld::tensor<double> d({4});
  meld::tensor<std::int32_t> i({4});
  meld::tensor<std::int64_t> l({4});
#if MELD_NARROWING_CASE == 1  // floating into integer, by construction
  meld::tensor<std::int32_t> r = f * 2.f;
#elif MELD_NARROWING_CASE == 2  // float64 into float32, by assignment
  f = f + d;
#elif MELD_NARROWING_CASE == 3  // int64 into int32, by compound assignment
  i += l;
#elif MELD_NARROWING_CASE == 4  // floating into an integer view
  l.slice(meld::range(0, 2)) = d.slice(meld::range(2, 4));
#endif
  return 0;
}
