# cmake -P script run by the test in examples/CMakeLists.txt: install twist, build the consumer against the
# installed package (nothing from the source or build tree on its include or link paths), and run it.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}): ${ARGN}")
  endif()
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD})
run("installing twist" ${CMAKE_COMMAND} --install ${TWIST_BUILD_DIR} --prefix ${PREFIX})
run("configuring the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${PREFIX})
run("building the consumer" ${CMAKE_COMMAND} --build ${CONSUMER_BUILD})
run("running the consumer" ${CONSUMER_BUILD}/consumer)
