# Packaging tests (label package), included by tests/CMakeLists.txt. Each is a separate project or
# script run against the source tree, so none needs a target of this build. The ones that run an
# outside tool (Conan, vcpkg's schema, Doxygen) also have the label tooling (the release
# configuration runs them; the clang one leaves them out) and report skipped (77) when the tool
# cannot be had.
set(meld_package_args -DMELD_SOURCE=${PROJECT_SOURCE_DIR} -DGENERATOR=${CMAKE_GENERATOR}
    -DCXX=${CMAKE_CXX_COMPILER})

# An install into a fresh prefix, used through find_package (with COMPONENTS) and pkg-config.
find_program(MELD_PKG_CONFIG NAMES pkg-config pkgconf)
mark_as_advanced(MELD_PKG_CONFIG)
set(meld_mpi_flag OFF)
if(MELD_ENABLE_MPI)
  set(meld_mpi_flag ON)
endif()
add_test(NAME test_package
  COMMAND ${CMAKE_COMMAND} ${meld_package_args} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/package
          -DMPI=${meld_mpi_flag} -DPKG_CONFIG=${MELD_PKG_CONFIG} -DOBJDUMP=${CMAKE_OBJDUMP}
          -P ${CMAKE_CURRENT_LIST_DIR}/run_package_test.cmake)
set_tests_properties(test_package PROPERTIES LABELS package TIMEOUT 300
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

# meld as a FetchContent subproject: no install, SYSTEM headers, only MELD_* cache entries.
add_test(NAME test_package_fetchcontent
  COMMAND ${CMAKE_COMMAND} ${meld_package_args} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/fetchcontent
          -P ${CMAKE_CURRENT_LIST_DIR}/run_fetchcontent_test.cmake)
set_tests_properties(test_package_fetchcontent PROPERTIES LABELS package TIMEOUT 300)

# xsimd 8.1 and newer (a fake xsimd 14 config package), a too old one, a parent's xsimd target.
add_test(NAME test_package_xsimd_versions
  COMMAND ${CMAKE_COMMAND} ${meld_package_args} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/xsimd_versions
          -DXSIMD_DIR=${xsimd_DIR} -P ${CMAKE_CURRENT_LIST_DIR}/run_xsimd_versions_test.cmake)
set_tests_properties(test_package_xsimd_versions PROPERTIES LABELS package TIMEOUT 120)
if(NOT xsimd_DIR)  # xsimd came from elsewhere than a config package: nothing to copy
  set_tests_properties(test_package_xsimd_versions PROPERTIES DISABLED TRUE)
endif()

# The Conan recipe, offline (scripts/check-conan.sh: Conan from PyPI, the system's xsimd).
find_program(MELD_BASH bash)
mark_as_advanced(MELD_BASH)
set(meld_tools_env MELD_TOOLS_VENV=${PROJECT_BINARY_DIR}/tools-venv)
add_test(NAME test_package_conan
  COMMAND ${CMAKE_COMMAND} -E env ${meld_tools_env} MELD_CHECK_DIR=${CMAKE_CURRENT_BINARY_DIR}/check-conan
          ${MELD_BASH} ${PROJECT_SOURCE_DIR}/scripts/check-conan.sh)
# The scripts share one virtual environment for their Python tools: one at a time.
set_tests_properties(test_package_conan PROPERTIES LABELS "package;tooling" TIMEOUT 600
                     SKIP_RETURN_CODE 77 RESOURCE_LOCK meld_tools_venv)

# The vcpkg port and manifest: schema, the portfile through plain CMake, a consumer
# (scripts/check-vcpkg.sh: jsonschema from PyPI).
add_test(NAME test_package_vcpkg
  COMMAND ${CMAKE_COMMAND} -E env ${meld_tools_env} MELD_CHECK_DIR=${CMAKE_CURRENT_BINARY_DIR}/check-vcpkg
          CXX=${CMAKE_CXX_COMPILER} ${MELD_BASH} ${PROJECT_SOURCE_DIR}/scripts/check-vcpkg.sh)
set_tests_properties(test_package_vcpkg PROPERTIES LABELS "package;tooling" TIMEOUT 600
                     SKIP_RETURN_CODE 77 RESOURCE_LOCK meld_tools_venv)

# One version everywhere: version.hpp, project(), CHANGELOG.md, conanfile.py, the vcpkg manifests.
add_test(NAME test_package_version
  COMMAND ${CMAKE_COMMAND} -DMELD_SOURCE=${PROJECT_SOURCE_DIR} -DPROJECT_VERSION=${PROJECT_VERSION}
          -P ${CMAKE_CURRENT_LIST_DIR}/run_version_test.cmake)
set_tests_properties(test_package_version PROPERTIES LABELS package TIMEOUT 30)

# The API reference (scripts/docs.sh: Doxygen, no warnings, undocumented entities included).
add_test(NAME test_docs
  COMMAND ${CMAKE_COMMAND} -E env MELD_DOCS_OUT=${CMAKE_CURRENT_BINARY_DIR}/docs
          ${MELD_BASH} ${PROJECT_SOURCE_DIR}/scripts/docs.sh)
set_tests_properties(test_docs PROPERTIES LABELS "package;tooling" TIMEOUT 300 SKIP_RETURN_CODE 77)
