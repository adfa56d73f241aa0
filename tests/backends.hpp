// Tests written once over a backend and instantiated per backend, as Kokkos instantiates its unit
// tests per execution space:
//
//   BACKEND_TEST_CASE("sums match a naive loop", "[reduce]") {
//     auto h = test::random_tensor<float>({1000}, 1);   // reference data on the host
//     auto x = test::on<B>(h);                           // the same on backend B
//     REQUIRE(test::value(meld::sum(x)) == Approx(naive_sum(h)));
//   }
//
// Inside, B is the backend. Each case is registered once per backend of the build, with the
// backend's name appended and tags saying which it is:
//   default build:              cpu<sync> [host], cpu<async> [host][async], sim<sync> [sim],
//                               sim<async> [sim][async]
//   MELD_TEST_CUDA (the .cu files of tests/gpu compile the same suites with nvcc):
//                               cuda<sync> [cuda], cuda<async> [cuda][async]
//   MELD_TEST_ASYNC_ONLY (the ThreadSanitizer build, which runs only these):
//                               cpu<async> [cpu][async], sim<async> [sim][async]
//   MELD_TEST_CPU_SYNC_ONLY (a suite built again with other settings, e.g. test_matmul_blas):
//                               cpu<sync> [cpu]
//   MELD_TEST_SYNC_ONLY (the AddressSanitizer build: the kernels and the memory are those of the
//                        synchronous instantiations; the async suites below keep theirs):
//                               cpu<sync> [cpu], sim<sync> [sim]
// CTest runs every suite once per backend family (tests/CMakeLists.txt: the host backends with
// the suite's other tests, then [sim] with label sim, or [cuda] with label gpu), and the
// ThreadSanitizer build runs the [async] instantiations. Reference values come to the host
// through explicit copies (test::host), never through host access to device memory.
#pragma once

#include <type_traits>

#include "support.hpp"

#define MELD_TEST_CAT2(a, b) a##b
#define MELD_TEST_CAT(a, b) MELD_TEST_CAT2(a, b)

#if defined(MELD_TEST_CUDA)
#define MELD_TEST_INSTANTIATE(NAME, TAGS, FN)              \
  TEST_CASE(NAME " (cuda<sync>)", TAGS "[cuda]") {         \
    FN<meld::cuda<meld::sync>>();                          \
  }                                                        \
  TEST_CASE(NAME " (cuda<async>)", TAGS "[cuda][async]") { \
    FN<meld::cuda<meld::async>>();                         \
  }
#elif defined(MELD_TEST_ASYNC_ONLY)
#define MELD_TEST_INSTANTIATE(NAME, TAGS, FN)            \
  TEST_CASE(NAME " (cpu<async>)", TAGS "[cpu][async]") { \
    FN<meld::cpu<meld::async>>();                        \
  }                                                      \
  TEST_CASE(NAME " (sim<async>)", TAGS "[sim][async]") { \
    FN<meld::sim<meld::async>>();                        \
  }
#elif defined(MELD_TEST_CPU_SYNC_ONLY)
#define MELD_TEST_INSTANTIATE(NAME, TAGS, FN)    \
  TEST_CASE(NAME " (cpu<sync>)", TAGS "[cpu]") { \
    FN<meld::cpu<meld::sync>>();                 \
  }
#elif defined(MELD_TEST_SYNC_ONLY)
#define MELD_TEST_INSTANTIATE(NAME, TAGS, FN)    \
  TEST_CASE(NAME " (cpu<sync>)", TAGS "[cpu]") { \
    FN<meld::cpu<meld::sync>>();                 \
  }                                              \
  TEST_CASE(NAME " (sim<sync>)", TAGS "[sim]") { \
    FN<meld::sim<meld::sync>>();                 \
  }
#else
#define MELD_TEST_INSTANTIATE(NAME, TAGS, FN)            \
  TEST_CASE(NAME " (cpu<sync>)", TAGS "[cpu]") {         \
    FN<meld::cpu<meld::sync>>();                         \
  }                                                      \
  TEST_CASE(NAME " (cpu<async>)", TAGS "[cpu][async]") { \
    FN<meld::cpu<meld::async>>();                        \
  }                                                      \
  TEST_CASE(NAME " (sim<sync>)", TAGS "[sim]") {         \
    FN<meld::sim<meld::sync>>();                         \
  }                                                      \
  TEST_CASE(NAME " (sim<async>)", TAGS "[sim][async]") { \
    FN<meld::sim<meld::async>>();                        \
  }
#endif

