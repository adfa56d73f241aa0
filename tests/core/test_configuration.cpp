// meld::build_info() and print_configuration() against references of their own: the version
// macro, the compiler's predefined macros, /proc/cpuinfo's flags, the affinity mask, the string
// literals of include/ (every environment variable meld reads), and fresh processes started with
// MELD_NUM_THREADS set, well or badly.
#include <meld/backend/configuration.hpp>
#include <meld/backend/device.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

#include "catch.hpp"

namespace {

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string printed(const meld::configuration& c) {
  std::ostringstream os;
  meld::print_configuration(os, c);
  return os.str();
}

#if defined(__linux__)
// The words of the first line of /proc/cpuinfo that starts with `key` ("flags" on x86, "Features"
// on ARM).
std::set<std::string> cpuinfo_words(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    return {std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  }
  return {};
}

// This test program, run with `environment` prepended to the command and only the hidden
// [configuration_child] test case; its output (for the report of a failure) and exit status.
struct child_result {
  int status = -1;
  std::string output;
};

child_result run_child(const std::string& environment) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return {};
  const std::string command = environment + " '" + std::string(exe, static_cast<std::size_t>(n)) +
                              "' '[configuration_child]' 2>&1";
  child_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  for (std::size_t got; (got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;)
    r.output.append(buffer, got);
  r.status = ::pclose(pipe);
  return r;
}
#endif

}  // namespace

TEST_CASE("build_info: version, compiler, standard, build mode", "[core][configuration]") {
  const meld::configuration c = meld::build_info();
  CHECK(c.version == MELD_VERSION_STRING);
  CHECK(c.version == std::to_string(MELD_VERSION_MAJOR) + "." + std::to_string(MELD_VERSION_MINOR) +
                         "." + std::to_string(MELD_VERSION_PATCH));
#if defined(__clang__)
  CHECK(c.compiler.find("Clang " + std::to_string(__clang_major__) + "." +
                        std::to_string(__clang_minor__)) != std::string::npos);
#elif defined(__GNUC__)
  CHECK(c.compiler.find("GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) +
                        "." + std::to_string(__GNUC_PATCHLEVEL__)) != std::string::npos);
#endif
  CHECK(c.cplusplus == __cplusplus);
  if (__cplusplus == 202002L) CHECK(c.cxx_standard == "C++20");
#if defined(__OPTIMIZE__)
  CHECK(c.optimized);
#else
  CHECK_FALSE(c.optimized);
#endif
#if defined(MELD_COMPILED_RUNTIME)
  CHECK(c.compiled_runtime);
#else
  CHECK_FALSE(c.compiled_runtime);
#endif
  CHECK(c.xsimd_version == std::to_string(XSIMD_VERSION_MAJOR) + "." +
                               std::to_string(XSIMD_VERSION_MINOR) + "." +
                               std::to_string(XSIMD_VERSION_PATCH));
#if defined(__AVX512BW__) && defined(__OPTIMIZE__)
  CHECK(c.simd_arch == "avx512bw");
#elif defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
  CHECK(c.simd_arch == "fma3+avx2");
#endif
  CHECK(c.problems.empty());
}

