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
//   default build:              cpu<sync> [cpu], cpu<async> [cpu][async], sim<async> [sim][async]
//                               (SYNC_BACKEND_TEST_CASE: cpu<sync>, sim<sync> [sim]): one
//                               instantiation on the simulated device per case, since sim<async>
//                               keeps to device memory as sim<sync> does, and orders streams too
//   MELD_TEST_CUDA (the .cu files of tests/gpu compile the same suites with nvcc):
//                               cuda<sync> [cuda], cuda<async> [cuda][async]
//                               (with MELD_TEST_ASYNC_ONLY, cuda<async> alone: the emulated
//                               device's runs and CI's compile check with nvcc, where cuda<sync>,
//                               which adds a stream synchronization to each operation, is
//                               tests/gpu/test_cuda.cu's backend)
//   MELD_TEST_ASYNC_ONLY (the ThreadSanitizer build, which runs only these):
//                               cpu<async> [cpu][async], sim<async> [sim][async]
//   MELD_TEST_CPU_SYNC_ONLY (the AddressSanitizer build, whose memory checks the simulated
//                            device's own address space escapes; a suite built again with other
//                            settings, e.g. test_matmul_blas):
//                               cpu<sync> [cpu]
//   MELD_TEST_SYNC_ONLY (the AddressSanitizer build of programs that are not generic suites,
//                        e.g. test_data_parallel_sim):
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

// Every backend the suites can be instantiated for, with its tags: the one list. X is called as
// X(backend, policy, backend tags, NAME, TAGS, FN).
#define MELD_TEST_BACKENDS(X, NAME, TAGS, FN)   \
  X(cpu, sync, "[cpu]", NAME, TAGS, FN)         \
  X(cpu, async, "[cpu][async]", NAME, TAGS, FN) \
  X(sim, sync, "[sim]", NAME, TAGS, FN)         \
  X(sim, async, "[sim][async]", NAME, TAGS, FN) \
  X(cuda, sync, "[cuda]", NAME, TAGS, FN)       \
  X(cuda, async, "[cuda][async]", NAME, TAGS, FN)

// Which of them this build instantiates: MELD_TEST_ALL_<backend>_<policy> for BACKEND_TEST_CASE,
// MELD_TEST_SYNC_... for SYNC_BACKEND_TEST_CASE, MELD_TEST_ASYNC_... for ASYNC_BACKEND_TEST_CASE.
#if defined(MELD_TEST_CUDA)
#define MELD_TEST_ALL_cpu_sync 0
#define MELD_TEST_ALL_cpu_async 0
#define MELD_TEST_ALL_sim_sync 0
#define MELD_TEST_ALL_sim_async 0
#if defined(MELD_TEST_ASYNC_ONLY)
#define MELD_TEST_ALL_cuda_sync 0
#else
#define MELD_TEST_ALL_cuda_sync 1
#endif
#define MELD_TEST_ALL_cuda_async 1
#define MELD_TEST_ASYNC_cpu_async 0
#define MELD_TEST_ASYNC_sim_async 0
#define MELD_TEST_ASYNC_cuda_async 1
#else
#define MELD_TEST_ALL_cuda_sync 0
#define MELD_TEST_ALL_cuda_async 0
#define MELD_TEST_ASYNC_cpu_async 1
#define MELD_TEST_ASYNC_sim_async 1
#define MELD_TEST_ASYNC_cuda_async 0
#if defined(MELD_TEST_ASYNC_ONLY)
#define MELD_TEST_ALL_cpu_sync 0
#define MELD_TEST_ALL_cpu_async 1
#define MELD_TEST_ALL_sim_sync 0
#define MELD_TEST_ALL_sim_async 1
#elif defined(MELD_TEST_CPU_SYNC_ONLY)
#define MELD_TEST_ALL_cpu_sync 1
#define MELD_TEST_ALL_cpu_async 0
#define MELD_TEST_ALL_sim_sync 0
#define MELD_TEST_ALL_sim_async 0
#elif defined(MELD_TEST_SYNC_ONLY)
#define MELD_TEST_ALL_cpu_sync 1
#define MELD_TEST_ALL_cpu_async 0
#define MELD_TEST_ALL_sim_sync 1
#define MELD_TEST_ALL_sim_async 0
#else
#define MELD_TEST_ALL_cpu_sync 1
#define MELD_TEST_ALL_cpu_async 1
#define MELD_TEST_ALL_sim_sync 0
#define MELD_TEST_ALL_sim_async 1
#define MELD_TEST_SYNC_sim_sync 1
#endif
#endif
// The synchronous ones among them.
#define MELD_TEST_SYNC_cpu_sync MELD_TEST_ALL_cpu_sync
#if !defined(MELD_TEST_SYNC_sim_sync)
#define MELD_TEST_SYNC_sim_sync MELD_TEST_ALL_sim_sync
#endif
#define MELD_TEST_SYNC_cuda_sync MELD_TEST_ALL_cuda_sync
#define MELD_TEST_SYNC_cpu_async 0
#define MELD_TEST_SYNC_sim_async 0
// A CUDA build that compiles cuda<async> alone (the emulated device's, CI's nvcc check) runs them
// there: the device's kernels are what a catalog of values checks.
#if defined(MELD_TEST_CUDA) && defined(MELD_TEST_ASYNC_ONLY)
#define MELD_TEST_SYNC_cuda_async 1
#else
#define MELD_TEST_SYNC_cuda_async 0
#endif
// The asynchronous ones: every asynchronous backend of the build (set above), whatever the
// sanitizer selects, since the suites about streams and overlap run everywhere.
#define MELD_TEST_ASYNC_cpu_sync 0
#define MELD_TEST_ASYNC_sim_sync 0
#define MELD_TEST_ASYNC_cuda_sync 0

