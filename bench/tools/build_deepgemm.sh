#!/usr/bin/env bash
# Builds DeepGEMM in place from a source tree, for bench/compare_deepgemm.py on a GPU machine
# (PyTorch, nvcc): its Python extension (deep_gemm/_C) by setup.py, and the CUTLASS headers its
# kernels are compiled against at run time (JIT) copied where it looks for them. DeepGEMM is a
# peer measured beside libmoegemm, never part of it: keep its tree out of the repository (e.g.
# .peers/DeepGEMM, listed in .git/info/exclude). The tree measured in docs/performance.md
# ("Against DeepGEMM"): DeepGEMM at 54e2261 (`git --git-dir=<DeepGEMM> archive 54e2261 | tar x
# -C .peers/DeepGEMM`), CUTLASS's `include` at f3fde583 into third-party/cutlass/include and
# fmt's `include` at 553ec11e into third-party/fmt/include (the machine running it has no
# network: assemble the tree beforehand and carry it).
#
#   bench/tools/build_deepgemm.sh .peers/DeepGEMM
#   PYTHONPATH=.peers/DeepGEMM LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6 \
#     python3 bench/compare_deepgemm.py --lib build/libmoegemm.so
#
# The LD_PRELOAD: on our H200 device machine (torch 2.11 in /opt/torch/.venv, Ubuntu
# 24.04's g++ 13.3) the built extension imports, but its first GEMM died with SIGSEGV inside
# std::regex (DeepGEMM's JIT include parser) unless the system libstdc++ was preloaded;
# preloading /opt/gcc's did not help (a libstdc++ mix-up; docs/performance.md has the run).
set -euo pipefail
tree="${1:?usage: build_deepgemm.sh DEEPGEMM_SOURCE_TREE}"
cutlass="$tree/third-party/cutlass/include"
[ -d "$cutlass/cute" ] && [ -d "$tree/third-party/fmt/include" ] ||
  { echo "build_deepgemm.sh: $tree lacks third-party/cutlass/include or third-party/fmt/include" >&2; exit 1; }
mkdir -p "$tree/deep_gemm/include"
for dir in cute cutlass; do
  rm -rf "$tree/deep_gemm/include/$dir"
  cp -r "$cutlass/$dir" "$tree/deep_gemm/include/$dir"
done
cd "$tree"
MAX_JOBS="${MAX_JOBS:-16}" python3 setup.py build_ext --inplace
python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__version__, 'built in', deep_gemm.__file__)"
