// The benchmarks' main: records the SIMD architecture and thread counts in the output's context.
#include "common.hpp"

#include <string>

#include <xsimd/xsimd.hpp>

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("meld_simd", std::string(xsimd::default_arch::name()) + ", " +
                                               std::to_string(xsimd::batch<float>::size) +
                                               " floats per batch");
  benchmark::AddCustomContext("all_threads", std::to_string(bench::all_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
