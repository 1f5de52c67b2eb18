# Session 23, call 6: BLOCK ring scales read one k-block ahead (build/pf) against HEAD's kernels
# (build/new), A B B A, then [fp8] on build/pf.
tar -xJf .peers/pack/pf.tar.xz
N=$PWD/build/new; P=$PWD/build/pf
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k,mixtral-fc1-prefill4k,qwen3moe-fc1-prefill4k,gptoss-fc1-prefill2k
source bench/tools/ab_bench.sh
ab block "$P" "$N" block
LD_LIBRARY_PATH=$P timeout 250 stdbuf -oL build/tests/moegemm_gpu_tests "[fp8]" > $OUT/r/fp8-tests.txt 2>&1; echo "fp8 tests rc=$? at $((SECONDS - T0)) s"; tail -3 $OUT/r/fp8-tests.txt
finish
