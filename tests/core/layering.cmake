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
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "includes that climb meld's layers:\n  ${text}")
endif()
message(STATUS "${checked} headers checked: no include climbs a layer")
