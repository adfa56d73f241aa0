# Finds xsimd (8.1 or newer). Debian 12's xsimd package exports a target that links "xtl" without
# depending on xtl; when xtl is not installed, an empty stand-in keeps the linker from looking
# for -lxtl.
find_package(xtl QUIET)
find_package(xsimd 8.1 REQUIRED)
get_target_property(_meld_xsimd_links xsimd INTERFACE_LINK_LIBRARIES)
if(_meld_xsimd_links MATCHES "(^|;)xtl(;|$)" AND NOT TARGET xtl)
  add_library(xtl INTERFACE IMPORTED)
endif()
unset(_meld_xsimd_links)
