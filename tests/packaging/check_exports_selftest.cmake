# Self-test of check_exports.cmake: run it on a library with known defects and require that
# it fails and names each defect. Without this, a checker that silently passes everything
# (a parsing slip, a tool that prints nothing) would go unnoticed.
#
#   cmake -DCHECKER=check_exports.cmake -DLIB=<bad lib> -DHEADER=<moegemm.h> [-DNM=..]
#         [-DREADELF=..] [-DEXPECT_FMT=ON] -P check_exports_selftest.cmake
cmake_minimum_required(VERSION 3.16)

execute_process(
  COMMAND "${CMAKE_COMMAND}" "-DLIB=${LIB}" "-DHEADER=${HEADER}"
          "-DEXPECTED_SONAME=libmoegemm.so.0" "-DNM=${NM}" "-DREADELF=${READELF}"
          -P "${CHECKER}"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
set(_all "${_out}${_err}")
message("--- checker output on the bad library ---\n${_all}--- end ---")

set(_missing "")
if(_rc EQUAL 0)
  list(APPEND _missing "a non-zero exit status")
endif()
set(_expected
  "exported symbol does not start with moegemm_: foo "
  "exported but not declared MOEGEMM_API in the header: moegemm_not_in_header"
  "declared in the header but not exported: moegemm_execute"
  "SONAME is 'libmoegemm_exports_selftest.so'"
  "NEEDED libcudart")
if(EXPECT_FMT)
  list(APPEND _expected "NEEDED libfmt")
endif()
foreach(_text IN LISTS _expected)
  string(FIND "${_all}" "FAIL: ${_text}" _pos)
  if(_pos EQUAL -1)
    list(APPEND _missing "'FAIL: ${_text}'")
  endif()
endforeach()
# The real library's exported API must not be flagged as a defect.
string(FIND "${_all}" "FAIL: exported symbol does not start with moegemm_: moegemm_get_version" _pos)
if(NOT _pos EQUAL -1)
  list(APPEND _missing "no complaint about moegemm_get_version")
endif()

if(_missing)
  string(REPLACE ";" "\n  " _missing "${_missing}")
  message(FATAL_ERROR "check_exports.cmake missed defects of the bad library; expected:\n  ${_missing}")
endif()
message("OK: check_exports.cmake detects every planted defect")
