// Catch2's runner, compiled once per build for every test program (catch_main.cpp,
// distributed/mpi_main.cpp and gpu/gpu_main.cu call it): each of those mains used to compile
// Catch's implementation itself, 20-45 s of compiler time each. Compiled at -O1 without
// sanitizers (tests/CMakeLists.txt): it is the test framework, not code under test.
// The version CMake found decides (see catch.hpp).
#if defined(MELD_CATCH2_FOUND_MAJOR) ? MELD_CATCH2_FOUND_MAJOR >= 3 \
                                     : __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int meld_catch_session(int argc, char** argv) {
  return Catch::Session().run(argc, argv);
}
