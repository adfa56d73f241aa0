// GPU benchmarks (Google Benchmark, times from CUDA events): the fused 5-op expression against the
// device's theoretical bandwidth and a device-to-device copy, the same expression as three
// separate Thrust transforms (the unfused peer), a fused sum(x * z) against thrust::inner_product
// and CUB's own DeviceReduce::Sum on a plain array, and cuBLAS GEMM in float, TF32 and bf16.
//
//   build/gpu/benchmarks/bench_cuda --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <thrust/device_ptr.h>
#include <thrust/functional.h>
#include <thrust/inner_product.h>
#include <thrust/transform.h>
#include <cub/device/device_reduce.cuh>

#include <cstdio>

#include <meld/meld.hpp>

namespace {

using gpu = meld::cuda<meld::async>;

// Times `body` (enqueued on stream s) with CUDA events; returns seconds.
template <class F>
double time_on(cudaStream_t s, F&& body) {
  cudaEvent_t start, stop;
  MELD_CUDA_CHECK(cudaEventCreate(&start));
  MELD_CUDA_CHECK(cudaEventCreate(&stop));
  MELD_CUDA_CHECK(cudaEventRecord(start, s));
  body();
  MELD_CUDA_CHECK(cudaEventRecord(stop, s));
  MELD_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MELD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return ms * 1e-3;
}

double theoretical_bandwidth() {
  int device = 0, clock_khz = 0, bus_bits = 0;
  MELD_CUDA_CHECK(cudaGetDevice(&device));
  MELD_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  MELD_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;  // double data rate, bytes per second
}

cudaStream_t stream_of(const meld::tensor<float, gpu>& t) {
  return t.storage_ptr()->access().home()->handle;
}

void BM_copy_d2d(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, gpu> x({n}), y({n});
  cudaStream_t s = stream_of(y);
  for (auto _ : state)
    state.SetIterationTime(time_on(s, [&] {
      MELD_CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), x.raw_data(), n * sizeof(float),
                                      cudaMemcpyDeviceToDevice, s));
    }));
  state.SetBytesProcessed(state.iterations() * 2 * n * int64_t(sizeof(float)));
}

void BM_five_op_meld(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, gpu> x({n}), z({n}), w({n}), y({n});
  x = 1.f, z = 2.f, w = 3.f;
  const float a = 1.5f, b = 2.5f, c = 0.5f;
  cudaStream_t s = stream_of(y);
  for (auto _ : state)
    state.SetIterationTime(time_on(s, [&] { y = a * x + b * z - c * w + x * z; }));
  state.SetBytesProcessed(state.iterations() * 16 * n);  // 3 reads + 1 write
}

struct axpby {
  float a, b;
  __host__ __device__ float operator()(float x, float y) const { return a * x + b * y; }
};

// The unfused peer: the 5-op expression as three Thrust transforms and two temporaries.
void BM_five_op_thrust_unfused(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, gpu> x({n}), z({n}), w({n}), y({n}), t1({n}), t2({n});
  cudaStream_t s = stream_of(y);
  auto p = [](meld::tensor<float, gpu>& t) { return thrust::device_pointer_cast(t.raw_data()); };
  const auto policy = thrust::cuda::par.on(s);
  for (auto _ : state)
    state.SetIterationTime(time_on(s, [&] {
      thrust::transform(policy, p(x), p(x) + n, p(z), p(t1), axpby{1.5f, 2.5f});    // a x + b z
      thrust::transform(policy, p(t1), p(t1) + n, p(w), p(t2), axpby{1.f, -0.5f});  // - c w
      thrust::transform(policy, p(x), p(x) + n, p(z), p(t1), thrust::multiplies<float>());
      thrust::transform(policy, p(t2), p(t2) + n, p(t1), p(y), thrust::plus<float>());
    }));
  state.SetBytesProcessed(state.iterations() * 16 * n);  // the useful bytes, as for meld
}

