# Runs a vcpkg portfile through plain CMake, for machines without the vcpkg tool: defines the
# vcpkg helpers that meld's portfile calls, doing what vcpkg's do with the same arguments (the
# configure options vcpkg adds, the install, moving the CMake package to share/<port> and fixing
# its relative paths, the copyright file), then includes the portfile.
#   cmake -DPORT_DIR=ports/meld -DPACKAGES_DIR=<prefix> -DBUILDTREES_DIR=<dir> \
#         [-DFEATURES=core;mpi;blas] [-DGENERATOR=Ninja] [-DCXX=c++] -P scripts/vcpkg/emulate.cmake
# Only the helpers meld's portfile uses are here; an unknown one stops with an error.
cmake_minimum_required(VERSION 3.20)
foreach(var PORT_DIR PACKAGES_DIR BUILDTREES_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "emulate.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT GENERATOR)
  set(GENERATOR Ninja)
endif()
get_filename_component(PORT_DIR "${PORT_DIR}" ABSOLUTE)
get_filename_component(PORT "${PORT_DIR}" NAME)
file(READ "${PORT_DIR}/vcpkg.json" manifest)
string(JSON VERSION GET "${manifest}" version)
if(NOT FEATURES)
  set(FEATURES core)
endif()
foreach(feature IN LISTS FEATURES)
  if(NOT feature STREQUAL "core")
    string(JSON description ERROR_VARIABLE err GET "${manifest}" features ${feature} description)
    if(err)
      message(FATAL_ERROR "emulate.cmake: ${PORT} has no feature '${feature}'")
    endif()
  endif()
endforeach()
set(TARGET_TRIPLET x64-linux)
set(CURRENT_PACKAGES_DIR "${PACKAGES_DIR}")
set(CURRENT_BUILDTREES_DIR "${BUILDTREES_DIR}")
set(VCPKG_TARGET_IS_LINUX ON)
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}")

function(emulate_run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
endfunction()

# vcpkg_check_features(OUT_FEATURE_OPTIONS <var> FEATURES <feature> <option>...)
function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS" "FEATURES;INVERTED_FEATURES")
  set(options "")
  list(LENGTH arg_FEATURES n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET arg_FEATURES ${i} feature)
    list(GET arg_FEATURES ${j} option)
    if(feature IN_LIST FEATURES)
      list(APPEND options "-D${option}=ON")
    else()
      list(APPEND options "-D${option}=OFF")
    endif()
  endforeach()
  set(${arg_OUT_FEATURE_OPTIONS} "${options}" PARENT_SCOPE)
endfunction()

# vcpkg_cmake_configure(SOURCE_PATH <dir> OPTIONS ... OPTIONS_RELEASE ...): vcpkg configures a
# release tree (only, with VCPKG_BUILD_TYPE release) with Ninja, installing into the package dir.
function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG")
  if(NOT VCPKG_BUILD_TYPE STREQUAL "release")
    message(FATAL_ERROR "emulate.cmake: only VCPKG_BUILD_TYPE release is emulated")
  endif()
  set(cxx "")
  if(CXX)
    set(cxx -DCMAKE_CXX_COMPILER=${CXX})
  endif()
  emulate_run(${CMAKE_COMMAND} -S "${arg_SOURCE_PATH}" -B "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel"
    -G "${GENERATOR}" ${cxx} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}"
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_INSTALL_LIBDIR:STRING=lib -DCMAKE_INSTALL_BINDIR:STRING=bin
    -DCMAKE_EXPORT_NO_PACKAGE_REGISTRY=ON -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DVCPKG_TARGET_TRIPLET=${TARGET_TRIPLET}
    ${arg_OPTIONS} ${arg_OPTIONS_RELEASE})
endfunction()

# vcpkg_cmake_install(): builds the install target of the release tree.
function(vcpkg_cmake_install)
  emulate_run(${CMAKE_COMMAND} --build "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel" --target install)
endfunction()

# vcpkg_cmake_config_fixup(CONFIG_PATH <dir> [PACKAGE_NAME <name>]): moves the CMake package to
# share/<name> and makes the paths it computes from its own place right for the new place.
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "CONFIG_PATH;PACKAGE_NAME" "")
  if(NOT arg_PACKAGE_NAME)
    set(arg_PACKAGE_NAME ${PORT})
  endif()
  set(from "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}")
  set(to "${CURRENT_PACKAGES_DIR}/share/${arg_PACKAGE_NAME}")
  if(NOT EXISTS "${from}")
    message(FATAL_ERROR "vcpkg_cmake_config_fixup: '${arg_CONFIG_PATH}' does not exist")
  endif()
  file(GLOB files "${from}/*")
  file(MAKE_DIRECTORY "${to}")
  file(COPY ${files} DESTINATION "${to}")
  file(REMOVE_RECURSE "${from}")
  # Remove the folders left empty (lib/cmake, and lib when nothing else is there).
  get_filename_component(parent "${from}" DIRECTORY)
  while(NOT parent STREQUAL CURRENT_PACKAGES_DIR)
    file(GLOB left "${parent}/*")
    if(left)
      break()
    endif()
    file(REMOVE_RECURSE "${parent}")
    get_filename_component(parent "${parent}" DIRECTORY)
  endwhile()
  file(GLOB cmake_files "${to}/*.cmake")
  foreach(f ${cmake_files})
    file(READ "${f}" text)
    # Exported targets: one get_filename_component(... PATH) for the file, then one per level.
    string(REGEX REPLACE
      "get_filename_component\\(_IMPORT_PREFIX \"\\\${CMAKE_CURRENT_LIST_FILE}\" PATH\\)(\nget_filename_component\\(_IMPORT_PREFIX \"\\\${_IMPORT_PREFIX}\" PATH\\))*"
      "get_filename_component(_IMPORT_PREFIX \"\${CMAKE_CURRENT_LIST_FILE}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)"
      text "${text}")
    # configure_package_config_file's prefix.
    string(REGEX REPLACE "get_filename_component\\(PACKAGE_PREFIX_DIR \"\\\${CMAKE_CURRENT_LIST_DIR}/[./]*\" ABSOLUTE\\)"
      "get_filename_component(PACKAGE_PREFIX_DIR \"\${CMAKE_CURRENT_LIST_DIR}/../../\" ABSOLUTE)"
      text "${text}")
    file(WRITE "${f}" "${text}")
  endforeach()
endfunction()

# vcpkg_fixup_pkgconfig(): the .pc files must find their prefix from their own place.
function(vcpkg_fixup_pkgconfig)
  file(GLOB pcs "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/*.pc" "${CURRENT_PACKAGES_DIR}/share/pkgconfig/*.pc")
  if(NOT pcs)
    message(FATAL_ERROR "vcpkg_fixup_pkgconfig: no .pc file in lib/pkgconfig or share/pkgconfig")
  endif()
  foreach(pc ${pcs})
    file(STRINGS "${pc}" prefix REGEX "^prefix=")
    if(NOT prefix STREQUAL "prefix=\${pcfiledir}/../..")
      message(FATAL_ERROR "vcpkg_fixup_pkgconfig: ${pc}: '${prefix}' is not relocatable")
    endif()
  endforeach()
endfunction()

# vcpkg_install_copyright(FILE_LIST <file>...): share/<port>/copyright.
function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  set(text "")
  foreach(f ${arg_FILE_LIST})
    file(READ "${f}" t)
    string(APPEND text "${t}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()

message(STATUS "emulate.cmake: ${PORT} ${VERSION} [${FEATURES}] into ${CURRENT_PACKAGES_DIR}")
include("${PORT_DIR}/portfile.cmake")
