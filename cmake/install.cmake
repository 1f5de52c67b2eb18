# Install rules and package files for libmoegemm (included from the root CMakeLists.txt when
# MOEGEMM_INSTALL is ON).
#
#   <prefix>/lib/libmoegemm.so -> libmoegemm.so.0 -> libmoegemm.so.0.2.0
#   <prefix>/include/moegemm/{moegemm.h,version.h}
#   <prefix>/lib/cmake/moegemm/{moegemmConfig,moegemmConfigVersion,moegemmTargets*}.cmake
#   <prefix>/lib/pkgconfig/moegemm.pc
#
# ("lib" stands for CMAKE_INSTALL_LIBDIR.) Only the shared library is installed: the
# moegemm_objects and moegemm_internal targets exist for the build and the tests.
include(CMakePackageConfigHelpers)

set(MOEGEMM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/moegemm"
  CACHE STRING "Where moegemmConfig.cmake is installed, relative to the prefix")
set(MOEGEMM_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
  CACHE STRING "Where moegemm.pc is installed, relative to the prefix")

# libmoegemm.so needs libcublasLt.so.<major> at run time. Record the toolkit's library
# directory as the installed library's RUNPATH so that it loads (and links into consumers)
# where the toolkit is not on the loader's path. RUNPATH yields to LD_LIBRARY_PATH; package
# builders (distributions, conda, wheels) turn this OFF and rely on their own layout.
option(MOEGEMM_INSTALL_CUDA_RPATH
  "Give the installed libmoegemm.so a RUNPATH to the CUDA toolkit's library directory" ON)
if(MOEGEMM_INSTALL_CUDA_RPATH)
  set_target_properties(moegemm PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

get_target_property(MOEGEMM_LIBRARY_TYPE moegemm TYPE)

install(TARGETS moegemm
  EXPORT moegemmTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    COMPONENT moegemm_runtime
    NAMELINK_COMPONENT moegemm_development
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT moegemm_development
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT moegemm_runtime)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/moegemm"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  COMPONENT moegemm_development
  FILES_MATCHING PATTERN "*.h")

install(EXPORT moegemmTargets
  NAMESPACE moegemm::
  DESTINATION "${MOEGEMM_INSTALL_CMAKEDIR}"
  COMPONENT moegemm_development)

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/moegemmConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/moegemmConfig.cmake"
  INSTALL_DESTINATION "${MOEGEMM_INSTALL_CMAKEDIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)

# Same major version = same ABI (see moegemm.h, "Versioning").
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/moegemmConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)

install(FILES
    "${PROJECT_BINARY_DIR}/cmake/moegemmConfig.cmake"
    "${PROJECT_BINARY_DIR}/cmake/moegemmConfigVersion.cmake"
  DESTINATION "${MOEGEMM_INSTALL_CMAKEDIR}"
  COMPONENT moegemm_development)

# --- pkg-config ------------------------------------------------------------------------------
# The prefix is written relative to ${pcfiledir} (the .pc file's directory, known to both
# pkg-config and pkgconf) so that an installed tree stays usable when moved. Absolute
# install directories are written as they are.
if(IS_ABSOLUTE "${MOEGEMM_INSTALL_PKGCONFIGDIR}")
  set(MOEGEMM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _moegemm_pc_up
    "/moegemm-prefix/${MOEGEMM_INSTALL_PKGCONFIGDIR}" "/moegemm-prefix")
  string(REGEX REPLACE "/$" "" _moegemm_pc_up "${_moegemm_pc_up}")
  if(_moegemm_pc_up STREQUAL "")
    set(MOEGEMM_PC_PREFIX "\${pcfiledir}")
  else()
    set(MOEGEMM_PC_PREFIX "\${pcfiledir}/${_moegemm_pc_up}")
  endif()
endif()
foreach(_moegemm_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_moegemm_dir}}")
    set(MOEGEMM_PC_${_moegemm_dir} "${CMAKE_INSTALL_${_moegemm_dir}}")
  else()
    set(MOEGEMM_PC_${_moegemm_dir} "\${prefix}/${CMAKE_INSTALL_${_moegemm_dir}}")
  endif()
endforeach()
set(MOEGEMM_PC_CUDA_LIBDIR "${CUDAToolkit_LIBRARY_DIR}")

configure_file("${PROJECT_SOURCE_DIR}/moegemm.pc.in" "${PROJECT_BINARY_DIR}/moegemm.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/moegemm.pc"
  DESTINATION "${MOEGEMM_INSTALL_PKGCONFIGDIR}"
  COMPONENT moegemm_development)
