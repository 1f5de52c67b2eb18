# Packaging tests (label `packaging`); none needs a GPU or the CUDA driver.
#
#   packaging.exports           libmoegemm.so exports exactly the C API of moegemm.h, has SONAME
#                               libmoegemm.so.<major>, and needs neither libcudart nor libfmt
#   packaging.exports_selftest  the same checker flags every defect of a deliberately bad library
#   packaging.install           cmake --install into a scratch prefix, then checks the tree
#                               (fixture setup for the consumers below)
#   packaging.pkgconfig_consumer     C program built with `pkg-config --cflags --libs moegemm`
#   packaging.find_package_consumer  CMake project using find_package(moegemm) + moegemm::moegemm
#   packaging.c99_consumer           -std=c99 -pedantic-errors -Werror against the installed header
#   packaging.readme_example         the C example of README.md compiles (C99, -Werror) and runs
#
# Included from tests/CMakeLists.txt; paths are relative to this file.
set(_pkg_dir "${CMAKE_CURRENT_LIST_DIR}")
set(_pkg_work "${CMAKE_CURRENT_BINARY_DIR}/packaging")
set(_pkg_prefix "${_pkg_work}/prefix")
set(_pkg_header "${PROJECT_SOURCE_DIR}/include/moegemm/moegemm.h")

set(_pkg_nm "${CMAKE_NM}")
if(NOT _pkg_nm)
  set(_pkg_nm nm)
endif()
set(_pkg_readelf "${CMAKE_READELF}")
if(NOT _pkg_readelf)
  find_program(_pkg_readelf_found NAMES readelf)
  set(_pkg_readelf "${_pkg_readelf_found}")
endif()

# --- Exported symbols, SONAME, NEEDED ----------------------------------------------------------
add_test(NAME packaging.exports
  COMMAND "${CMAKE_COMMAND}"
    "-DLIB=$<TARGET_FILE:moegemm>"
    "-DHEADER=${_pkg_header}"
    "-DEXPECTED_SONAME=libmoegemm.so.${PROJECT_VERSION_MAJOR}"
    "-DNM=${_pkg_nm}"
    "-DREADELF=${_pkg_readelf}"
    -P "${_pkg_dir}/check_exports.cmake")

# A library with planted defects; the checker must catch each of them.
add_library(moegemm_exports_selftest SHARED "${_pkg_dir}/exports_selftest_lib.cpp")
set_target_properties(moegemm_exports_selftest PROPERTIES
  OUTPUT_NAME moegemm_exports_selftest
  CXX_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY "${_pkg_work}/selftest")
# --no-as-needed keeps the NEEDED entries the checker must flag.
target_link_options(moegemm_exports_selftest PRIVATE "LINKER:--no-as-needed")
target_link_libraries(moegemm_exports_selftest PRIVATE CUDA::cudart)
set(_pkg_expect_fmt OFF)
if(TARGET fmt::fmt)
  get_target_property(_pkg_fmt_type fmt::fmt TYPE)
  if(_pkg_fmt_type STREQUAL "SHARED_LIBRARY")
    target_link_libraries(moegemm_exports_selftest PRIVATE fmt::fmt)
    set(_pkg_expect_fmt ON)
  else()
    target_link_libraries(moegemm_exports_selftest PRIVATE fmt::fmt-header-only)
  endif()
else()
  target_link_libraries(moegemm_exports_selftest PRIVATE fmt::fmt-header-only)
endif()
add_test(NAME packaging.exports_selftest
  COMMAND "${CMAKE_COMMAND}"
    "-DCHECKER=${_pkg_dir}/check_exports.cmake"
    "-DLIB=$<TARGET_FILE:moegemm_exports_selftest>"
    "-DHEADER=${_pkg_header}"
    "-DNM=${_pkg_nm}"
    "-DREADELF=${_pkg_readelf}"
    "-DEXPECT_FMT=${_pkg_expect_fmt}"
    -P "${_pkg_dir}/check_exports_selftest.cmake")

set(_pkg_tests packaging.exports packaging.exports_selftest)

# --- Install tree and out-of-tree consumers -------------------------------------------------------
set(_pkg_install_ok ON)
foreach(_d CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR MOEGEMM_INSTALL_CMAKEDIR MOEGEMM_INSTALL_PKGCONFIGDIR)
  if(IS_ABSOLUTE "${${_d}}")
    set(_pkg_install_ok OFF)
  endif()
endforeach()
if(NOT MOEGEMM_INSTALL)
  message(STATUS "moegemm: packaging install/consumer tests off (MOEGEMM_INSTALL is OFF)")
elseif(NOT _pkg_install_ok)
  message(STATUS "moegemm: packaging install/consumer tests off (absolute install directories "
    "cannot be redirected into a scratch prefix)")
