# Installs meld into a fresh prefix, then uses it as a user would:
#  1. the consumer project through find_package(meld 0.1 CONFIG REQUIRED COMPONENTS ...) (runtime,
#     and mpi where this build enables MPI), built and run, header-only and on meld::runtime
#     (compiled for x86-64-v2 on x86-64); its compile lines carry -march=native where it linked
#     meld::native only (consumer_native, configured and not built), and -Werror nowhere; the
#     installed runtime library is portable (built for MELD_ARCH's default, x86-64-v2, which
#     meldConfig.cmake records: no AVX or AVX-512 register in it);
#  2. a component this installation lacks (cuda) and an unknown one must fail REQUIRED with a
#     message naming them;
#  3. the consumer compiled without CMake, with `pkg-config --cflags --libs meld`, and run;
#  4. an install right after configuring, with no build (a header-only library's install): the
#     header-only consumer builds and runs from it, and asking for the runtime component fails
#     with a message saying to build first.
# Invoked by CTest with -DMELD_SOURCE=... -DWORK=... -DGENERATOR=... -DCXX=... -DMPI=ON|OFF
# -DPKG_CONFIG=... -DOBJDUMP=...
include(${CMAKE_CURRENT_LIST_DIR}/package_test_helpers.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}" -B "${WORK}/meld-build" -G "${GENERATOR}"
    -DCMAKE_CXX_COMPILER=${CXX} -DMELD_BUILD_TESTS=OFF -DMELD_BUILD_EXAMPLES=OFF
    -DMELD_BUILD_BENCHMARKS=OFF -DMELD_ENABLE_MPI=${MPI} -DCMAKE_INSTALL_PREFIX=${prefix})
