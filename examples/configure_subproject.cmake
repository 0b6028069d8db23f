# cmake -P script run by a test in examples/CMakeLists.txt: configures examples/consumer with twist added by
# add_subdirectory, with doctest hidden from find_package, and checks in the compile commands that none of
# twist's tests is built, that the consumer gets neither twist's precompiled header nor its warning flags and
# keeps its own C++ dialect (GNU extensions, CMake's default), while twist's own libraries use the header.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}): ${ARGN}")
  endif()
endfunction()

file(REMOVE_RECURSE ${CONSUMER_BUILD})
run("configuring the consumer with twist as a subproject" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE}
    -B ${CONSUMER_BUILD} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DTWIST_SOURCE_DIR=${TWIST_SOURCE_DIR}
    -DTWIST_BUILD_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_doctest=ON
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)

file(READ ${CONSUMER_BUILD}/compile_commands.json commands)
string(JSON count LENGTH ${commands})
math(EXPR last "${count} - 1")
set(consumer_command "")
set(twist_lang_command "")
foreach(i RANGE ${last})
  string(JSON file GET ${commands} ${i} file)
  string(JSON command GET ${commands} ${i} command)
  if(file MATCHES "/tests/|/tutorials/")
    message(FATAL_ERROR "twist's tests are built although twist is a subproject: ${file}")
  elseif(file MATCHES "examples/consumer/main.cpp$")
    set(consumer_command ${command})
  elseif(file MATCHES "/lang/expr.cpp$")
    set(twist_lang_command ${command})
  endif()
endforeach()
if(NOT consumer_command OR NOT twist_lang_command)
  message(FATAL_ERROR "the compile commands hold no entry for the consumer's main.cpp or twist's lang/expr.cpp")
endif()
foreach(forbidden cmake_pch -Wall -Wextra)
  if(consumer_command MATCHES "${forbidden}")
    message(FATAL_ERROR "the consumer's compile command has twist's '${forbidden}': ${consumer_command}")
  endif()
endforeach()
if(NOT consumer_command MATCHES "-std=gnu\\+\\+20")
  message(FATAL_ERROR "the consumer should keep its GNU dialect with twist's C++20: ${consumer_command}")
endif()
if(NOT twist_lang_command MATCHES "cmake_pch")
  message(FATAL_ERROR "twist's own libraries should use the precompiled header: ${twist_lang_command}")
endif()
message(STATUS "add_subdirectory: no doctest needed, no tests built, no PCH or warning flags passed on, dialect kept")
