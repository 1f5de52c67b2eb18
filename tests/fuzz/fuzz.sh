#!/bin/sh
# fuzz.sh build SRC_DIR BUILD_DIR OBJECTS_FILE   - configure and build the fuzzers with clang
# fuzz.sh run BUILD_DIR TARGET CORPUS_DIR SECONDS - run one fuzzer over a copy of its corpus
# Exit 77 (skipped) when clang or its libFuzzer runtime is missing.
set -eu
mode=$1; shift
case $mode in
build)
    src=$1 bin=$2 objs=$3
    rm -f "$bin/SKIPPED"
    mkdir -p "$bin"
    CXX=${MOEGEMM_FUZZ_CXX:-clang++} CC=${MOEGEMM_FUZZ_CC:-clang}
    probe=$bin/probe.cpp
    echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe"
    if ! command -v "$CXX" >/dev/null 2>&1 ||
       ! "$CXX" -fsanitize=fuzzer,address,undefined "$probe" -o "$bin/probe" 2>"$bin/probe.log"; then
        echo "SKIP: $CXX with -fsanitize=fuzzer,address,undefined is unavailable (install clang and libclang-rt-<ver>-dev)"
        cat "$bin/probe.log" 2>/dev/null || true
        touch "$bin/SKIPPED"
        exit 77
    fi
    cmake -S "$src" -B "$bin" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX" \
        -DCMAKE_C_COMPILER="$CC" -DMOEGEMM_MAIN_OBJECTS_FILE="$objs"
    cmake --build "$bin" -j "$(nproc 2>/dev/null || echo 2)"
    ;;
run)
    bin=$1 target=$2 corpus=$3 seconds=$4
    if [ -e "$bin/SKIPPED" ] || [ ! -x "$bin/fuzz_$target" ]; then
        echo "SKIP: fuzz_$target was not built (see fuzz.build)"
        exit 77
    fi
    work=$bin/corpus_$target
    rm -rf "$work"; mkdir -p "$work" "$bin/artifacts_$target"
    # The kept corpus is read-only input; new inputs go to the work copy.
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:protect_shadow_gap=0:${ASAN_OPTIONS:-}"
    export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
    exec "$bin/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=25 \
        -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$bin/artifacts_$target/" "$work" "$corpus"
    ;;
*) echo "usage: fuzz.sh build|run ..." >&2; exit 2 ;;
esac
