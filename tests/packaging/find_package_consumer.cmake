# Configures, builds and runs find_package_consumer/ against the scratch install prefix, with
# the build's own generator and compilers (run with cmake -P). The consumer finds
# libmoegemm.so at run time through the RUNPATH CMake gives it, not LD_LIBRARY_PATH.
#
#   cmake -DSOURCE=.. -DWORK_DIR=.. -DPREFIX=.. -DGENERATOR=.. [-DMAKE_PROGRAM=..]
#         -DCXX_COMPILER=.. [-DBUILD_TYPE=Release] [-DVERSION=0.2.0]
#         [-DCMAKEDIR=lib/cmake/moegemm] [-DLIBRARY_ARCHITECTURE=..] -P find_package_consumer.cmake
cmake_minimum_required(VERSION 3.16)

foreach(_var SOURCE WORK_DIR PREFIX GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "find_package_consumer.cmake: -D${_var}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

function(_run)
  string(REPLACE ";" " " _cmd "${ARGN}")
  message("$ ${_cmd}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "FAIL: exited with ${_rc}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(_configure "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK_DIR}" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_PREFIX_PATH=${PREFIX}"
  "-DMOEGEMM_EXPECTED_PREFIX=${PREFIX}"
  "-DMOEGEMM_EXPECTED_VERSION=${VERSION}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND _configure "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
# CMAKE_PREFIX_PATH alone finds the package in the default layout (lib/cmake/moegemm), which
# is what this test is about. A build configured with another CMAKE_INSTALL_LIBDIR (lib64 on
# Debian, say) installs it where find_package does not look by default: point at it then.
set(_searched "lib/cmake/moegemm" "share/cmake/moegemm")
if(LIBRARY_ARCHITECTURE)
  list(APPEND _searched "lib/${LIBRARY_ARCHITECTURE}/cmake/moegemm")
endif()
if(CMAKEDIR AND NOT CMAKEDIR IN_LIST _searched)
  list(APPEND _configure "-Dmoegemm_DIR=${PREFIX}/${CMAKEDIR}")
endif()
_run(${_configure})
_run("${CMAKE_COMMAND}" --build "${WORK_DIR}" --config "${BUILD_TYPE}")
_run("${WORK_DIR}/bin/moegemm_find_package_consumer")
message("OK: find_package consumer built and ran")
