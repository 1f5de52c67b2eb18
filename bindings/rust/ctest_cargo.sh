#!/bin/sh
# CTest driver for the Rust bindings: `cargo test --offline`, then the examples build.
# usage: ctest_cargo.sh CARGO MANIFEST   (CARGO empty or missing: exit 77, reported skipped)
# MOEGEMM_LIB_DIR, LD_LIBRARY_PATH and CARGO_TARGET_DIR come from the test's ENVIRONMENT.
cargo="$1"
manifest="$2"
if [ -z "$cargo" ] || [ ! -x "$cargo" ]; then
    echo "SKIP: cargo not found; the Rust bindings were not tested"
    exit 77
fi
set -e
echo "MOEGEMM_LIB_DIR=$MOEGEMM_LIB_DIR CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
"$cargo" test --offline --manifest-path "$manifest"
"$cargo" build --offline --release --examples --manifest-path "$manifest"
echo "examples built under $CARGO_TARGET_DIR/release/examples"
