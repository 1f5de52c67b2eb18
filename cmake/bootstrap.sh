# Shared by tests/run.sh and bench/run.sh (sourced, not run): install the build's packages when
# they are missing, then configure and build libmoegemm into $MOEGEMM_BUILD_DIR.
#
# Environment:
#   MOEGEMM_BUILD_DIR   build directory (default: <repo>/build)
#   MOEGEMM_JOBS        parallel build/test jobs (default: nproc)
#   MOEGEMM_NO_APT=1    never run apt-get, only report what is missing
#   CMAKE_ARGS          extra arguments for the configure step (word-split)

MOEGEMM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOEGEMM_BUILD_DIR="${MOEGEMM_BUILD_DIR:-$MOEGEMM_ROOT/build}"
MOEGEMM_JOBS="${MOEGEMM_JOBS:-$(nproc 2>/dev/null || echo 2)}"

# Debian/Ubuntu packages the build and the tests need (the CUDA toolkit is not among them:
# install it from NVIDIA, 12.8 or newer).
MOEGEMM_APT_PACKAGES=(cmake make g++ pkg-config catch2 libfmt-dev clang libclang-rt-14-dev pyflakes3)

moegemm_log() { printf '[moegemm] %s\n' "$*" >&2; }

moegemm_install_deps() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    moegemm_log "not a Debian-like system: make sure these are installed: CMake >= 3.24, a C/C++ compiler, pkg-config, Catch2 2.x, fmt"
    return 0
  fi
  local missing=() pkg
  for pkg in "${MOEGEMM_APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "${MOEGEMM_NO_APT:-0}" = 1 ]; then
    moegemm_log "missing packages (MOEGEMM_NO_APT=1, not installing): ${missing[*]}"
    return 0
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo)
    else
      moegemm_log "missing packages: ${missing[*]}"
      moegemm_log "run as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
      return 1
    fi
  fi
  moegemm_log "installing: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

moegemm_find_cuda() {
  if [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null 2>&1; then
    return 0
  fi
  local dir
  for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [ -n "$dir" ] && [ -x "$dir/bin/nvcc" ]; then
      export PATH="$dir/bin:$PATH"
      return 0
    fi
  done
  moegemm_log "nvcc not found: install the CUDA toolkit (12.8 or newer) or set CUDACXX / CUDA_HOME"
  return 1
}

# The SASS test (tests/sass_check.py) needs cuobjdump, which some CUDA toolkit installs lack:
# then NVIDIA's wheels of it and nvdisasm go into $MOEGEMM_BUILD_DIR/tools (PyPI) and CMAKE_ARGS points the
# configure step at it. Without network or pip the test is skipped, not failed.
moegemm_fetch_cuobjdump() {
  local nvcc_dir
  nvcc_dir="$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")"
  if command -v cuobjdump >/dev/null 2>&1 || [ -x "$nvcc_dir/cuobjdump" ]; then
    return 0
  fi
  local dir="$MOEGEMM_BUILD_DIR/tools/cuobjdump" found
  found="$(find "$dir" -type f -name cuobjdump 2>/dev/null | head -n 1 || true)"
  if [ -z "$found" ]; then
    moegemm_log "no cuobjdump in the CUDA toolkit: fetching NVIDIA's wheels of it and of nvdisasm, which it runs"
    if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$dir" "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14" >&2; then
      moegemm_log "could not fetch cuobjdump: the SASS test will be skipped"
      return 0
    fi
    found="$(find "$dir" -type f -name cuobjdump 2>/dev/null | head -n 1 || true)"
  fi
  if [ -n "$found" ]; then
    chmod +x "$found" "$(dirname "$found")"/nvdisasm 2>/dev/null || true
    export CMAKE_ARGS="${CMAKE_ARGS:-} -DMOEGEMM_CUOBJDUMP=$found"
  fi
}

# Configures (Release; CUDA architectures from CMakeLists.txt, sm_90a) and builds the given
# targets (all when none).
# shellcheck disable=SC2120  # called with and without targets
moegemm_build() {
  local targets=() t
  for t in "$@"; do
    targets+=(--target "$t")
  done
  # shellcheck disable=SC2086  # CMAKE_ARGS is deliberately word-split
  cmake -S "$MOEGEMM_ROOT" -B "$MOEGEMM_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
  cmake --build "$MOEGEMM_BUILD_DIR" --parallel "$MOEGEMM_JOBS" "${targets[@]}"
}
