# Fuzzing (label fuzz): fuzz.build configures tests/fuzz with clang (separate project: the main
# one is built with g++/nvcc), then fuzz.api and fuzz.validation run each libFuzzer target for a
# bounded time over the kept corpus tests/fuzz/corpus/<target>/. Skipped (77) without clang's
# libFuzzer runtime. MOEGEMM_FUZZ_SECONDS sets the time per target.
set(MOEGEMM_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz target runs under ctest -L fuzz")
set(_fuzz_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
set(_fuzz_src ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
# The nvcc-built kernel objects, which clang cannot compile, are taken from the main build, and
# the library's host sources from its list (compiled again with the sanitizers).
set(_fuzz_host_sources ${MOEGEMM_SOURCES})
list(FILTER _fuzz_host_sources INCLUDE REGEX "\\.cpp$")
list(TRANSFORM _fuzz_host_sources PREPEND ${PROJECT_SOURCE_DIR}/)
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/fuzz_main_objects.cmake
  CONTENT "set(MOEGEMM_CU_OBJECTS \"$<FILTER:$<TARGET_OBJECTS:moegemm_objects>,INCLUDE,\\.cu\\.o$>\")
set(MOEGEMM_HOST_SOURCES \"${_fuzz_host_sources}\")\n")

add_test(NAME fuzz.build
  COMMAND sh ${_fuzz_src}/fuzz.sh build ${_fuzz_src} ${_fuzz_bin}
          ${CMAKE_CURRENT_BINARY_DIR}/fuzz_main_objects.cmake)
set_tests_properties(fuzz.build PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77
  FIXTURES_SETUP moegemm_fuzzers TIMEOUT 900)
foreach(_t api validation layer)
  add_test(NAME fuzz.${_t}
    COMMAND sh ${_fuzz_src}/fuzz.sh run ${_fuzz_bin} ${_t} ${_fuzz_src}/corpus/${_t}
            ${MOEGEMM_FUZZ_SECONDS})
  # No GPU is visible, as for the CPU tests: plan_create stops at NO_DEVICE.
  set_tests_properties(fuzz.${_t} PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77
    FIXTURES_REQUIRED moegemm_fuzzers ENVIRONMENT "CUDA_VISIBLE_DEVICES="
    TIMEOUT 300)
endforeach()
