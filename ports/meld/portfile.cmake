# vcpkg overlay port of meld, a header-only library:
#   vcpkg install meld --overlay-ports=<meld>/ports            (features: meld[mpi,blas])
# The port lives in meld's repository, so its source is this repository; a port in a registry
# would take a release with vcpkg_from_github instead. scripts/check-vcpkg.sh runs this file
# through plain CMake (scripts/vcpkg/emulate.cmake) where the vcpkg tool is not available.
set(VCPKG_BUILD_TYPE release)  # header-only: one configuration
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    mpi  MELD_ENABLE_MPI
    blas MELD_ENABLE_BLAS
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DMELD_BUILD_TESTS=OFF
    -DMELD_BUILD_EXAMPLES=OFF
    -DMELD_BUILD_BENCHMARKS=OFF
    -DMELD_INSTALL=ON
    -DMELD_BUILD_RUNTIME=OFF  # the port stays header-only (meld::runtime is a build option)
    ${FEATURE_OPTIONS}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/meld)  # to share/meld
vcpkg_fixup_pkgconfig()

# Nothing architecture-specific is left in lib/ (the CMake files moved to share/), unless the blas
# feature put meld.pc in lib/pkgconfig.
file(GLOB meld_lib_files "${CURRENT_PACKAGES_DIR}/lib/*")
if(NOT meld_lib_files)
  file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib")
endif()
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
