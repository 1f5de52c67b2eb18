# Rust bindings (included from tests/CMakeLists.txt). Needs cargo, nothing from the network:
# the crates have no dependencies. Without cargo the test reports SKIPPED (exit 77), never passed.
find_program(MOEGEMM_CARGO cargo HINTS $ENV{CARGO_HOME}/bin $ENV{HOME}/.cargo/bin)
if(NOT MOEGEMM_CARGO)
  set(MOEGEMM_CARGO "")
endif()
add_test(NAME bindings.rust
         COMMAND sh ${PROJECT_SOURCE_DIR}/bindings/rust/ctest_cargo.sh "${MOEGEMM_CARGO}"
                 ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml)
set_tests_properties(bindings.rust PROPERTIES
  LABELS bindings
  SKIP_RETURN_CODE 77
  TIMEOUT 900
  ENVIRONMENT "MOEGEMM_LIB_DIR=$<TARGET_FILE_DIR:moegemm>;LD_LIBRARY_PATH=$<TARGET_FILE_DIR:moegemm>;CARGO_TARGET_DIR=${CMAKE_BINARY_DIR}/rust-target")
