// meld's traced ranges as NVTX ranges in a CUDA build (backend/cuda/nvtx.hpp). An NVTX tool is
// attached the way Nsight's is, through NVTX's injection interface; here the injection is linked
// into the program (NVTX's static injection) and records what it is told: the domain "meld" and
// its named categories, then, per thread, balanced pushes and pops of the CUDA backend's
// operations, a program's own trace_range, and data_parallel's phases, buckets and collectives,
// with their categories, colors and payloads. The recorder's JSON trace is unchanged beside it.

// This unit defines the injection's entry point (below), so NVTX's weak placeholder of it is left
// out here, and declared instead (the other units keep theirs; the linker takes this definition).
#include <cstdint>
#define NVTX_STATIC_INJECTION_IMPL
extern "C" int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(std::uint32_t));
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <meld/distributed/data_parallel.hpp>
#include <meld/distributed/thread_comm.hpp>
#include <meld/meld.hpp>
#include <meld/nn/nn.hpp>

#include "catch.hpp"

namespace {

// ---- the probe: a minimal NVTX tool ------------------------------------------------------------

struct nvtx_event {
  std::thread::id thread;
  bool push = false;
  std::string domain, message;
  std::uint32_t category = 0, color = 0;
  std::int64_t payload = 0;
};

struct probe_state {
  std::mutex mutex;
  std::deque<std::string> domains;  // a handle is the address of its name
  std::map<std::uint32_t, std::string> categories;
  std::vector<nvtx_event> events;
  bool armed = false;
};

// Function-local: NVTX may call the probe while other units are statically initialized.
probe_state& probe() {
  static probe_state p;
  return p;
}

const std::string& domain_name(nvtxDomainHandle_t d) {
  static const std::string none = "(no domain)";
  return d ? *reinterpret_cast<const std::string*>(d) : none;
}

nvtxDomainHandle_t NVTX_API probe_domain_create(const char* name) {
  std::lock_guard lock(probe().mutex);
  return reinterpret_cast<nvtxDomainHandle_t>(&probe().domains.emplace_back(name));
}

void NVTX_API probe_name_category(nvtxDomainHandle_t d, std::uint32_t id, const char* name) {
  std::lock_guard lock(probe().mutex);
  if (domain_name(d) == "meld") probe().categories[id] = name;
}

int NVTX_API probe_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard lock(probe().mutex);
  if (!probe().armed) return 0;
  nvtx_event e;
  e.thread = std::this_thread::get_id();
  e.push = true;
  e.domain = domain_name(d);
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) e.message = a->message.ascii;
  e.category = a->category;
  e.color = a->colorType == NVTX_COLOR_ARGB ? a->color : 0;
  if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64) e.payload = a->payload.llValue;
  probe().events.push_back(std::move(e));
  return 0;
}

int NVTX_API probe_pop(nvtxDomainHandle_t d) {
  std::lock_guard lock(probe().mutex);
  if (!probe().armed) return 0;
  nvtx_event e;
  e.thread = std::this_thread::get_id();
  e.domain = domain_name(d);
  probe().events.push_back(std::move(e));
  return 0;
}

int NVTX_API probe_initialize(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] =
      reinterpret_cast<NvtxFunctionPointer>(&probe_domain_create);
  *table[NVTX_CBID_CORE2_DomainNameCategoryA] =
      reinterpret_cast<NvtxFunctionPointer>(&probe_name_category);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&probe_push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&probe_pop);
  return 1;
}

// The events of the block between arm() and the returned vector's retrieval.
void arm() {
  std::lock_guard lock(probe().mutex);
  probe().events.clear();
  probe().armed = true;
}
std::vector<nvtx_event> disarm() {
  std::lock_guard lock(probe().mutex);
  probe().armed = false;
  return std::move(probe().events);
}

