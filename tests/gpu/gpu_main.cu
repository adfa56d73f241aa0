// The main() of GPU tests: reports "skipped" (exit code 77, CTest's SKIP_RETURN_CODE) when there
// is no CUDA device, so that a machine without a GPU never counts these tests as passed.
#include <cstdio>

#include <meld/backend/cuda/cuda.hpp>  // cuda_device_count, without the rest of meld to compile

int meld_catch_session(int argc, char** argv);  // catch_runner.cpp, compiled by the C++ compiler

int main(int argc, char** argv) {
  const int devices = meld::cuda_device_count();
  if (devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  std::printf("running on %d CUDA device(s)\n", devices);
  return meld_catch_session(argc, argv);
}
