#!/usr/bin/env bash
# Builds moegemm-bench and runs it (by default on its built-in workloads). Run as root on a
# fresh Debian/Ubuntu machine with the CUDA toolkit, it first installs the missing packages.
# Without a usable GPU the benchmark says so and exits non-zero.
#
#   bench/run.sh                  # the built-in workloads
#   bench/run.sh --help           # arguments go to moegemm-bench
set -euo pipefail
# shellcheck source=SCRIPTDIR/../cmake/bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cmake/bootstrap.sh"

moegemm_install_deps
moegemm_find_cuda
moegemm_build moegemm-bench
bench_exe="$MOEGEMM_BUILD_DIR/bench/moegemm-bench"
if [ ! -x "$bench_exe" ]; then
  moegemm_log "moegemm-bench was not built at $bench_exe"
  exit 1
fi
exec "$bench_exe" "$@"
