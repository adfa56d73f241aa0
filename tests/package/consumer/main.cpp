#include <cmath>
#include <cstdio>
#include <cstring>
#include <meld/meld.hpp>

// The installed package's CMake version (from meldConfigVersion.cmake, passed by the consumer's
// CMakeLists) and the installed header agree; builds without CMake (pkg-config) do not pass them.
#ifdef MELD_PACKAGE_VERSION_MAJOR
static_assert(MELD_VERSION_MAJOR == MELD_PACKAGE_VERSION_MAJOR &&
                  MELD_VERSION_MINOR == MELD_PACKAGE_VERSION_MINOR &&
                  MELD_VERSION_PATCH == MELD_PACKAGE_VERSION_PATCH,
              "meld's CMake package version differs from include/meld/version.hpp");
#endif
static_assert(MELD_VERSION ==
              MELD_VERSION_MAJOR * 10000 + MELD_VERSION_MINOR * 100 + MELD_VERSION_PATCH);

int main() {
  meld::tensor<float> x = meld::arange<float>(1000.f), z({1000});
  z = 2.f;
  meld::tensor<float> y = 2.f * x + meld::exp(z) - x * z;
  const float s = meld::sum(x * z);
  // sum over i of 2 i = 999 * 1000
  if (s != 999000.f || std::abs(y(10) - std::exp(2.f)) > 1e-5f) {
    std::printf("wrong: %f %f\n", s, y(10));
    return 1;
  }
  char expected[32];
  std::snprintf(expected, sizeof expected, "%d.%d.%d", MELD_VERSION_MAJOR, MELD_VERSION_MINOR,
                MELD_VERSION_PATCH);
  if (std::strcmp(expected, MELD_VERSION_STRING) != 0) {
    std::printf("MELD_VERSION_STRING is %s, expected %s\n", MELD_VERSION_STRING, expected);
    return 1;
  }
#ifdef MELD_EXPECTED_RUNTIME_ARCH
  if (meld::build_info().runtime_arch != MELD_EXPECTED_RUNTIME_ARCH) {
    std::printf("the runtime library says it was built for %s, its package says %s\n",
                meld::build_info().runtime_arch.c_str(), MELD_EXPECTED_RUNTIME_ARCH);
    return 1;
  }
#endif
  std::printf("consumer ok: meld %s, sum=%g\n", MELD_VERSION_STRING, s);
  return 0;
}
