# Shared build settings for every twist target.
#
# Halide.h is a 1.2 MB header that nearly every translation unit includes, so it is compiled once as a
# precompiled header (on twist_pch) and every library and program reuses that PCH.
add_library(twist_pch STATIC ${CMAKE_CURRENT_LIST_DIR}/pch.cpp)
target_link_libraries(twist_pch PUBLIC Halide::Halide fmt::fmt)
target_include_directories(twist_pch PUBLIC ${PROJECT_SOURCE_DIR})
target_compile_options(twist_pch PUBLIC -Wall -Wextra -Wno-unused-parameter)
target_precompile_headers(twist_pch PUBLIC <Halide.h> <fmt/format.h> <string> <vector> <map> <memory>)

# twist_library(name sources... DEPS libs...): a static library of one layer, using the shared PCH.
function(twist_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_link_libraries(${name} PUBLIC twist_pch ${ARG_DEPS})
  target_precompile_headers(${name} REUSE_FROM twist_pch)
endfunction()

# twist_executable(name sources... DEPS libs...)
function(twist_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE twist_pch ${ARG_DEPS})
  target_precompile_headers(${name} REUSE_FROM twist_pch)
endfunction()