void BM_sum_xz_meld(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, gpu> x({n}), z({n});
  x = 1.f, z = 0.5f;
  cudaStream_t s = stream_of(x);
  float result = 0;
  for (auto _ : state) state.SetIterationTime(time_on(s, [&] { result = meld::sum(x * z).get(); }));
  state.SetBytesProcessed(state.iterations() * 8 * n);
  if (result != 0.5f * float(n)) state.SkipWithError("wrong sum");
}

void BM_sum_xz_thrust_inner_product(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, gpu> x({n}), z({n});
  x = 1.f, z = 0.5f;
  cudaStream_t s = stream_of(x);
  auto px = thrust::device_pointer_cast(x.raw_data()),
       pz = thrust::device_pointer_cast(z.raw_data());
  for (auto _ : state)
    state.SetIterationTime(time_on(s, [&] {
      benchmark::DoNotOptimize(thrust::inner_product(thrust::cuda::par.on(s), px, px + n, pz, 0.f));
    }));
  state.SetBytesProcessed(state.iterations() * 8 * n);
}

// CUB's DeviceReduce::Sum on a plain array: the ceiling for a reduction that reads n floats.
void BM_sum_cub_plain(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  meld::tensor<float, gpu> x({n}), out({1});
  x = 1.f;
  cudaStream_t s = stream_of(x);
  std::size_t bytes = 0;
  MELD_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, bytes, x.raw_data(), out.raw_data(), n, s));
  void* temp = nullptr;
  MELD_CUDA_CHECK(cudaMallocAsync(&temp, bytes, s));
  for (auto _ : state)
    state.SetIterationTime(time_on(s, [&] {
      MELD_CUDA_CHECK(cub::DeviceReduce::Sum(temp, bytes, x.raw_data(), out.raw_data(), n, s));
    }));
  MELD_CUDA_CHECK(cudaFreeAsync(temp, s));
  state.SetBytesProcessed(state.iterations() * 4 * n);
}

template <class T>
void BM_gemm(benchmark::State& state) {
  const meld::index_t n = state.range(0);
  const bool tf32 = state.range(1) == 1;
  meld::cuda_allow_tf32(tf32);
  auto a = meld::uniform<float, meld::cuda<meld::async>>({n, n}, -1.f, 1.f, 1);
  auto b = meld::uniform<float, meld::cuda<meld::async>>({n, n}, -1.f, 1.f, 2);
  meld::tensor<T, gpu> ta = meld::cast<T>(a), tb = meld::cast<T>(b), c({n, n});
  cudaStream_t s = c.storage_ptr()->access().home()->handle;
  for (auto _ : state) state.SetIterationTime(time_on(s, [&] { c = meld::matmul(ta, tb); }));
  state.counters["TFLOP/s"] = benchmark::Counter(
      2.0 * double(n) * n * n * double(state.iterations()) * 1e-12, benchmark::Counter::kIsRate);
  state.SetLabel(std::is_same_v<T, float> ? (tf32 ? "tf32" : "float") : "bf16");
  meld::cuda_allow_tf32(false);
}

}  // namespace

BENCHMARK(BM_copy_d2d)->RangeMultiplier(4)->Range(1 << 20, 1 << 28)->UseManualTime();
BENCHMARK(BM_five_op_meld)->RangeMultiplier(4)->Range(1 << 20, 1 << 28)->UseManualTime();
BENCHMARK(BM_five_op_thrust_unfused)->RangeMultiplier(4)->Range(1 << 20, 1 << 28)->UseManualTime();
BENCHMARK(BM_sum_xz_meld)->Arg(1 << 24)->Arg(1 << 28)->UseManualTime();
BENCHMARK(BM_sum_xz_thrust_inner_product)->Arg(1 << 24)->Arg(1 << 28)->UseManualTime();
BENCHMARK(BM_sum_cub_plain)->Arg(1 << 24)->Arg(1 << 28)->UseManualTime();
BENCHMARK_TEMPLATE(BM_gemm, float)
    ->Args({8192, 0})
    ->Args({8192, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_gemm, meld::bfloat16)
    ->Args({8192, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  if (meld::cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  std::printf("theoretical memory bandwidth: %.0f GB/s\n", theoretical_bandwidth() * 1e-9);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
