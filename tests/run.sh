#!/usr/bin/env bash
# Builds libmoegemm and runs the whole test suite: on a fresh Debian/Ubuntu machine with the
# CUDA toolkit, run as root it first installs the missing packages (cmake/bootstrap.sh: cmake,
# g++, pkg-config, catch2, libfmt-dev, clang for the fuzzers, pyflakes3 for the Python lint).
# GPU tests are reported as skipped where there is no usable GPU.
#
#   tests/run.sh                  # everything but the soak (label soak, ten minutes on a GPU)
#   tests/run.sh -L cpu           # extra arguments go to ctest (here: only the cpu label)
set -euo pipefail
# shellcheck source=SCRIPTDIR/../cmake/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cmake/bootstrap.sh"

moegemm_install_deps
moegemm_find_cuda
moegemm_fetch_cuobjdump
moegemm_build  # all targets
# Without arguments everything but the ten-minute soak (tests/run.sh -L soak runs it).
if [ $# -eq 0 ]; then set -- -LE soak; fi
ctest --test-dir "$MOEGEMM_BUILD_DIR" --output-on-failure -j "$MOEGEMM_JOBS" "$@"