TEST_CASE("build_info: instruction sets compiled for are the compiler's macros",
          "[core][configuration]") {
  const std::vector<std::string> isa = meld::build_info().compiled_isa;
  struct expectation {
    const char* name;
    bool defined;
  };
  const expectation expected[] = {
#if defined(__x86_64__)
    {"sse2", true},  // every x86-64 compiler defines __SSE2__
#endif
#if defined(__SSE3__)
    {"sse3", true},
#else
    {"sse3", false},
#endif
#if defined(__SSSE3__)
    {"ssse3", true},
#else
    {"ssse3", false},
#endif
#if defined(__SSE4_1__)
    {"sse4.1", true},
#else
    {"sse4.1", false},
#endif
#if defined(__SSE4_2__)
    {"sse4.2", true},
#else
    {"sse4.2", false},
#endif
#if defined(__AVX__)
    {"avx", true},
#else
    {"avx", false},
#endif
#if defined(__FMA__)
    {"fma", true},
#else
    {"fma", false},
#endif
#if defined(__AVX2__)
    {"avx2", true},
#else
    {"avx2", false},
#endif
#if defined(__AVX512F__)
    {"avx512f", true},
#else
    {"avx512f", false},
#endif
#if defined(__AVX512CD__)
    {"avx512cd", true},
#else
    {"avx512cd", false},
#endif
#if defined(__AVX512DQ__)
    {"avx512dq", true},
#else
    {"avx512dq", false},
#endif
#if defined(__AVX512BW__)
    {"avx512bw", true},
#else
    {"avx512bw", false},
#endif
  };
  for (const auto& e : expected) {
    INFO(e.name);
    CHECK(has(isa, e.name) == e.defined);
  }
}

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
TEST_CASE("build_info: the CPU's instruction sets are /proc/cpuinfo's", "[core][configuration]") {
  const std::vector<std::string> isa = meld::build_info().cpu_isa;
#if defined(__x86_64__)
  const std::set<std::string> flags = cpuinfo_words("flags");
  REQUIRE(!flags.empty());
  // meld's name, /proc/cpuinfo's (the kernel calls SSE3 "pni").
  const std::pair<const char*, const char*> names[] = {
      {"sse2", "sse2"},         {"sse3", "pni"},          {"ssse3", "ssse3"},
      {"sse4.1", "sse4_1"},     {"sse4.2", "sse4_2"},     {"avx", "avx"},
      {"fma", "fma"},           {"fma4", "fma4"},         {"avx2", "avx2"},
      {"avx512f", "avx512f"},   {"avx512cd", "avx512cd"}, {"avx512dq", "avx512dq"},
      {"avx512bw", "avx512bw"},
  };
#else
  const std::set<std::string> flags = cpuinfo_words("Features");
  REQUIRE(!flags.empty());
  const std::pair<const char*, const char*> names[] = {{"neon", "asimd"}};
#endif
  for (const auto& [ours, kernel] : names) {
    INFO(ours << " (/proc/cpuinfo: " << kernel << ")");
    CHECK(has(isa, ours) == (flags.count(kernel) == 1));
  }
  CHECK(isa.size() == static_cast<std::size_t>(std::count_if(
                          std::begin(names), std::end(names),
                          [&](const auto& n) { return flags.count(n.second) == 1; })));
}
#endif

TEST_CASE("build_info: threads, and how their number was chosen", "[core][configuration]") {
  const meld::configuration c = meld::build_info();
  CHECK(c.threads == meld::num_threads());
#if defined(__linux__)
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  CHECK(c.cores == CPU_COUNT(&set));
#endif
  const char* env = std::getenv("MELD_NUM_THREADS");
  if (env) {
    CHECK(c.threads == std::atoi(env));
    CHECK(c.threads_source == meld::thread_source::environment);
  } else {
    CHECK(c.threads == c.cores);
    CHECK(c.threads_source == meld::thread_source::cores);
  }

  // A size the program sets is reported as its choice, and the default again once restored.
  const int before = meld::num_threads();
  meld::set_num_threads(before + 1);
  const meld::configuration changed = meld::build_info();
  meld::set_num_threads(before);
  CHECK(changed.threads == before + 1);
  CHECK(changed.threads_source == meld::thread_source::set_num_threads);
  CHECK(printed(changed).find("threads:") != std::string::npos);
  CHECK(printed(changed).find(std::to_string(before + 1) + " (meld::set_num_threads") !=
        std::string::npos);
  CHECK(meld::build_info().threads_source == c.threads_source);
}

