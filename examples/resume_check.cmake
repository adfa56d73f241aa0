# --resume continues a run exactly: 2 epochs in one run and 1 epoch, then --resume for the second,
# must end with the same checkpoint (parameters, optimizer state, progress: byte for byte) and the
# same last line. (With sgd the cosine schedule spans --epochs, so the two runs differ by design:
# the test trains with adam, whose rate is constant.)
# Arguments: -DTRAIN=<binary> -DWORK=<folder> -DARGS=<list of the common flags>
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(train out)
  execute_process(COMMAND ${TRAIN} ${ARGS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout
                  ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TRAIN} ${ARGS} ${ARGN} failed (${rc}):\n${stdout}\n${stderr}")
  endif()
  string(REGEX MATCH "test_accuracy=[0-9.]+" last "${stdout}")
  set(${out} "${last}" PARENT_SCOPE)
endfunction()
train(straight --epochs 2 --save ${WORK}/straight.ckpt)
train(first --epochs 1 --save=${WORK}/first.ckpt)
train(resumed --epochs 2 --resume ${WORK}/first.ckpt --save ${WORK}/resumed.ckpt)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/straight.ckpt
                        ${WORK}/resumed.ckpt RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "the resumed run's checkpoint differs from the uninterrupted run's")
endif()
if(NOT straight STREQUAL resumed)
  message(FATAL_ERROR "last lines differ: '${straight}' vs '${resumed}'")
endif()
message(STATUS "resumed run equals the uninterrupted one (${resumed}), checkpoints identical")