// Pushes with their pops: the ranges of each thread, checked to nest (never a pop without a push,
// none left open) and to be of domain "meld".
struct range {
  nvtx_event push;
  std::size_t depth = 0;  // ranges open around it on its thread
  std::string parent;     // the innermost of them ("" at depth 0)
};
std::vector<range> balanced_ranges(const std::vector<nvtx_event>& events) {
  std::map<std::thread::id, std::vector<std::size_t>> open;  // indices into `out`
  std::vector<range> out;
  for (const auto& e : events) {
    CHECK(e.domain == "meld");
    auto& stack = open[e.thread];
    if (e.push) {
      const std::string parent = stack.empty() ? "" : out[stack.back()].push.message;
      stack.push_back(out.size());
      out.push_back({e, stack.size() - 1, parent});
    } else {
      REQUIRE_FALSE(stack.empty());
      stack.pop_back();
    }
  }
  for (const auto& [thread, stack] : open) CHECK(stack.empty());
  return out;
}

std::vector<range> named(const std::vector<range>& ranges, const std::string& name) {
  std::vector<range> out;
  for (const auto& r : ranges)
    if (r.push.message == name) out.push_back(r);
  return out;
}

std::uint32_t category_of(const std::string& name) {
  std::lock_guard lock(probe().mutex);
  for (const auto& [id, n] : probe().categories)
    if (n == name) return id;
  return 0;
}

}  // namespace

extern "C" {
// NVTX's static injection: a tool's entry point linked into the program.
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = &probe_initialize;
}

TEST_CASE("nvtx: a tool attached gets the domain meld and its categories", "[gpu][nvtx]") {
  REQUIRE(meld::trace::nvtx());
  CHECK(meld::build_info().nvtx);
  std::map<std::uint32_t, std::string> categories;
  {
    std::lock_guard lock(probe().mutex);
    categories = probe().categories;
  }
  const std::map<std::uint32_t, std::string> expected{{1, "cuda"}, {2, "cpu"}, {3, "sim"},
                                                      {4, "wait"}, {5, "dp"},  {6, "comm"},
                                                      {7, "ps"},   {8, "user"}};
  CHECK(categories == expected);
}

TEST_CASE("nvtx: the CUDA backend's operations are ranges with their element counts",
          "[gpu][nvtx]") {
  using B = meld::cuda<meld::async>;
  const meld::tensor<float> host = meld::uniform<float>({64, 48}, -1.f, 1.f, 3);
  arm();
  meld::tensor<float, B> a = meld::to<B>(host);
  meld::tensor<float, B> b({64, 48});
  b = 2.f * a + meld::exp(a);
  const float total = meld::sum(b).get();
  meld::tensor<float, B> c = meld::matmul(a, b.transpose());
  const meld::tensor<float> back = meld::to<meld::cpu<>>(c);
  const auto ranges = balanced_ranges(disarm());

  // The values are right (the ranges changed nothing).
  float expected_total = 0;
  for (meld::index_t i = 0; i < host.size(); ++i)
    expected_total += 2.f * host.data()[i] + std::exp(host.data()[i]);
  CHECK(total == Approx(expected_total).epsilon(1e-5));
  double c00 = 0;
  for (meld::index_t k = 0; k < 48; ++k)
    c00 += double(host(0, k)) * (2.0 * host(0, k) + std::exp(double(host(0, k))));
  CHECK(back(0, 0) == Approx(c00).epsilon(1e-4));

  const std::uint32_t cuda = category_of("cuda");
  REQUIRE(cuda != 0);
  for (const char* name : {"copy from host", "fill", "assign", "reduce", "gemm", "copy to host"}) {
    INFO(name);
    const auto found = named(ranges, name);
    REQUIRE_FALSE(found.empty());
    CHECK(found.front().push.category == cuda);
    CHECK(found.front().push.color == 0xff76b900u);
  }
  CHECK(named(ranges, "assign").front().push.payload == 64 * 48);
  CHECK(named(ranges, "reduce").front().push.payload == 64 * 48);
  CHECK(named(ranges, "gemm").front().push.payload == 64 * 64);
  CHECK(named(ranges, "copy to host").back().push.payload == 64 * 64);
}

