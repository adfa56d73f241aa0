# Host access to device memory is a compile error that names the backend: every variant of
# host_access_on_device.cpp must fail to compile for meld::sim<> with meld's message, and the
# whole file must compile for meld::cpu<> (so that the test fails if the file itself is broken).
# Arguments: -DCXX=<compiler> -DSOURCE=<file> -DFLAGS=<list of flags>
set(common ${FLAGS} -std=c++20 -fsyntax-only ${SOURCE})
execute_process(COMMAND ${CXX} ${common} -DMELD_ALL_VARIANTS "-DMELD_TEST_BACKEND=meld::cpu<>"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the host variants do not compile for meld::cpu<>:\n${out}")
endif()
foreach(variant RANGE 0 5)
  execute_process(COMMAND ${CXX} ${common} -DMELD_VARIANT=${variant}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    message(FATAL_ERROR "variant ${variant}: host access to a meld::sim<> tensor compiled")
  endif()
  if(NOT out MATCHES "the host cannot address this tensor's elements")
    message(FATAL_ERROR "variant ${variant} failed for another reason:\n${out}")
  endif()
  if(NOT out MATCHES "require_host_access[^\n]*meld::sim<")
    message(FATAL_ERROR "variant ${variant}: the error does not name the backend:\n${out}")
  endif()
  message(STATUS "variant ${variant}: refused, naming meld::sim")
endforeach()
