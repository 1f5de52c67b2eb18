# Session 23, call 6: BLOCK ring scales read one k-block ahead (build/pf) against HEAD's kernels
# (build/new), A B B A, then [fp8] on build/pf.
set -u
export PYTHONUNBUFFERED=1
T0=$SECONDS
mkdir -p "$OUT/r"
tar -xJf .peers/pack/pf.tar.xz
N=$PWD/build/new; P=$PWD/build/pf
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k,mixtral-fc1-prefill4k,qwen3moe-fc1-prefill4k,gptoss-fc1-prefill2k
bench() {  # LIB JSON SCALE_MODE
  env -u OUT LD_LIBRARY_PATH="$1" timeout 150 build/bench/moegemm-bench --only "$WL" \
    --dtype e4m3 --scale-mode "$3" --rounds 2 --json "$2" > /dev/null 2>&1
  echo "$2 rc=$? at $((SECONDS - T0)) s"
}
ab() {  # NAME LIB_A LIB_B SCALE_MODE
  bench "$2" "$OUT/r/$1-a-1.json" "$4"; bench "$3" "$OUT/r/$1-b-1.json" "$4"
  bench "$3" "$OUT/r/$1-b-2.json" "$4"; bench "$2" "$OUT/r/$1-a-2.json" "$4"
  python3 bench/tools/ab_compare.py "$OUT/r/$1" | tee "$OUT/r/$1.txt"
}
ab block "$P" "$N" block
LD_LIBRARY_PATH=$P timeout 250 stdbuf -oL build/tests/moegemm_gpu_tests "[fp8]" > $OUT/r/fp8-tests.txt 2>&1; echo "fp8 tests rc=$? at $((SECONDS - T0)) s"; tail -3 $OUT/r/fp8-tests.txt
cd "$OUT" && tar czf all.tgz r && rm -rf r