TEST_CASE("nvtx: a program's own ranges nest, with run-time names and payloads", "[gpu][nvtx]") {
  arm();
  {
    meld::trace_range epoch("epoch", "user", {"epoch", 3});
    for (int i = 0; i < 2; ++i) {
      meld::trace_range batch("batch " + std::to_string(i), "data", {"batch", i});
    }
  }
  const auto ranges = balanced_ranges(disarm());
  REQUIRE(ranges.size() == 3);
  CHECK(ranges[0].push.message == "epoch");
  CHECK(ranges[0].push.payload == 3);
  CHECK(ranges[0].push.category == category_of("user"));
  CHECK(ranges[0].depth == 0);
  for (int i = 0; i < 2; ++i) {
    const auto& r = ranges[static_cast<std::size_t>(1 + i)];
    CHECK(r.push.message == "batch " + std::to_string(i));
    CHECK(r.push.payload == i);
    CHECK(r.push.category == 0);  // not one of meld's categories: grey
    CHECK(r.push.color == 0xff7f7f7fu);
    CHECK(r.depth == 1);
  }
}

TEST_CASE("nvtx: data_parallel's phases, buckets and collectives, beside the JSON trace",
          "[gpu][nvtx]") {
  namespace nn = meld::nn;
  using B = meld::cpu<>;
  auto net = nn::sequential(nn::linear<float, B>(32, 128), nn::relu<float, B>(),
                            nn::linear<float, B>(128, 128), nn::tanh<float, B>(),
                            nn::linear<float, B>(128, 10));
  nn::initialize(net, nn::kaiming_uniform{}, 5);
  meld::thread_group group(2);
  meld::data_parallel dp(net, group, {.bucket_bytes = std::size_t(16) << 10});
  const int buckets = static_cast<int>(dp.buckets().size());
  REQUIRE(buckets >= 2);
  const meld::tensor<float> x = meld::uniform<float>({64, 32}, -1.f, 1.f, 7);
  const meld::tensor<std::int64_t> y = meld::rng(8).integers<std::int64_t>({64}, 0, 10);
  dp.step(x, y, nn::cross_entropy);  // warm-up

  const std::string path =
      (std::filesystem::temp_directory_path() / "meld_test_nvtx_dp.json").string();
  meld::trace::start(path);
  arm();
  const double loss = dp.step(x, y, nn::cross_entropy);
  const auto ranges = balanced_ranges(disarm());
  meld::trace::stop();
  CHECK(loss > 0);
  // The recorder still wrote its trace, with the same step.
  REQUIRE(std::filesystem::exists(path));
  CHECK(std::filesystem::file_size(path) > 100);
  std::filesystem::remove(path);

  const std::uint32_t dp_category = category_of("dp");
  for (const char* phase : {"step", "forward", "backward"}) {
    INFO(phase);
    const auto found = named(ranges, phase);
    REQUIRE(found.size() == 2);  // one per worker, each on its own thread, with its rank
    CHECK(found[0].push.thread != found[1].push.thread);
    CHECK(found[0].push.payload + found[1].push.payload == 0 + 1);
    CHECK(found[0].push.category == dp_category);
  }
  for (const char* phase : {"forward", "backward"})
    for (const auto& r : named(ranges, phase)) CHECK(r.parent == "step");
  // Each bucket's launch: inside its worker's backward where its gradients were ready there (the
  // buckets overlap backward), else in the wait after it.
  const auto launched = named(ranges, "bucket");
  CHECK(launched.size() == static_cast<std::size_t>(2 * buckets));
  int during_backward = 0;
  for (const auto& l : launched) {
    CHECK((l.parent == "backward" || l.parent == "allreduce wait"));
    during_backward += l.parent == "backward";
  }
  CHECK(during_backward >= dp.last_timing().buckets_during_backward);
  // The collectives ran as ranges of category comm.
  const std::uint32_t comm = category_of("comm");
  CHECK(std::count_if(ranges.begin(), ranges.end(),
                      [&](const range& r) { return r.push.category == comm; }) >= 2 * buckets);
}
