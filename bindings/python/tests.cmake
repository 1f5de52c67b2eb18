# Python binding tests (label bindings), included from tests/CMakeLists.txt.
# CPU tests run everywhere; GPU tests are skipped inside pytest when torch sees no GPU.
find_program(MOEGEMM_PYTHON3 NAMES python3)
if(NOT MOEGEMM_PYTHON3)
  message(STATUS "moegemm: python3 not found, bindings.python test not added")
  return()
endif()
add_test(NAME bindings.python
  COMMAND sh ${PROJECT_SOURCE_DIR}/bindings/python/tests/run_pytest.sh
          ${MOEGEMM_PYTHON3} ${CMAKE_BINARY_DIR}/bindings/python/pydeps bindings/python/tests
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(bindings.python PROPERTIES
  LABELS bindings
  SKIP_RETURN_CODE 77
  ENVIRONMENT "MOEGEMM_LIBRARY=$<TARGET_FILE:moegemm>;PYTHONPATH=${PROJECT_SOURCE_DIR}/bindings/python")
