# The FetchContent consumer (tests/package/fetchcontent), with meld's compiled runtime on
# (MELD_BUILD_RUNTIME): configures, builds and runs it, then
#  - checks that the runtime library would compile without -Werror or -march=native (meld's own
#    build settings), for MELD_ARCH's portable default on x86-64 (its compile line, not built);
#  - checks that `cmake --install` of the parent installs only the parent's program (MELD_INSTALL
#    is off in a subproject), and that meld added no cache entries but MELD_* ones;
#  - checks that the parent's warning flags do fire in meld's headers when they are included as
#    ordinary (-I) headers, so that the clean -Werror build above is due to SYSTEM.
# Invoked by CTest with -DMELD_SOURCE=... -DWORK=... -DGENERATOR=... -DCXX=...
include(${CMAKE_CURRENT_LIST_DIR}/package_test_helpers.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(build ${WORK}/build)
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/fetchcontent" -B "${build}" -G "${GENERATOR}"
    -DCMAKE_CXX_COMPILER=${CXX} -DMELD_SOURCE=${MELD_SOURCE} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_INSTALL_PREFIX=${WORK}/prefix -DMELD_BUILD_RUNTIME=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
run(${CMAKE_COMMAND} --build "${build}" --target consumer)
run("${build}/consumer")

file(READ "${build}/compile_commands.json" commands)
string(JSON count LENGTH "${commands}")
math(EXPR last "${count} - 1")
set(runtime "")
foreach(i RANGE ${last})
  string(JSON file GET "${commands}" ${i} file)
  if(file MATCHES "src/runtime\\.cpp$")
    string(JSON runtime GET "${commands}" ${i} command)
  endif()
endforeach()
if(NOT runtime)
  message(FATAL_ERROR "no compile line of meld's src/runtime.cpp in ${build}/compile_commands.json")
endif()
if(runtime MATCHES "-Werror|-march=native")
  message(FATAL_ERROR "meld's runtime compiles with meld's own build flags in a consumer's build: ${runtime}")
endif()
execute_process(COMMAND ${CXX} -dumpmachine OUTPUT_VARIABLE machine)
if(machine MATCHES "^x86_64" AND NOT runtime MATCHES "-march=x86-64")
  message(FATAL_ERROR "meld's runtime should compile for a portable x86-64 baseline: ${runtime}")
endif()
run(${CMAKE_COMMAND} --install "${build}")

file(GLOB_RECURSE installed RELATIVE ${WORK}/prefix ${WORK}/prefix/*)
if(NOT installed STREQUAL "bin/consumer")
  message(FATAL_ERROR "the parent's install should hold bin/consumer only, it holds: ${installed}")
endif()

# The cache entries meld added: MELD_* options, and what xsimd's and MPI's searches leave.
file(STRINGS ${build}/CMakeCache.txt cache REGEX "^[A-Za-z_][A-Za-z0-9_]*:")
set(foreign "")
foreach(line ${cache})
  string(REGEX MATCH "^[^:]+" name "${line}")
  if(name MATCHES "^(MELD_|meld_|FETCHCONTENT_|CMAKE_|FIND_PACKAGE_MESSAGE_DETAILS_|xsimd_|xtl_|_)" OR name MATCHES "_DIR$")
    continue()
  endif()
  list(APPEND foreign ${name})
endforeach()
if(foreign)
  message(FATAL_ERROR "meld added cache entries that are not MELD_*: ${foreign}")
endif()

# Without SYSTEM the same flags warn inside meld's headers (else the check above proves nothing).
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${MELD_SOURCE}/include -Wall -Wextra
                        -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
                        ${MELD_SOURCE}/tests/package/consumer/main.cpp
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT err MATCHES "include/meld/[^:]+:[0-9]+:[0-9]+: warning")
  message(FATAL_ERROR "expected warnings from meld's headers included with -I; got (${rc}):\n${err}")
endif()
message(STATUS "meld's headers warn under the parent's flags with -I, not as SYSTEM headers")