// A test function template FN<B> registered by INSTANTIATE (one of the lists of backends here).
#define MELD_DEFINE_BACKEND_TEST_CASE(INSTANTIATE, NAME, TAGS, FN) \
  template <class B>                                               \
  [[maybe_unused]] static void FN();                               \
  INSTANTIATE(NAME, TAGS, FN)                                      \
  template <class B>                                               \
  [[maybe_unused]] static void FN()

#define BACKEND_TEST_CASE(NAME, TAGS)                              \
  MELD_DEFINE_BACKEND_TEST_CASE(MELD_TEST_INSTANTIATE, NAME, TAGS, \
                                MELD_TEST_CAT(meld_backend_test_, __COUNTER__))

// The same for the asynchronous backends only (streams, events, futures, overlap).
#if defined(MELD_TEST_CUDA)
#define MELD_TEST_INSTANTIATE_ASYNC(NAME, TAGS, FN)        \
  TEST_CASE(NAME " (cuda<async>)", TAGS "[cuda][async]") { \
    FN<meld::cuda<meld::async>>();                         \
  }
#else
#define MELD_TEST_INSTANTIATE_ASYNC(NAME, TAGS, FN)       \
  TEST_CASE(NAME " (cpu<async>)", TAGS "[host][async]") { \
    FN<meld::cpu<meld::async>>();                         \
  }                                                       \
  TEST_CASE(NAME " (sim<async>)", TAGS "[sim][async]") {  \
    FN<meld::sim<meld::async>>();                         \
  }
#endif
#define ASYNC_BACKEND_TEST_CASE(NAME, TAGS)                              \
  MELD_DEFINE_BACKEND_TEST_CASE(MELD_TEST_INSTANTIATE_ASYNC, NAME, TAGS, \
                                MELD_TEST_CAT(meld_backend_test_, __COUNTER__))

// The same for the synchronous backends only: catalogs of values (e.g. one gradient check per
// operation) whose asynchronous instantiations would run the same kernels through a queue, at
// twice the compile time. (cpu<sync> [cpu] and sim<sync> [sim]; cuda<sync> in the CUDA build;
// none in the ThreadSanitizer build, which runs the asynchronous ones.)
#if defined(MELD_TEST_CUDA)
#define MELD_TEST_INSTANTIATE_SYNC(NAME, TAGS, FN) \
  TEST_CASE(NAME " (cuda<sync>)", TAGS "[cuda]") { \
    FN<meld::cuda<meld::sync>>();                  \
  }
#elif defined(MELD_TEST_ASYNC_ONLY)
#define MELD_TEST_INSTANTIATE_SYNC(NAME, TAGS, FN)
#elif defined(MELD_TEST_CPU_SYNC_ONLY)
#define MELD_TEST_INSTANTIATE_SYNC(NAME, TAGS, FN) \
  TEST_CASE(NAME " (cpu<sync>)", TAGS "[cpu]") {   \
    FN<meld::cpu<meld::sync>>();                   \
  }
#else
#define MELD_TEST_INSTANTIATE_SYNC(NAME, TAGS, FN) \
  TEST_CASE(NAME " (cpu<sync>)", TAGS "[cpu]") {   \
    FN<meld::cpu<meld::sync>>();                   \
  }                                                \
  TEST_CASE(NAME " (sim<sync>)", TAGS "[sim]") {   \
    FN<meld::sim<meld::sync>>();                   \
  }
#endif
#define SYNC_BACKEND_TEST_CASE(NAME, TAGS)                              \
  MELD_DEFINE_BACKEND_TEST_CASE(MELD_TEST_INSTANTIATE_SYNC, NAME, TAGS, \
                                MELD_TEST_CAT(meld_backend_test_, __COUNTER__))

// A test of host-only behaviour in a generic suite's file: an ordinary test case, left out of the
// CUDA build of the suite.
#if defined(MELD_TEST_CUDA)
#define HOST_TEST_CASE(NAME, TAGS) \
  template <class Unused>          \
  [[maybe_unused]] static void MELD_TEST_CAT(meld_host_test_, __COUNTER__)()
#else
#define HOST_TEST_CASE(NAME, TAGS) TEST_CASE(NAME, TAGS)
#endif

namespace test {

// A copy on the host (cpu<sync>) of a tensor, view or expression of any backend.
template <class X>
auto host(const X& x) {
  return meld::to<meld::cpu<>>(x);
}

// A copy on backend B of a host tensor.
template <class B, class T>
meld::tensor<T, B> on(const meld::tensor<T>& h) {
  return meld::to<B>(h);
}

// The value of a reduction to a scalar under any policy (a meld::future under async).
template <class X>
auto value(const X& x) {
  if constexpr (requires { x.get(); })
    return x.get();
  else
    return x;
}

// Whether B is an asynchronous backend.
template <class B>
inline constexpr bool is_async = std::is_same_v<typename B::policy, meld::async>;

}  // namespace test