TEST_CASE("build_info: backends, optional parts and environment", "[core][configuration]") {
  const meld::configuration c = meld::build_info();
  CHECK(has(c.backends, "cpu"));
  CHECK(has(c.backends, "sim"));
#if defined(MELD_CUDA_BACKEND)
  CHECK(has(c.backends, "cuda"));
  CHECK(c.cuda_devices == meld::cuda_device_count());
#else
  CHECK_FALSE(has(c.backends, "cuda"));
  CHECK(c.cuda_devices == -1);
#endif
  CHECK(c.sim_devices == meld::device_count<meld::sim<>>());
#if defined(MELD_ENABLE_CUDA)
  CHECK(c.cuda);
#else
  CHECK_FALSE(c.cuda);
#endif
#if defined(MELD_ENABLE_MPI)
  CHECK(c.mpi);
#else
  CHECK_FALSE(c.mpi);
#endif
#if defined(MELD_ENABLE_NCCL)
  CHECK(c.nccl);
#else
  CHECK_FALSE(c.nccl);
#endif
#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
  CHECK(c.blas);
#else
  CHECK_FALSE(c.blas);
#endif
  for (const auto& var : c.environment) {
    INFO(var.name);
    const char* value = std::getenv(var.name.c_str());
    CHECK(var.set == (value != nullptr));
    CHECK(var.value == (value ? value : ""));
  }
}

TEST_CASE("build_info: the environment list is every MELD_ variable of include/",
          "[core][configuration]") {
  namespace fs = std::filesystem;
  // The headers beside this test's source; a build from a copy without them has nothing to check.
  const fs::path include = fs::path(__FILE__).parent_path() / ".." / ".." / "include" / "meld";
  if (!fs::is_directory(include)) {
    WARN("no include/meld beside " << __FILE__ << ": not checked");
    return;
  }
  // Every "MELD_NAME string literal of the headers names an environment variable: the names the
  // headers pass to getenv, and the same names in the messages that reject their values.
  std::set<std::string> read;
  for (const auto& entry : fs::recursive_directory_iterator(include)) {
    if (entry.path().extension() != ".hpp" || entry.path().filename() == "configuration.hpp")
      continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::size_t at = 0; (at = text.find("\"MELD_", at)) != std::string::npos; ++at) {
      std::size_t end = at + 1;
      while (end < text.size() &&
             (std::isupper(static_cast<unsigned char>(text[end])) ||
              std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '_'))
        ++end;
      read.insert(text.substr(at + 1, end - at - 1));
    }
  }
  std::set<std::string> listed;
  for (const auto& var : meld::build_info().environment) listed.insert(var.name);
  CHECK(read.count("MELD_NUM_THREADS") == 1);
  CHECK(listed == read);
}

TEST_CASE("print_configuration: one aligned line per field", "[core][configuration]") {
  const meld::configuration c = meld::build_info();
  std::ostringstream os;
  meld::print_configuration(os);
  const std::string text = os.str();
  INFO(text);
  // The value of the line "key:   value" (the first such line); "<missing>" if there is none.
  const auto field = [&](const std::string& key) -> std::string {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind(key + ": ", 0) == 0)
        return line.substr(line.find_first_not_of(' ', key.size() + 1));
    return "<missing>";
  };
  const auto words = [](const std::vector<std::string>& list) {
    std::string joined;
    for (const auto& w : list) joined += (joined.empty() ? "" : " ") + w;
    return joined;
  };
  CHECK(field("meld").rfind(c.version + " (", 0) == 0);
  CHECK(field("compiler").rfind(c.compiler + ", " + c.cxx_standard, 0) == 0);
  CHECK(field("simd kernels") == c.simd_arch + " (xsimd " + c.xsimd_version + ")");
  CHECK(field("compiled for") == (c.compiled_isa.empty() ? "(none)" : words(c.compiled_isa)));
  CHECK(field("cpu supports") == (c.cpu_isa.empty() ? "(none detected)" : words(c.cpu_isa)));
  CHECK(field("threads").rfind(std::to_string(c.threads) + " (", 0) == 0);
  CHECK(field("backends")
            .rfind("cpu, sim (" + std::to_string(c.sim_devices) + " simulated devices)", 0) == 0);
  CHECK(field("mpi").rfind(c.mpi ? "yes" : "no", 0) == 0);
  CHECK(field("nccl").rfind(c.nccl ? "yes" : "no", 0) == 0);
  CHECK(field("blas").rfind(c.blas ? "yes" : "no", 0) == 0);
  CHECK(field("traces").rfind(c.tracing ? "recording" : "off", 0) == 0);
  CHECK((field("traces").find("NVTX") != std::string::npos) == c.nvtx);
  for (const auto& var : c.environment)
    CHECK(field(var.name) == (var.set ? var.value : "(not set)"));
  // The values start in one column.
  std::istringstream lines(text);
  std::set<std::size_t> columns;
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    const std::size_t colon = line.find(": ");
    REQUIRE(colon != std::string::npos);
    columns.insert(line.find_first_not_of(' ', colon + 1));
  }
  CHECK(columns.size() == 1);
  CHECK(count >= 10 + static_cast<int>(c.environment.size()));
}

