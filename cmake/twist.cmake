# Shared build settings for every twist target.
#
# twist_base carries what every user of twist needs too (the include root, C++20, Halide and fmt) and is
# exported with the package. The warnings and the precompiled header are twist's own build settings: they
# are applied to twist's targets only, never passed on to a project that links them.
include(GNUInstallDirs)

add_library(twist_base INTERFACE)
target_link_libraries(twist_base INTERFACE Halide::Halide fmt::fmt)
target_include_directories(twist_base INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/twist>)
target_compile_features(twist_base INTERFACE cxx_std_20)
set_target_properties(twist_base PROPERTIES EXPORT_NAME base)
install(TARGETS twist_base EXPORT twistTargets)

# -fPIC on every twist target, libraries and programs alike: the libraries link into the Python extension
# module, and one shared precompiled header is only valid for translation units compiled with the same flag.
set(TWIST_COMPILE_FLAGS -fPIC -Wall -Wextra -Wno-unused-parameter)
if(TWIST_WERROR)
  list(APPEND TWIST_COMPILE_FLAGS -Werror)
endif()

# Halide.h is a 1.2 MB header that nearly every translation unit includes, so it is compiled once as a
# precompiled header (on twist_pch) and every twist library and program reuses that PCH.
if(TWIST_PRECOMPILED_HEADER)
  add_library(twist_pch STATIC ${CMAKE_CURRENT_LIST_DIR}/pch.cpp)
  target_link_libraries(twist_pch PRIVATE twist_base)
  target_compile_options(twist_pch PRIVATE ${TWIST_COMPILE_FLAGS})
  target_precompile_headers(twist_pch PRIVATE <Halide.h> <fmt/format.h> <string> <vector> <map> <memory>)
endif()

# twist's own compile settings on one of its targets.
function(twist_build_settings target)
  target_compile_options(${target} PRIVATE ${TWIST_COMPILE_FLAGS})
  if(TWIST_PRECOMPILED_HEADER)
    target_precompile_headers(${target} REUSE_FROM twist_pch)
  endif()
endfunction()

# twist_library(twist_<component> SOURCES files... DEPS libs...): a static library of one layer, installed
# and exported as twist::<component> (twist_cuda_program is twist::cuda_program).
function(twist_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  string(REGEX REPLACE "^twist_" "" ARG_EXPORT_NAME ${name})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(twist::${ARG_EXPORT_NAME} ALIAS ${name})
  target_link_libraries(${name} PUBLIC twist_base ${ARG_DEPS})
  twist_build_settings(${name})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${ARG_EXPORT_NAME})
  install(TARGETS ${name} EXPORT twistTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set_property(GLOBAL APPEND PROPERTY TWIST_COMPONENTS ${ARG_EXPORT_NAME})
endfunction()

# twist_executable(name SOURCES files... DEPS libs...)
function(twist_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE twist_base ${ARG_DEPS})
  twist_build_settings(${name})
endfunction()
