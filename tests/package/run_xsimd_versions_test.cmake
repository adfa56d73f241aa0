# meld accepts xsimd 8.1 and newer, and a parent's own xsimd target:
#  - a fake xsimd 14.0.0 config package (the installed xsimd's CMake files with the version file
#    saying 14.0.0, SameMajorVersion, as xsimd 14 declares) configures meld;
#  - a fake xsimd 8.0.0 is refused with a message naming the version;
#  - a parent project with its own `xsimd` target configures meld with find_package(xsimd)
#    disabled.
# Invoked by CTest with -DMELD_SOURCE=... -DWORK=... -DGENERATOR=... -DCXX=... -DXSIMD_DIR=...
include(${CMAKE_CURRENT_LIST_DIR}/package_test_helpers.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(GLOB xsimd_files ${XSIMD_DIR}/*.cmake)
if(NOT EXISTS ${XSIMD_DIR}/xsimdConfigVersion.cmake OR NOT EXISTS ${XSIMD_DIR}/xsimdTargets.cmake)
  message(FATAL_ERROR "no xsimd config package in '${XSIMD_DIR}'")
endif()
file(READ ${XSIMD_DIR}/xsimdConfigVersion.cmake version_file)
string(REGEX MATCH "set\\(PACKAGE_VERSION \"([0-9.]+)\"\\)" found "${version_file}")
set(real_version ${CMAKE_MATCH_1})
if(NOT real_version OR NOT version_file MATCHES "CVF_VERSION_MAJOR")
  message(FATAL_ERROR "${XSIMD_DIR}/xsimdConfigVersion.cmake is not a SameMajorVersion file")
endif()
# The fake packages keep xsimdTargets.cmake's include directory: it is computed from the file's
# own place, so the copy's targets file is rewritten to point at the real one's directory.
file(READ ${XSIMD_DIR}/xsimdTargets.cmake targets_file)
get_filename_component(real_prefix "${XSIMD_DIR}/../../../.." ABSOLUTE)
if(NOT EXISTS ${real_prefix}/include/xsimd/xsimd.hpp)
  get_filename_component(real_prefix "${XSIMD_DIR}/../../.." ABSOLUTE)
endif()
string(REPLACE "\${_IMPORT_PREFIX}/include" "${real_prefix}/include" targets_file "${targets_file}")

foreach(fake 14.0.0 8.0.0)
  set(dir ${WORK}/xsimd-${fake}/lib/cmake/xsimd)
  file(MAKE_DIRECTORY ${dir})
  file(COPY ${XSIMD_DIR}/xsimdConfig.cmake DESTINATION ${dir})
  file(WRITE ${dir}/xsimdTargets.cmake "${targets_file}")
  string(REPLACE "${real_version}" "${fake}" v "${version_file}")
  file(WRITE ${dir}/xsimdConfigVersion.cmake "${v}")
endforeach()

set(meld_args -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DMELD_BUILD_TESTS=OFF
    -DMELD_BUILD_EXAMPLES=OFF -DMELD_BUILD_BENCHMARKS=OFF)
# What SameMajorVersion makes of a request for 8.1 (the old find_package(xsimd 8.1)): refused.
expect_failure("compatible with requested version \"8.1\".*xsimdConfig.cmake, version: 14.0.0"
  ${CMAKE_COMMAND} -Dxsimd_DIR=${WORK}/xsimd-14.0.0/lib/cmake/xsimd -P ${CMAKE_CURRENT_LIST_DIR}/find_xsimd_8_1.cmake)
run_output(out ${CMAKE_COMMAND} -S ${MELD_SOURCE} -B ${WORK}/build-14 ${meld_args}
           -Dxsimd_DIR=${WORK}/xsimd-14.0.0/lib/cmake/xsimd)
file(STRINGS ${WORK}/build-14/CMakeCache.txt dir_entry REGEX "^xsimd_DIR:")
if(NOT dir_entry MATCHES "xsimd-14.0.0")
  message(FATAL_ERROR "meld did not configure with the fake xsimd 14: ${dir_entry}")
endif()
message(STATUS "meld configures with xsimd 14.0.0")
expect_failure("meld needs xsimd 8.1 or newer, found xsimd 8.0.0 in"
  ${CMAKE_COMMAND} -S ${MELD_SOURCE} -B ${WORK}/build-8.0 ${meld_args}
  -Dxsimd_DIR=${WORK}/xsimd-8.0.0/lib/cmake/xsimd)
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/xsimd_parent -B ${WORK}/build-parent
    -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DMELD_SOURCE=${MELD_SOURCE}
    -DXSIMD_INCLUDE_DIR=${real_prefix}/include -DCMAKE_DISABLE_FIND_PACKAGE_xsimd=ON)