TEST_CASE("print_configuration: instruction sets the CPU has and the program does not use",
          "[core][configuration]") {
  meld::configuration c;
  c.compiled_isa = {"sse2", "avx", "fma", "avx2"};
  c.cpu_isa = {"sse2", "avx", "fma", "avx2", "avx512f", "avx512bw"};
  const std::string more = printed(c);
  INFO(more);
  CHECK(more.find("note:") != std::string::npos);
  CHECK(more.find("this CPU also has avx512f avx512bw, which this program was not compiled for") !=
        std::string::npos);
  CHECK(more.find("-march=native") != std::string::npos);
  CHECK(more.find("warning:") == std::string::npos);

  c.cpu_isa = c.compiled_isa;
  CHECK(printed(c).find("note:") == std::string::npos);

  c.cpu_isa = {"sse2"};
  const std::string fewer = printed(c);
  CHECK(fewer.find("warning:") != std::string::npos);
  CHECK(fewer.find("compiled for avx fma avx2, which this CPU does not support") !=
        std::string::npos);
}

#if defined(__linux__)
TEST_CASE("build_info in a fresh process: MELD_NUM_THREADS, and bad settings reported",
          "[core][configuration]") {
  const child_result good =
      run_child("env MELD_TEST_CONFIGURATION_CHILD=1 MELD_NUM_THREADS=3 MELD_COMM_DEBUG=1");
  INFO(good.output);
  CHECK(good.status == 0);
  const child_result bad = run_child(
      "env MELD_TEST_CONFIGURATION_CHILD=1 MELD_NUM_THREADS=lots MELD_SIM_DEVICES=banana");
  INFO(bad.output);
  CHECK(bad.status == 0);
}

// Run by the test above in a child process, with the environment it sets. Hidden, but a filter of
// exclusions only (CTest's "~[sim]") selects hidden tests too: elsewhere it does nothing.
TEST_CASE("build_info child", "[.][configuration_child]") {
  if (!std::getenv("MELD_TEST_CONFIGURATION_CHILD")) return;
  const char* threads = std::getenv("MELD_NUM_THREADS");
  REQUIRE(threads != nullptr);
  const meld::configuration c = meld::build_info();
  const std::string text = printed(c);
  INFO(text);
  if (std::string(threads) == "3") {
    CHECK(c.threads == 3);
    CHECK(c.threads_source == meld::thread_source::environment);
    CHECK(c.problems.empty());
    CHECK(text.find("threads:") != std::string::npos);
    CHECK(text.find("3 (MELD_NUM_THREADS; this process may run on ") != std::string::npos);
    CHECK(text.find("MELD_COMM_DEBUG:") != std::string::npos);
    const auto debug = std::find_if(c.environment.begin(), c.environment.end(),
                                    [](const auto& v) { return v.name == "MELD_COMM_DEBUG"; });
    REQUIRE(debug != c.environment.end());
    CHECK(debug->set);
    CHECK(debug->value == "1");
  } else {
    // Malformed settings: reported, not thrown; the pool cannot start.
    CHECK(c.threads == 0);
    CHECK(c.threads_source == meld::thread_source::error);
    CHECK(c.sim_devices == 0);
    REQUIRE(c.problems.size() == 2);
    CHECK(c.problems[0].find("MELD_NUM_THREADS='lots'") != std::string::npos);
    CHECK(c.problems[1].find("MELD_SIM_DEVICES=banana") != std::string::npos);
    CHECK(text.find("problem:") != std::string::npos);
    CHECK(text.find("the thread pool cannot start") != std::string::npos);
  }
}
#endif
