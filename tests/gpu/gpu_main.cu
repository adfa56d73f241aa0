// The main() of GPU tests: reports "skipped" (exit code 77, CTest's SKIP_RETURN_CODE) when there
// is no CUDA device, so that a machine without a GPU never counts these tests as passed.
#define MELD_CATCH_OWN_MAIN
#include <cstdio>

#include <meld/meld.hpp>

#include "catch.hpp"

int main(int argc, char** argv) {
  const int devices = meld::cuda_device_count();
  if (devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  std::printf("running on %d CUDA device(s)\n", devices);
  return Catch::Session().run(argc, argv);
}
