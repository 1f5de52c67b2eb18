# Session 23, call 8 (timing only, wrong results): BLOCK with the scale warps off AND consumers
# that read no slot (constant scales from a run-time value, no slot arrivals) = build/nr,
# against per-tensor on HEAD's kernels (build/new); control: build/nr per-tensor vs HEAD.
set -u
export PYTHONUNBUFFERED=1
T0=$SECONDS
mkdir -p "$OUT/r"
tar -xJf .peers/pack/nr.tar.xz
N=$PWD/build/new; R=$PWD/build/nr
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k
bench() {  # LIB JSON SCALE_MODE
  env -u OUT LD_LIBRARY_PATH="$1" timeout 100 build/bench/moegemm-bench --only "$WL" \
    --dtype e4m3 --scale-mode "$3" --rounds 2 --json "$2" > /dev/null 2>&1
  echo "$2 rc=$? at $((SECONDS - T0)) s"
}
bench "$R" "$OUT/r/x-a-1.json" block; bench "$N" "$OUT/r/x-b-1.json" per_tensor
bench "$N" "$OUT/r/x-b-2.json" per_tensor; bench "$R" "$OUT/r/x-a-2.json" block
python3 bench/tools/ab_compare.py "$OUT/r/x" | tee "$OUT/r/x.txt"
bench "$R" "$OUT/r/c-a-1.json" per_tensor; bench "$N" "$OUT/r/c-b-1.json" per_tensor
python3 bench/tools/ab_compare.py "$OUT/r/c" | tee "$OUT/r/c.txt"
cd "$OUT" && tar czf all.tgz r && rm -rf r