#define MELD_TEST_IF_0(...)
#define MELD_TEST_IF_1(...) __VA_ARGS__

// One backend's test case where TABLE says the build instantiates it.
#define MELD_TEST_ONE_IN(TABLE, B, P, BTAGS, NAME, TAGS, FN)  \
  MELD_TEST_CAT(MELD_TEST_IF_, MELD_TEST_CAT(TABLE, B##_##P)) \
  (TEST_CASE(NAME " (" #B "<" #P ">)", TAGS BTAGS) { FN<meld::B<meld::P>>(); })
#define MELD_TEST_ONE(B, P, BTAGS, NAME, TAGS, FN) \
  MELD_TEST_ONE_IN(MELD_TEST_ALL_, B, P, BTAGS, NAME, TAGS, FN)
#define MELD_TEST_ONE_SYNC(B, P, BTAGS, NAME, TAGS, FN) \
  MELD_TEST_ONE_IN(MELD_TEST_SYNC_, B, P, BTAGS, NAME, TAGS, FN)
#define MELD_TEST_ONE_ASYNC(B, P, BTAGS, NAME, TAGS, FN) \
  MELD_TEST_ONE_IN(MELD_TEST_ASYNC_, B, P, BTAGS, NAME, TAGS, FN)

#define MELD_TEST_INSTANTIATE(NAME, TAGS, FN) MELD_TEST_BACKENDS(MELD_TEST_ONE, NAME, TAGS, FN)

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
#define MELD_TEST_INSTANTIATE_ASYNC(NAME, TAGS, FN) \
  MELD_TEST_BACKENDS(MELD_TEST_ONE_ASYNC, NAME, TAGS, FN)
#define ASYNC_BACKEND_TEST_CASE(NAME, TAGS)                              \
  MELD_DEFINE_BACKEND_TEST_CASE(MELD_TEST_INSTANTIATE_ASYNC, NAME, TAGS, \
                                MELD_TEST_CAT(meld_backend_test_, __COUNTER__))

// The same for the synchronous backends only: catalogs of values (e.g. one gradient check per
// operation, every functor on every element type) whose asynchronous instantiations would run the
// same kernels through a queue, at twice the compile time. (cpu<sync> [cpu] and sim<sync> [sim];
// cuda<sync> in the CUDA build, or cuda<async> where it compiles that alone; none in the
// ThreadSanitizer build, which runs the asynchronous ones: a catalog's functors share no state.)
#define MELD_TEST_INSTANTIATE_SYNC(NAME, TAGS, FN) \
  MELD_TEST_BACKENDS(MELD_TEST_ONE_SYNC, NAME, TAGS, FN)
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
