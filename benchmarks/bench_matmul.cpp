// Single-precision matrix products (and bfloat16 operands into float), n x n by n x n, in GFLOP/s
// (2 n^3 per product), on one thread and on every available core:
//   meld       c = meld::matmul(a, b) into an existing tensor (meld's own kernel; in the
//              bench_matmul_blas build, meld's MELD_ENABLE_BLAS dispatch to cblas_sgemm)
//   meld_bf16  meld::gemm(1, a, b, 0, c) of bfloat16 a and b into a float c: the vdpbf16ps kernel
//              where the build targets AVX512_BF16, else the operands widened to float
//   openblas   cblas_sgemm directly (openblas_set_num_threads)
//   eigen      c.noalias() = a * b on row-major Eigen matrices (Eigen::setNbThreads; OpenMP)
//
//   meld_step, openblas_step: the products of training steps (the MLP's, and convolutions'
//              im2col products), one thread, in their layouts (transposed views where the layers
//              pass them)
//   meld_bf16_step: the same products of float operands rounded to bfloat16 as they are read,
//              accumulating in float (nn::precision::bfloat16)
//   meld_im2col, meld_col2im: the copies around a convolution's products, one thread, for one
//              column chunk of the training example's LeNet convolutions (GB/s of the column
//              matrix written or read)
//   meld_im2col_bf16: im2col writing bfloat16 columns (rounded), as a bfloat16 convolution does
//
// Run with interleaving and repetitions, and compare medians (the machines are shared and noisy):
//   bench_matmul --benchmark_enable_random_interleaving=true --benchmark_repetitions=5
//                --benchmark_report_aggregates_only=true
// OpenBLAS 0.3.21 does not recognize some recent CPUs and falls back to a generic SSE kernel: the
// context line "openblas_core" says which kernel it chose; OPENBLAS_CORETYPE=SkylakeX (or Haswell)
// in the environment forces one (see benchmarks/RESULTS.md).
#include <benchmark/benchmark.h>

#include <chrono>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

#include <cblas.h>

// GCC 12 flags its own AVX-512 intrinsics as maybe-uninitialized (PR 105593) wherever Eigen
// inlines them.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>

#include <meld/meld.hpp>

extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_corename(void);
}

