# The installed package: find_package(twist) gives twist::twist (every layer) and one target per layer
# (twist::lang, twist::algebra, twist::scheduler, twist::reference, twist::interpreter, twist::cuda_codegen,
# twist::cuda_runtime, twist::cuda_program, twist::apps_gemm, twist::apps_attention, twist::apps_norms). Headers
# install under include/twist with the repository's layout, so that `#include "lang/twist.h"` works as it does
# in the tree.
include(CMakePackageConfigHelpers)

get_property(twist_components GLOBAL PROPERTY TWIST_COMPONENTS)
add_library(twist_all INTERFACE)
foreach(component IN LISTS twist_components)
  target_link_libraries(twist_all INTERFACE twist::${component})
endforeach()
set_target_properties(twist_all PROPERTIES EXPORT_NAME twist)
add_library(twist::twist ALIAS twist_all)
install(TARGETS twist_all EXPORT twistTargets)

install(DIRECTORY lang algebra scheduler backends apps DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/twist
        FILES_MATCHING PATTERN "*.h")

set(TWIST_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/twist)
install(EXPORT twistTargets NAMESPACE twist:: DESTINATION ${TWIST_CONFIG_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/twistConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/twistConfig.cmake INSTALL_DESTINATION ${TWIST_CONFIG_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/twistConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/twistConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/twistConfigVersion.cmake
        DESTINATION ${TWIST_CONFIG_DIR})
