// What a meld program was built with and runs on, for bug reports and performance questions (as
// Eigen's SimdInstructionSetsInUse(), torch::show_config() and Kokkos::print_configuration):
//   meld::print_configuration(std::cout);       // aligned "key: value" lines
//   meld::configuration c = meld::build_info();  // the same facts, as data
// It sits beside the backends because it asks them: the CPU backend's thread pool and SIMD
// architecture, the simulated device, and the CUDA backend where the translation unit has it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/trace.hpp"
#include "../runtime/thread_pool.hpp"
#include "../version.hpp"
#include "cpu/isa.hpp"
#include "cpu/simd.hpp"
#include "sim/memory.hpp"

#if defined(MELD_CUDA_BACKEND)
#include "cuda/cuda.hpp"
#endif

namespace meld {

/// \addtogroup diagnostics
/// @{

/// Where the size of meld's CPU thread pool came from.
enum class thread_source {
  cores,            ///< the default: every core this process may run on (its affinity mask)
  environment,      ///< MELD_NUM_THREADS
  set_num_threads,  ///< meld::set_num_threads (or thread_pool::global().resize)
  error,            ///< the pool cannot start: MELD_NUM_THREADS is not a thread count
};

/// An environment variable that meld reads.
struct environment_variable {
  std::string name;   ///< e.g. "MELD_NUM_THREADS"
  bool set = false;   ///< present in the environment
  std::string value;  ///< its value where set, else empty
};

/// meld's build and run-time configuration (build_info()). Compile-time facts (compiler, standard,
/// instruction sets, compiled-in parts) are those of the translation unit that called
/// build_info(): a program's units normally share their flags, and where they do not, each
/// reports its own.
struct configuration {
  std::string version;            ///< meld's version, MELD_VERSION_STRING ("0.1.0")
  std::string compiler;           ///< compiler and version, e.g. "GCC 12.2.0", "Clang 16.0.6"
  std::string cxx_standard;       ///< "C++20", "C++23", ... as __cplusplus says
  long cplusplus = 0;             ///< the value of __cplusplus (e.g. 202002)
  bool optimized = false;         ///< compiled with optimization (__OPTIMIZE__; -O0 is far slower)
  bool compiled_runtime = false;  ///< linked to meld::runtime (MELD_COMPILED_RUNTIME)
  /// What the meld_runtime library was compiled for where it is linked: CMake's MELD_ARCH (a
  /// -march value, "x86-64-v2" by default on x86-64); empty when header-only.
  std::string runtime_arch;
  std::string simd_arch;      ///< xsimd architecture of meld's CPU kernels, e.g. "fma3+avx2"
  std::string xsimd_version;  ///< the xsimd headers compiled against
  /// Instruction sets the translation unit was compiled for (the compiler's predefined macros,
  /// __AVX2__, __FMA__, __AVX512F__, ...), from: sse2 sse3 ssse3 sse4.1 sse4.2 avx fma fma4 avx2
  /// avx512f avx512cd avx512dq avx512bw neon.
  std::vector<std::string> compiled_isa;
  /// Instruction sets of the same list that this CPU and operating system support at run time
  /// (CPUID, less what the OS does not save on a context switch; on ARM, xsimd's detection).
  std::vector<std::string> cpu_isa;
  int threads = 0;  ///< threads of the CPU backend (num_threads())
  thread_source threads_source = thread_source::cores;  ///< how `threads` was chosen
  int cores = 0;                      ///< cores this process may run on (the default thread count)
  std::vector<std::string> backends;  ///< "cpu", "sim", and "cuda" in nvcc-compiled units
  int sim_devices = 0;                ///< devices of meld::sim (MELD_SIM_DEVICES; 0 if invalid)
  bool cuda = false;                  ///< the build enables the CUDA backend (MELD_ENABLE_CUDA)
  bool cuda_emulated = false;  ///< ... on the emulated device of meld's tests (MELD_CUDA_EMU)
  int cuda_devices = -1;       ///< CUDA devices at run time; -1 where the unit lacks the backend
  bool mpi = false;            ///< MPI communicator compiled in (MELD_ENABLE_MPI)
  bool nccl = false;           ///< NCCL communicator compiled in (MELD_ENABLE_NCCL)
  bool blas = false;     ///< float/double matrix products go to a system BLAS (MELD_ENABLE_BLAS)
  bool tracing = false;  ///< the trace recorder records (MELD_TRACE, trace::start)
  bool nvtx = false;     ///< meld's ranges go to an attached NVTX tool (trace::nvtx())
  /// Every environment variable meld reads, set or not.
  std::vector<environment_variable> environment;
  /// Settings meld rejects (a malformed environment variable): the error each use would throw.
  std::vector<std::string> problems;
};

namespace detail {

// Every environment variable that meld's headers read. tests/core/test_configuration.cpp checks
// this list against the "MELD_..." strings of include/.
inline constexpr const char* environment_variables[] = {
    "MELD_NUM_THREADS",      "MELD_SIM_DEVICES",  "MELD_SIM_MEMORY",
    "MELD_SIM_FAULT_REPORT", "MELD_COMM_TIMEOUT", "MELD_COMM_DEBUG",
    "MELD_NO_ISA_WARNING",   "MELD_TRACE",        "MELD_NO_AMX",
};

// The names of the instruction sets in `set`, in isa_names' order.
inline std::vector<std::string> isa_list(isa_set set) {
  std::vector<std::string> names;
  for (int i = 0; i < isa_count; ++i)
    if (set >> i & 1) names.emplace_back(isa_names[i]);
  return names;
}

// The instruction sets of configuration::compiled_isa's list that this CPU and OS can run.
inline std::vector<std::string> cpu_instruction_sets() {
  return isa_list(cpu_isa());
}

#if defined(MELD_COMPILED_RUNTIME)
// The -march that the meld_runtime library was compiled with (CMake's MELD_ARCH; src/runtime.cpp).
const char* runtime_arch() noexcept;
#endif

inline const char* thread_source_text(thread_source s) {
  switch (s) {
    case thread_source::cores:
      return "every core this process may run on";
    case thread_source::environment:
      return "MELD_NUM_THREADS";
    case thread_source::set_num_threads:
      return "meld::set_num_threads";
    case thread_source::error:
      return "the thread pool cannot start";
  }
  return "";
}

inline std::string join(const std::vector<std::string>& words, const char* separator) {
  std::string text;
  for (const auto& w : words) text += (text.empty() ? "" : separator) + w;
  return text;
}

}  // namespace detail

/// The configuration of this program: meld's version, the compiler, the instruction sets compiled
/// for and those of this CPU, the CPU backend's threads, the backends and optional parts compiled
/// in, and meld's environment variables. Starts meld's thread pool if it has not started. Never
/// throws for a malformed setting: it is reported in `problems`.
/// `static` (internal linkage, as Eigen's SimdInstructionSetsInUse): the compile-time facts are
/// those of the calling translation unit, so each unit needs its own definition.
static inline configuration build_info() {
  configuration c;
  c.version = MELD_VERSION_STRING;
  const auto v = [](auto major, auto minor, auto patch) {
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  };
  // nvcc first (it also defines its host compiler's macros), clang before GCC (clang defines
  // __GNUC__ too).
  std::string host;
#if defined(__INTEL_LLVM_COMPILER)
  host = "Intel oneAPI " + std::to_string(__INTEL_LLVM_COMPILER);
#elif defined(__clang__)
  host = "Clang " + v(__clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  host = "GCC " + v(__GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#elif defined(_MSC_VER)
  host = "MSVC " + std::to_string(_MSC_FULL_VER);
#else
  host = "an unknown compiler";
#endif
#if defined(__NVCC__)
  c.compiler = "NVCC " + v(__CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__, __CUDACC_VER_BUILD__) +
               " (host compiler " + host + ")";
#else
  c.compiler = host;
#endif
#if defined(_MSVC_LANG)
  c.cplusplus = _MSVC_LANG;
#else
  c.cplusplus = __cplusplus;
#endif
  c.cxx_standard = c.cplusplus > 202302L    ? "after C++23"
                   : c.cplusplus == 202302L ? "C++23"
                   : c.cplusplus > 202002L  ? "C++23 (draft)"
                   : c.cplusplus == 202002L ? "C++20"
                   : c.cplusplus > 201703L  ? "C++20 (draft)"
                                            : "C++17 or earlier";
#if defined(__OPTIMIZE__) || (defined(_MSC_VER) && !defined(_DEBUG))
  c.optimized = true;
#endif
#if defined(MELD_COMPILED_RUNTIME)
  c.compiled_runtime = true;
  c.runtime_arch = detail::runtime_arch();
#endif
  c.simd_arch = detail::simd_arch::name();
  c.xsimd_version = v(XSIMD_VERSION_MAJOR, XSIMD_VERSION_MINOR, XSIMD_VERSION_PATCH);

  c.compiled_isa = detail::isa_list(detail::compiled_isa);
  c.cpu_isa = detail::cpu_instruction_sets();

  // The pool's default is MELD_NUM_THREADS or every core; a size other than the default was set
  // by the program.
  c.cores = detail::available_cores();
  try {
    c.threads = num_threads();
    const int fallback = detail::default_thread_count();
    c.threads_source = c.threads != fallback             ? thread_source::set_num_threads
                       : std::getenv("MELD_NUM_THREADS") ? thread_source::environment
                                                         : thread_source::cores;
  } catch (const std::exception& e) {
    c.threads = 0;
    c.threads_source = thread_source::error;
    c.problems.emplace_back(e.what());
  }

  c.backends = {"cpu", "sim"};
  try {
    c.sim_devices = detail::sim_device_count();
  } catch (const std::exception& e) {
    c.problems.emplace_back(e.what());
  }
#if defined(MELD_ENABLE_CUDA)
  c.cuda = true;
#endif
#if defined(MELD_CUDA_EMU)
  c.cuda_emulated = true;
#endif
#if defined(MELD_CUDA_BACKEND)
  c.backends.emplace_back("cuda");
  c.cuda_devices = cuda_device_count();
#endif
#if defined(MELD_ENABLE_MPI)
  c.mpi = true;
#endif
#if defined(MELD_ENABLE_NCCL)
  c.nccl = true;
#endif
#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
  c.blas = true;
#endif
  c.tracing = trace::enabled();
  c.nvtx = trace::nvtx();
  for (const char* name : detail::environment_variables) {
    environment_variable var{name, false, {}};
    if (const char* value = std::getenv(name)) {
      var.set = true;
      var.value = value;
    }
    c.environment.push_back(std::move(var));
  }
  return c;
}

/// Writes c as aligned "key: value" lines: version, compiler, instruction sets (with a note where
/// this CPU has some that the program was not compiled for), threads, backends, optional parts,
/// environment variables, and any problem with them.
inline void print_configuration(std::ostream& os, const configuration& c) {
  std::vector<std::pair<std::string, std::string>> lines;
  const auto line = [&](std::string key, std::string value) {
    lines.emplace_back(std::move(key), std::move(value));
  };
  const auto missing = [](const std::vector<std::string>& from,
                          const std::vector<std::string>& in) {
    std::vector<std::string> out;
    for (const auto& s : from)
      if (std::find(in.begin(), in.end(), s) == in.end()) out.push_back(s);
    return out;
  };
  line("meld", c.version + (c.compiled_runtime ? " (compiled runtime: meld::runtime, built for " +
                                                     c.runtime_arch + ")"
                                               : " (header-only)"));
  line("compiler", c.compiler + ", " + c.cxx_standard + " (__cplusplus " +
                       std::to_string(c.cplusplus) + "), " +
                       (c.optimized ? "optimized" : "not optimized"));
  line("simd kernels", c.simd_arch + " (xsimd " + c.xsimd_version + ")");
  line("compiled for", c.compiled_isa.empty() ? "(none)" : detail::join(c.compiled_isa, " "));
  line("cpu supports", c.cpu_isa.empty() ? "(none detected)" : detail::join(c.cpu_isa, " "));
  if (const auto extra = missing(c.cpu_isa, c.compiled_isa); !extra.empty())
    line("note", "this CPU also has " + detail::join(extra, " ") +
                     ", which this program was not compiled for (-march=native, or linking "
                     "meld::native, compiles for every instruction set of the building machine)");
  if (const auto lacking = missing(c.compiled_isa, c.cpu_isa); !lacking.empty())
    line("warning", "compiled for " + detail::join(lacking, " ") +
                        ", which this CPU does not support (code using them fails with SIGILL)");
  std::string threads =
      std::to_string(c.threads) + " (" + detail::thread_source_text(c.threads_source);
  if (c.threads_source == thread_source::set_num_threads ||
      c.threads_source == thread_source::environment)
    threads += "; this process may run on " + std::to_string(c.cores) + " core" +
               (c.cores == 1 ? "" : "s");
  line("threads", threads + ")");
  std::string backends;
  for (const auto& b : c.backends) {
    backends += (backends.empty() ? "" : ", ") + b;
    if (b == "sim") backends += " (" + std::to_string(c.sim_devices) + " simulated devices)";
    if (b == "cuda")
      backends += " (" + std::to_string(c.cuda_devices) + (c.cuda_emulated ? " emulated" : "") +
                  " device" + (c.cuda_devices == 1 ? "" : "s") + ")";
  }
  if (c.cuda && c.cuda_devices < 0)
    backends += "; cuda is built in for the files nvcc compiles (not this one)";
  line("backends", backends);
  line("mpi", c.mpi ? "yes (meld::mpi_comm, param_server)" : "no");
  line("nccl", c.nccl ? "yes (meld::nccl_comm)" : "no");
  line("blas", c.blas ? "yes (float and double matrix products)" : "no (meld's own gemm)");
  std::string traces = c.tracing ? "recording (Chrome-trace JSON)" : "off";
  if (c.nvtx) traces += "; NVTX ranges to the attached tool";
  line("traces", traces);
  for (const auto& var : c.environment) line(var.name, var.set ? var.value : "(not set)");
  for (const auto& problem : c.problems) line("problem", problem);

  std::size_t width = 0;
  for (const auto& [key, value] : lines) width = std::max(width, key.size());
  for (const auto& [key, value] : lines)
    os << key << ':' << std::string(width - key.size() + 2, ' ') << value << '\n';
}

/// Prints build_info() of the calling translation unit (see print_configuration above).
static inline void print_configuration(std::ostream& os) {
  print_configuration(os, build_info());
}

/// @}

}  // namespace meld