run(${CMAKE_COMMAND} --build "${WORK}/meld-build")  # the runtime library
run(${CMAKE_COMMAND} --install "${WORK}/meld-build")
foreach(f include/meld/meld.hpp include/meld/version.hpp share/doc/meld/LICENSE lib/libmeld_runtime.a
          lib/cmake/meld/meldConfig.cmake share/pkgconfig/meld.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()

# 1. find_package with the components this build has.
set(components runtime)
if(MPI)
  set(components runtime,mpi)
endif()
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/consumer" -B "${WORK}/consumer-build"
    -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release "-DMELD_COMPONENTS=${components}" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
run(${CMAKE_COMMAND} --build "${WORK}/consumer-build")
run("${WORK}/consumer-build/consumer")
run("${WORK}/consumer-build/consumer_runtime")
if(MPI)
  run("${WORK}/consumer-build/consumer_mpi")
endif()
# The compile lines: meld adds no -march (but through meld::native) and no -Werror.
file(READ "${WORK}/consumer-build/compile_commands.json" commands)
string(JSON count LENGTH "${commands}")
math(EXPR last "${count} - 1")
set(checked "")
foreach(i RANGE ${last})
  string(JSON command GET "${commands}" ${i} command)
  string(REGEX MATCH "CMakeFiles/([A-Za-z0-9_]+)\\.dir/" unused "${command}")
  set(program ${CMAKE_MATCH_1})
  list(APPEND checked ${program})
  if(program STREQUAL "consumer_runtime")
    set(runtime_command "${command}")
  endif()
  if(command MATCHES "-Werror")
    message(FATAL_ERROR "meld put -Werror on ${program}'s compile line: ${command}")
  endif()
  if(program STREQUAL "consumer_native" AND NOT command MATCHES "-march=native")
    message(FATAL_ERROR "meld::native did not add -march=native: ${command}")
  elseif(NOT program STREQUAL "consumer_native" AND command MATCHES "-march=native")
    message(FATAL_ERROR "${program} has -march=native without meld::native: ${command}")
  endif()
endforeach()
foreach(program consumer consumer_native consumer_runtime)
  list(FIND checked ${program} at)
  if(at EQUAL -1)
    message(FATAL_ERROR "no compile line of ${program} in compile_commands.json (${checked})")
  endif()
endforeach()
# The installed runtime library: built for x86-64-v2, which its package records, and without an
# AVX (ymm) or AVX-512 (zmm) register: it runs on any x86-64 CPU since about 2011.
file(STRINGS ${prefix}/lib/cmake/meld/meldConfig.cmake recorded REGEX "set\\(meld_RUNTIME_ARCH ")
run_output(machine ${CXX} -dumpmachine)
if(machine MATCHES "^x86_64")
  if(NOT recorded MATCHES "\"x86-64-v2\"")
    message(FATAL_ERROR "meldConfig.cmake should record x86-64-v2 for the runtime: ${recorded}")
  endif()
  if(NOT runtime_command MATCHES "-march=x86-64-v2")
    message(FATAL_ERROR "consumer_runtime should be compiled for x86-64-v2: ${runtime_command}")
  endif()
  run_output(disassembly ${OBJDUMP} -d ${prefix}/lib/libmeld_runtime.a)
  string(REGEX MATCHALL "%[yz]mm[0-9]+" wide "${disassembly}")
  if(wide)
    list(REMOVE_DUPLICATES wide)
    message(FATAL_ERROR "the installed libmeld_runtime.a uses AVX or AVX-512 registers: ${wide}")
  endif()
endif()

# 2. Components that are not there.
if(NOT MPI)
  expect_failure("mpi \\(this meld was built without it: configure meld with -DMELD_ENABLE_MPI=ON\\)"
    ${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/consumer" -B "${WORK}/missing-build"
    -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${prefix} "-DMELD_COMPONENTS=mpi")
endif()
expect_failure("cuda \\(this meld was built without it: configure meld with -DMELD_ENABLE_CUDA=ON\\).*nosuch \\(no such component"
  ${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/consumer" -B "${WORK}/missing-build"
  -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${prefix} "-DMELD_COMPONENTS=${components},cuda,nosuch")

# 3. pkg-config, for builds without CMake.
set(ENV{PKG_CONFIG_PATH} ${prefix}/share/pkgconfig)
run_output(cflags ${PKG_CONFIG} --cflags meld)
run_output(libs ${PKG_CONFIG} --libs meld)
run_output(version ${PKG_CONFIG} --modversion meld)
file(STRINGS ${MELD_SOURCE}/include/meld/version.hpp lines REGEX "^#define MELD_VERSION_[A-Z]+ [0-9]+$")
string(REGEX REPLACE "[^;]*MELD_VERSION_[A-Z]+ ([0-9]+)" "\\1" header_version "${lines}")
string(REPLACE ";" "." header_version "${header_version}")
if(NOT version STREQUAL header_version)
  message(FATAL_ERROR "meld.pc says version ${version}, version.hpp says ${header_version}")
endif()
if(NOT cflags MATCHES "-I${prefix}/share/pkgconfig/../../include")
  message(FATAL_ERROR "pkg-config --cflags meld does not point into the prefix: ${cflags}")
endif()
separate_arguments(cflags UNIX_COMMAND "${cflags}")
separate_arguments(libs UNIX_COMMAND "${libs}")
run(${CXX} -std=c++20 -O1 ${cflags} ${MELD_SOURCE}/tests/package/consumer/main.cpp
    -o ${WORK}/pkgconfig-consumer ${libs})
run(${WORK}/pkgconfig-consumer)

# 4. Installing needs no build.
set(bare ${WORK}/bare-prefix)
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}" -B "${WORK}/bare-build" -G "${GENERATOR}"
    -DCMAKE_CXX_COMPILER=${CXX} -DMELD_BUILD_TESTS=OFF -DMELD_BUILD_EXAMPLES=OFF
    -DMELD_BUILD_BENCHMARKS=OFF -DMELD_ENABLE_MPI=OFF -DCMAKE_INSTALL_PREFIX=${bare})
run(${CMAKE_COMMAND} --install "${WORK}/bare-build")
if(EXISTS ${bare}/lib/libmeld_runtime.a OR NOT EXISTS ${bare}/include/meld/meld.hpp)
  message(FATAL_ERROR "the build-less install should hold the headers and no runtime library")
endif()
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/consumer" -B "${WORK}/bare-consumer"
    -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${bare}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK}/bare-consumer")
run("${WORK}/bare-consumer/consumer")
expect_failure("runtime \\(lib/libmeld_runtime.a is not installed: build meld \\(cmake --build\\) before installing it\\)"
  ${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/consumer" -B "${WORK}/bare-missing"
  -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${bare} "-DMELD_COMPONENTS=runtime")
