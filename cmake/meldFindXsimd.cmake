# Finds xsimd 8.1 or newer for meld's build and for its installed package (meldConfig.cmake).
#
# - A target `xsimd` that the parent project already has (its own copy, a FetchContent) is used as
#   it is, nothing is searched.
# - Otherwise find_package(xsimd) without a version: xsimd's config declares SameMajorVersion, so
#   asking for 8.1 would refuse xsimd 9 to 14, which meld builds against unchanged. The version is
#   checked here instead.
# - Debian 12's xsimd package exports a target that links "xtl" without depending on xtl; when xtl
#   is not installed, an empty stand-in keeps the linker from looking for -lxtl.
#
# Sets _meld_xsimd_error to a message when no usable xsimd is found (the caller decides whether
# that is fatal: meld's own configure stops, the package config reports meld as not found).
set(_meld_xsimd_error "")
if(NOT TARGET xsimd)
  find_package(xtl QUIET)
  if(meld_FIND_QUIETLY)
    find_package(xsimd QUIET)
  else()
    find_package(xsimd)
  endif()
  if(NOT xsimd_FOUND)
    set(_meld_xsimd_error "meld needs xsimd 8.1 or newer, and xsimd was not found (install it, or "
                          "set xsimd_DIR or CMAKE_PREFIX_PATH to where its xsimdConfig.cmake is)")
  elseif(xsimd_VERSION VERSION_LESS 8.1)
    set(_meld_xsimd_error "meld needs xsimd 8.1 or newer, found xsimd ${xsimd_VERSION} in "
                          "${xsimd_DIR}")
  endif()
  string(CONCAT _meld_xsimd_error ${_meld_xsimd_error})
endif()
if(TARGET xsimd)
  get_target_property(_meld_xsimd_links xsimd INTERFACE_LINK_LIBRARIES)
  if(_meld_xsimd_links MATCHES "(^|;)xtl(;|$)" AND NOT TARGET xtl)
    add_library(xtl INTERFACE IMPORTED)
  endif()
  unset(_meld_xsimd_links)
endif()
