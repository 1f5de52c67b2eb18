# Julia bindings (included from tests/CMakeLists.txt). No Julia toolchain can be installed on
# these machines: the test checks MoEGemm.jl's ccalls against the header with Python.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(_moegemm_py ${Python3_EXECUTABLE})
else()
  set(_moegemm_py python3)
endif()
add_test(NAME bindings.julia_ccalls
         COMMAND ${_moegemm_py} ${PROJECT_SOURCE_DIR}/bindings/julia/check_ccalls.py)
set_tests_properties(bindings.julia_ccalls PROPERTIES LABELS bindings)
