# Session 23, call 2: fp8 A from registers (build/rs) against HEAD's kernels (build/new), per-tensor
# and BLOCK, A B B A, then [fp8] on build/rs.
tar -xJf .peers/pack/rs.tar.xz
N=$PWD/build/new; R=$PWD/build/rs
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k,mixtral-fc1-prefill4k
BENCH_TIMEOUT=120
source bench/tools/ab_bench.sh
ab pt "$R" "$N" per_tensor
ab block "$R" "$N" block
LD_LIBRARY_PATH=$R timeout 260 stdbuf -oL build/tests/moegemm_gpu_tests "[fp8]" > $OUT/r/fp8-tests.txt 2>&1; echo "fp8 tests rc=$? at $((SECONDS - T0)) s"; tail -3 $OUT/r/fp8-tests.txt
finish