namespace {

#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
constexpr const char* meld_name = "meld_blas";
#else
constexpr const char* meld_name = "meld";
#endif

using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void report(benchmark::State& state, double n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Lets the threads of the previous benchmark (OpenBLAS and OpenMP workers spin for a while after
// their last job) go to sleep before timing starts, so that they do not take cores from this one.
void settle() {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

void bm_meld(benchmark::State& state) {
  const auto n = static_cast<meld::index_t>(state.range(0));
  meld::set_num_threads(static_cast<int>(state.range(1)));
  openblas_set_num_threads(static_cast<int>(state.range(1)));  // used by meld_blas
  auto a = meld::uniform<float>({n, n}, -1.f, 1.f, 1);
  auto b = meld::uniform<float>({n, n}, -1.f, 1.f, 2);
  meld::tensor<float> c({n, n});
  c = meld::matmul(a, b);  // warm up (packing buffers, pages of c)
  settle();
  for (auto _ : state) {
    c = meld::matmul(a, b);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report(state, double(n));
}

void bm_meld_bf16(benchmark::State& state) {
  const auto n = static_cast<meld::index_t>(state.range(0));
  meld::set_num_threads(static_cast<int>(state.range(1)));
  const meld::tensor<meld::bfloat16> a =
      meld::cast<meld::bfloat16>(meld::uniform<float>({n, n}, -1.f, 1.f, 1));
  const meld::tensor<meld::bfloat16> b =
      meld::cast<meld::bfloat16>(meld::uniform<float>({n, n}, -1.f, 1.f, 2));
  meld::tensor<float> c({n, n});
  meld::gemm(1.f, a, b, 0.f, c);  // warm up
  settle();
  for (auto _ : state) {
    meld::gemm(1.f, a, b, 0.f, c);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report(state, double(n));
}

void bm_openblas(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  openblas_set_num_threads(static_cast<int>(state.range(1)));
  auto a = meld::uniform<float>({n, n}, -1.f, 1.f, 1);
  auto b = meld::uniform<float>({n, n}, -1.f, 1.f, 2);
  meld::tensor<float> c({n, n});
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
                0.f, c.data(), n);
  };
  run();
  settle();
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report(state, double(n));
}

void bm_eigen(benchmark::State& state) {
  const auto n = static_cast<Eigen::Index>(state.range(0));
  Eigen::setNbThreads(static_cast<int>(state.range(1)));
  row_major a = row_major::Random(n, n), b = row_major::Random(n, n), c(n, n);
  c.noalias() = a * b;
  settle();
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report(state, double(n));
}

// The products of training steps, as the layers call them, on one thread: c (m x n) = a (m x k)
// b (k x n), with a stored transposed (k x m) where `at`, b stored transposed (n x k) where `bt`.
struct step_product {
  const char* name;
  int m, n, k;
  bool at, bt;
};
constexpr step_product step_products[] = {
    {"mlp 784->256 forward, x W^T", 256, 256, 784, false, true},
    {"mlp 784->256 weight gradient, g^T x", 256, 784, 256, true, false},
    {"mlp 256->128 forward", 256, 128, 256, false, true},
    {"mlp 256->128 weight gradient", 128, 256, 256, true, false},
    {"mlp 256->128 input gradient, g W", 256, 256, 128, false, false},
    {"mlp 128->10 forward", 256, 10, 128, false, true},
    {"mlp 128->10 weight gradient", 10, 128, 256, true, false},
    {"mlp 128->10 input gradient", 256, 128, 10, false, false},
    {"conv 1->6 5x5 forward, W col (13 images)", 6, 10192, 25, false, false},
    {"conv 1->6 5x5 weight gradient, g col^T", 6, 25, 10192, false, true},
    {"conv 6->16 5x5 forward (17 images)", 16, 1700, 150, false, false},
    {"conv 1->20 3x3 forward (43 images)", 20, 29068, 9, false, false},
    {"conv 20->50 5x5 forward (6 images)", 50, 486, 500, false, false},
    {"conv 20->50 5x5 weight gradient", 50, 500, 486, false, true},
    {"conv 1->20 3x3 weight gradient", 20, 9, 29068, false, true},
    {"conv 20->50 5x5 input gradient, W^T g", 500, 486, 50, true, false},
};

template <class Run>
void step_benchmark(benchmark::State& state, Run run) {
  const step_product& p = step_products[state.range(0)];
  auto a = p.at ? meld::uniform<float>({p.k, p.m}, -1.f, 1.f, 1)
                : meld::uniform<float>({p.m, p.k}, -1.f, 1.f, 1);
  auto b = p.bt ? meld::uniform<float>({p.n, p.k}, -1.f, 1.f, 2)
                : meld::uniform<float>({p.k, p.n}, -1.f, 1.f, 2);
  meld::tensor<float> c({p.m, p.n});
  run(p, a, b, c);
  settle();
  for (auto _ : state) {
    run(p, a, b, c);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(p.name);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * p.m * p.n * p.k / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
// c = a b as the layers call gemm: transposed views of the operands stored transposed, each
// passed through `read` (as it is, or cast to bfloat16).
template <class Read>
void step_gemm(const step_product& p, const meld::tensor<float>& a, const meld::tensor<float>& b,
               meld::tensor<float>& c, Read read) {
  if (p.at && p.bt) meld::gemm(1.f, read(a.transpose()), read(b.transpose()), 0.f, c);
  if (p.at && !p.bt) meld::gemm(1.f, read(a.transpose()), read(b.view()), 0.f, c);
  if (!p.at && p.bt) meld::gemm(1.f, read(a.view()), read(b.transpose()), 0.f, c);
  if (!p.at && !p.bt) meld::gemm(1.f, read(a.view()), read(b.view()), 0.f, c);
}
void bm_meld_step(benchmark::State& state) {
  meld::set_num_threads(1);
  openblas_set_num_threads(1);  // used by meld_blas
  step_benchmark(state, [](const step_product& p, const auto& a, const auto& b, auto& c) {
    step_gemm(p, a, b, c, [](const auto& x) { return x; });
  });
}
void bm_meld_bf16_step(benchmark::State& state) {
  meld::set_num_threads(1);
  step_benchmark(state, [](const step_product& p, const auto& a, const auto& b, auto& c) {
    step_gemm(p, a, b, c, [](const auto& x) { return meld::cast<meld::bfloat16>(x); });
  });
}
void bm_openblas_step(benchmark::State& state) {
  openblas_set_num_threads(1);
  step_benchmark(state, [](const step_product& p, const auto& a, const auto& b, auto& c) {
    cblas_sgemm(CblasRowMajor, p.at ? CblasTrans : CblasNoTrans, p.bt ? CblasTrans : CblasNoTrans,
                p.m, p.n, p.k, 1.f, a.data(), p.at ? p.m : p.k, b.data(), p.bt ? p.k : p.n, 0.f,
                c.data(), p.n);
  });
}
void step_shapes(benchmark::internal::Benchmark* b) {
  b->DenseRange(0, std::size(step_products) - 1)->ArgNames({"product"})->UseRealTime();
  b->Unit(benchmark::kMicrosecond);
}

// One column chunk of a convolution as nn::conv2d builds it (1 MiB of columns): im2col of
// `images` samples {channels, size, size} for a kernel x kernel window, stride 1, no padding.
struct window_chunk {
  const char* name;
  meld::index_t images, channels, size, kernel;
};
constexpr window_chunk window_chunks[] = {
    {"lenet conv 1->20 3x3 (43 images of 28x28)", 43, 1, 28, 3},
    {"lenet conv 20->50 5x5 (6 images of 13x13)", 6, 20, 13, 5},
};
template <class Column = float, class Run>
void window_benchmark(benchmark::State& state, Run run) {
  meld::set_num_threads(1);
  const window_chunk& w = window_chunks[state.range(0)];
  const meld::index_t out = w.size - w.kernel + 1;
  const meld::detail::planes planes{w.channels, w.size, w.size, out, out};
  const meld::detail::window2d window{w.kernel, 1, 0};
  auto x = meld::uniform<float>({w.images, w.channels, w.size, w.size}, -1.f, 1.f, 1);
  meld::tensor<Column> col({w.channels * w.kernel * w.kernel, w.images * out * out});
  run(w.images, planes, window, x, col);
  settle();
  for (auto _ : state) {
    run(w.images, planes, window, x, col);
    benchmark::DoNotOptimize(col.data());
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(w.name);
  state.counters["GB/s"] = benchmark::Counter(double(col.size()) * sizeof(Column) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
void bm_im2col(benchmark::State& state) {
  window_benchmark(state, [](meld::index_t n, const auto& p, const auto& g, auto& x, auto& col) {
    meld::window_ops<meld::cpu<>>::im2col(std::as_const(x).view(), n, p, g, col.view());
  });
}
// The columns of a bfloat16 product: rounded as they are written.
void bm_im2col_bf16(benchmark::State& state) {
  window_benchmark<meld::bfloat16>(
      state, [](meld::index_t n, const auto& p, const auto& g, auto& x, auto& col) {
        meld::window_ops<meld::cpu<>>::im2col(std::as_const(x).view(), n, p, g, col.view());
      });
}
void bm_col2im(benchmark::State& state) {
  window_benchmark(state, [](meld::index_t n, const auto& p, const auto& g, auto& x, auto& col) {
    meld::window_ops<meld::cpu<>>::col2im_add(std::as_const(col).view(), n, p, g, x.view());
  });
}
void window_shapes(benchmark::internal::Benchmark* b) {
  b->DenseRange(0, std::size(window_chunks) - 1)->ArgNames({"chunk"})->UseRealTime();
  b->Unit(benchmark::kMicrosecond);
}

void sizes(benchmark::internal::Benchmark* b) {
  const int all = meld::detail::available_cores();
  for (int threads : {1, all}) {
    for (int n : {128, 256, 512, 1024, 2048}) b->Args({n, threads});
    if (all == 1) break;
  }
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
  benchmark::AddCustomContext("meld_simd", xsimd::default_arch::name());
  benchmark::AddCustomContext("cores", std::to_string(meld::detail::available_cores()));
  benchmark::RegisterBenchmark(meld_name, bm_meld)->Apply(sizes);
  benchmark::RegisterBenchmark("meld_bf16", bm_meld_bf16)->Apply(sizes);
  benchmark::RegisterBenchmark("openblas", bm_openblas)->Apply(sizes);
  benchmark::RegisterBenchmark("eigen", bm_eigen)->Apply(sizes);
  const std::string meld_step_name = std::string(meld_name) + "_step";
  benchmark::RegisterBenchmark(meld_step_name.c_str(), bm_meld_step)->Apply(step_shapes);
  benchmark::RegisterBenchmark("meld_bf16_step", bm_meld_bf16_step)->Apply(step_shapes);
  benchmark::RegisterBenchmark("openblas_step", bm_openblas_step)->Apply(step_shapes);
  benchmark::RegisterBenchmark("meld_im2col", bm_im2col)->Apply(window_shapes);
  benchmark::RegisterBenchmark("meld_im2col_bf16", bm_im2col_bf16)->Apply(window_shapes);
  benchmark::RegisterBenchmark("meld_col2im", bm_col2im)->Apply(window_shapes);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
