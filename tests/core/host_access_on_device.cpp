// Must not compile for a device backend: each MELD_VARIANT is one way host code could touch a
// device tensor's elements (tests/core/host_access_on_device.cmake compiles every variant for
// meld::sim<> and requires the error that names the backend, and compiles them all for
// meld::cpu<>, where they are legal, so that a broken file cannot pass).
#include <meld/meld.hpp>

#include <numeric>
#include <span>

#ifndef MELD_TEST_BACKEND
#define MELD_TEST_BACKEND meld::sim<>
#endif

using B = MELD_TEST_BACKEND;

float host_code() {
  meld::tensor<float, B> t({4, 4});
  float s = 0;
#if MELD_VARIANT == 0 || defined(MELD_ALL_VARIANTS)
  s += t.data()[0];  // a raw host pointer
#endif
#if MELD_VARIANT == 1 || defined(MELD_ALL_VARIANTS)
  for (float v : t) s += v;  // a host loop over the elements
#endif
#if MELD_VARIANT == 2 || defined(MELD_ALL_VARIANTS)
  s += t(1, 2);  // element access
#endif
#if MELD_VARIANT == 3 || defined(MELD_ALL_VARIANTS)
  s += t.slice(0, 0).item();  // the value of a one-element view
#endif
#if MELD_VARIANT == 4 || defined(MELD_ALL_VARIANTS)
  auto row = t.slice(1);  // through a view
  s += std::accumulate(row.data(), row.data() + 4, 0.f);
#endif
#if MELD_VARIANT == 5 || defined(MELD_ALL_VARIANTS)
  const meld::tensor<float, B>& c = t;
  s += *c.begin();  // const access
#endif
  return s;
}
