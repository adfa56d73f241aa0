// meld's traced ranges as NVTX ranges (core/trace.hpp), so that Nsight Systems shows meld's
// operations, data_parallel's phases and buckets, waits and the program's own trace_range above
// the kernels they launched. Ranges go to the domain "meld"; the range's category (cuda, cpu,
// wait, dp, comm, ps, user, ...) becomes a named NVTX category and sets the color; the first
// integer argument (elements, bucket, rank) is the payload.
//
// NVTX decides at its first call whether a tool is attached (NVTX_INJECTION64_PATH, set by
// Nsight, or an injection linked into the program); without one, nvtxDomainCreateA returns no
// domain and meld never calls NVTX again, so traced ranges stay one flag read. The NVTX v3
// headers are header-only (they come with the CUDA toolkit); a build without them has no NVTX.
#pragma once

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstring>
#include <iterator>

#include "../../core/trace.hpp"

namespace meld::detail::cuda_nvtx {

inline nvtxDomainHandle_t domain = nullptr;

// meld's categories: NVTX category ids 1, 2, ... and a color each (ARGB). Any other category (a
// program's own trace_range) is category 0 in grey.
struct category {
  const char* name;
  std::uint32_t color;
};
inline constexpr category categories[] = {
    {"cuda", 0xff76b900}, {"cpu", 0xff1f77b4},  {"sim", 0xff17becf}, {"wait", 0xffd62728},
    {"dp", 0xffff7f0e},   {"comm", 0xff9467bd}, {"ps", 0xff8c564b},  {"user", 0xff2ca02c},
};

inline std::uint32_t category_id(const char* name) {
  if (name)
    for (std::uint32_t i = 0; i < std::size(categories); ++i)
      if (std::strcmp(name, categories[i].name) == 0) return i + 1;
  return 0;
}

inline void push(const char* name, const char* category_name, std::int64_t payload) {
  const std::uint32_t id = category_id(category_name);
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = id;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = id ? categories[id - 1].color : 0xff7f7f7f;
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = payload;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain, &a);
}

inline void pop() {
  nvtxDomainRangePop(domain);
}

// Sends traced ranges to NVTX where a tool listens. Runs once per program, during static
// initialization of the first unit that includes the CUDA backend.
inline bool attach() noexcept {
  domain = nvtxDomainCreateA("meld");
  if (!domain) return false;
  for (std::uint32_t i = 0; i < std::size(categories); ++i)
    nvtxDomainNameCategoryA(domain, i + 1, categories[i].name);
  trace_nvtx = trace_nvtx_calls{&push, &pop};
  trace_sinks.fetch_or(trace_to_nvtx, std::memory_order_release);
  return true;
}

inline const bool attached = attach();

}  // namespace meld::detail::cuda_nvtx

#endif  // __has_include(<nvtx3/nvToolsExt.h>)
