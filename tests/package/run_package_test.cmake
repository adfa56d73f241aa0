# Installs meld into a fresh prefix, then configures, builds and runs the consumer project
# against it. Invoked by CTest with -DMELD_SOURCE=... -DWORK=... -DGENERATOR=...
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}" -B "${WORK}/meld-build" -G "${GENERATOR}"
    -DMELD_BUILD_TESTS=OFF -DMELD_BUILD_EXAMPLES=OFF -DMELD_BUILD_BENCHMARKS=OFF
    -DCMAKE_INSTALL_PREFIX=${WORK}/prefix)
run(${CMAKE_COMMAND} --install "${WORK}/meld-build")
run(${CMAKE_COMMAND} -S "${MELD_SOURCE}/tests/package/consumer" -B "${WORK}/consumer-build"
    -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK}/consumer-build")
run("${WORK}/consumer-build/consumer")
