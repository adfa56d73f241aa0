// The meld_runtime library (CMake target meld::runtime): the one definition of meld's runtime, the
// non-template parts that header-only programs compile in each translation unit (MELD_RUNTIME in
// include/meld/core/config.hpp). Programs that link it are compiled with MELD_COMPILED_RUNTIME.
#define MELD_BUILDING_RUNTIME 1
#ifndef MELD_COMPILED_RUNTIME
#define MELD_COMPILED_RUNTIME 1
#endif

#include <meld/meld.hpp>

// What this library is compiled for (CMake passes MELD_ARCH): build_info() reports it.
#ifndef MELD_RUNTIME_ARCH
#define MELD_RUNTIME_ARCH "the compiler's default"
#endif

namespace meld::detail {

const char* runtime_arch() noexcept {
  return MELD_RUNTIME_ARCH;
}

template void throw_list<shape_error>(const cat_arg*, int);
template void throw_list<index_error>(const cat_arg*, int);
template void throw_list<allocation_error>(const cat_arg*, int);
template void throw_list<std::invalid_argument>(const cat_arg*, int);

}  // namespace meld::detail

namespace meld::detail::cpu_eval {

template void fill(float*, index_t, float);
template void fill(double*, index_t, double);
template void generate_range(float*, index_t, index_t, const uniform_draw<float>&);
template void generate_range(double*, index_t, index_t, const uniform_draw<double>&);
template void generate_range(float*, index_t, index_t, const normal_draw<float>&);
template void generate_range(double*, index_t, index_t, const normal_draw<double>&);

}  // namespace meld::detail::cpu_eval
