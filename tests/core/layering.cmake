# Fails naming every include that climbs meld's layers (docs/backends.md): the host runtime
# (runtime/) includes nothing above core/; the code above the backends (nn/, autograd/,
# distributed/) and the simulated device reach the CPU backend only through the contract and
# backend/host.hpp, never a file of backend/cpu/. Run by CTest (layering):
#   cmake -DINCLUDE_DIR=<repo>/include -P layering.cmake
cmake_minimum_required(VERSION 3.20)
# folder | what its includes must not name (a regular expression on the included path)
set(rules
    "runtime|(^|/)(backend|tensor|expr|nn|autograd|distributed|io)/|^\\.\\./(backend|tensor|expr|nn|autograd|distributed|io)"
    "nn|backend/cpu/"
    "autograd|backend/cpu/"
    "distributed|backend/cpu/"
    "backend/sim|(^|/)cpu/")
set(violations)
set(checked 0)
foreach(rule ${rules})
  string(REPLACE "|" ";" parts "${rule}")
  list(POP_FRONT parts folder)
  list(JOIN parts "|" forbidden)
  file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR}/meld ${INCLUDE_DIR}/meld/${folder}/*.hpp)
  foreach(h ${headers})
    math(EXPR checked "${checked} + 1")
    file(STRINGS ${INCLUDE_DIR}/meld/${h} lines REGEX "^#include \"")
    foreach(line ${lines})
      string(REGEX REPLACE "^#include \"([^\"]*)\".*" "\\1" path "${line}")
      if(path MATCHES "${forbidden}")
        list(APPEND violations "${h} includes ${path}")
      endif()
    endforeach()
  endforeach()
endforeach()
# No two headers include each other: a part of a larger header is included by it, one way. (A
# name-inl.hpp, the compiled runtime's definitions, includes name.hpp for the library's source
# file, as name.hpp includes it in a header-only build.)
file(GLOB_RECURSE all_headers ${INCLUDE_DIR}/meld/*.hpp)
foreach(h ${all_headers})
  get_filename_component(dir ${h} DIRECTORY)
  file(STRINGS ${h} lines REGEX "^#include \"")
  set(includes_of_${h})
  foreach(line ${lines})
    string(REGEX REPLACE "^#include \"([^\"]*)\".*" "\\1" path "${line}")
    get_filename_component(target ${path} ABSOLUTE BASE_DIR ${dir})
    list(APPEND includes_of_${h} ${target})
  endforeach()
endforeach()
foreach(h ${all_headers})
  foreach(target ${includes_of_${h}})
    string(REGEX REPLACE "-inl\\.hpp$" ".hpp" h_declared ${h})
    string(REGEX REPLACE "-inl\\.hpp$" ".hpp" target_declared ${target})
    if(NOT h_declared STREQUAL target_declared AND h IN_LIST includes_of_${target}
       AND h STRLESS target)
      file(RELATIVE_PATH a ${INCLUDE_DIR}/meld ${h})
      file(RELATIVE_PATH b ${INCLUDE_DIR}/meld ${target})
      list(APPEND violations "${a} and ${b} include each other")
    endif()
  endforeach()
endforeach()
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "includes that climb meld's layers or go in a circle:\n  ${text}")
endif()
message(STATUS "${checked} headers checked: no include climbs a layer, no two headers include each other")