else()
  add_test(NAME packaging.install
    COMMAND "${CMAKE_COMMAND}"
      "-DBUILD_DIR=${PROJECT_BINARY_DIR}"
      "-DPREFIX=${_pkg_prefix}"
      "-DCONFIG=$<CONFIG>"
      "-DLIBDIR=${CMAKE_INSTALL_LIBDIR}"
      "-DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}"
      "-DCMAKEDIR=${MOEGEMM_INSTALL_CMAKEDIR}"
      "-DPKGCONFIGDIR=${MOEGEMM_INSTALL_PKGCONFIGDIR}"
      "-DVERSION=${PROJECT_VERSION}"
      "-DSOVERSION=${PROJECT_VERSION_MAJOR}"
      "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}"
      "-DREADELF=${_pkg_readelf}"
      -P "${_pkg_dir}/install_tree.cmake")
  set_tests_properties(packaging.install PROPERTIES FIXTURES_SETUP moegemm_installed)

  find_program(MOEGEMM_PKG_CONFIG_EXECUTABLE NAMES pkg-config pkgconf
    DOC "pkg-config for the packaging tests")
  if(MOEGEMM_PKG_CONFIG_EXECUTABLE)
    add_test(NAME packaging.pkgconfig_consumer
      COMMAND "${CMAKE_COMMAND}"
        -DMODE=pkgconfig
        "-DSOURCE=${_pkg_dir}/pkgconfig_consumer/main.c"
        "-DWORK_DIR=${_pkg_work}/pkgconfig_consumer"
        "-DPREFIX=${_pkg_prefix}"
        "-DLIBDIR=${CMAKE_INSTALL_LIBDIR}"
        "-DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}"
        "-DPKGCONFIGDIR=${MOEGEMM_INSTALL_PKGCONFIGDIR}"
        "-DC_COMPILER=${CMAKE_C_COMPILER}"
        "-DPKG_CONFIG=${MOEGEMM_PKG_CONFIG_EXECUTABLE}"
        "-DVERSION=${PROJECT_VERSION}"
        -DEXPECT_RELOCATABLE=ON
        -P "${_pkg_dir}/c_consumer.cmake")
  else()
    # Reported as skipped (not passed) when pkg-config is missing.
    add_test(NAME packaging.pkgconfig_consumer
      COMMAND "${CMAKE_COMMAND}" -E echo "pkg-config not found: install it (apt-get install pkg-config)")
    set_tests_properties(packaging.pkgconfig_consumer PROPERTIES SKIP_REGULAR_EXPRESSION "pkg-config not found")
  endif()

  add_test(NAME packaging.find_package_consumer
    COMMAND "${CMAKE_COMMAND}"
      "-DSOURCE=${_pkg_dir}/find_package_consumer"
      "-DWORK_DIR=${_pkg_work}/find_package_consumer"
      "-DPREFIX=${_pkg_prefix}"
      "-DGENERATOR=${CMAKE_GENERATOR}"
      "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
      "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
      "-DBUILD_TYPE=$<CONFIG>"
      "-DVERSION=${PROJECT_VERSION}"
      "-DCMAKEDIR=${MOEGEMM_INSTALL_CMAKEDIR}"
      "-DLIBRARY_ARCHITECTURE=${CMAKE_LIBRARY_ARCHITECTURE}"
      -P "${_pkg_dir}/find_package_consumer.cmake")

  add_test(NAME packaging.c99_consumer
    COMMAND "${CMAKE_COMMAND}"
      -DMODE=c99
      "-DSOURCE=${_pkg_dir}/c99_consumer.c"
      "-DWORK_DIR=${_pkg_work}/c99_consumer"
      "-DPREFIX=${_pkg_prefix}"
      "-DLIBDIR=${CMAKE_INSTALL_LIBDIR}"
      "-DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}"
      "-DC_COMPILER=${CMAKE_C_COMPILER}"
      -P "${_pkg_dir}/c_consumer.cmake")

  add_test(NAME packaging.readme_example
    COMMAND "${CMAKE_COMMAND}"
      -DMODE=readme
      "-DSOURCE=${PROJECT_SOURCE_DIR}/README.md"
      "-DWORK_DIR=${_pkg_work}/readme_example"
      "-DPREFIX=${_pkg_prefix}"
      "-DLIBDIR=${CMAKE_INSTALL_LIBDIR}"
      "-DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR}"
      "-DC_COMPILER=${CMAKE_C_COMPILER}"
      "-DCUDA_INCLUDE_DIRS=${CUDAToolkit_INCLUDE_DIRS}"
      "-DCUDA_LIBRARY_DIR=${CUDAToolkit_LIBRARY_DIR}"
      -P "${_pkg_dir}/c_consumer.cmake")

  set(_pkg_consumers packaging.pkgconfig_consumer packaging.find_package_consumer
    packaging.c99_consumer packaging.readme_example)
  set_tests_properties(${_pkg_consumers} PROPERTIES FIXTURES_REQUIRED moegemm_installed)
  list(APPEND _pkg_tests packaging.install ${_pkg_consumers})
endif()

set_tests_properties(${_pkg_tests} PROPERTIES LABELS packaging TIMEOUT 300)
