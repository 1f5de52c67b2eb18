# Session 23, call 3: is the RS form itself slower (A loaded once per tile, timing only), and
# what ncu says of shared memory in the SS (build/new) and RS (build/rs) per-tensor kernels.
set -u
export PYTHONUNBUFFERED=1
T0=$SECONDS
mkdir -p "$OUT/r"
tar -xJf .peers/pack/rs.tar.xz
N=$PWD/build/new; R=$PWD/build/rs; L=$PWD/build/rs-noload
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048
bench() {  # LIB JSON SCALE_MODE
  env -u OUT LD_LIBRARY_PATH="$1" timeout 120 build/bench/moegemm-bench --only "$WL" \
    --dtype e4m3 --scale-mode "$3" --rounds 2 --json "$2" > /dev/null 2>&1
  echo "$2 rc=$? at $((SECONDS - T0)) s"
}
ab() {  # NAME LIB_A LIB_B SCALE_MODE
  bench "$2" "$OUT/r/$1-a-1.json" "$4"; bench "$3" "$OUT/r/$1-b-1.json" "$4"
  bench "$3" "$OUT/r/$1-b-2.json" "$4"; bench "$2" "$OUT/r/$1-a-2.json" "$4"
  python3 bench/tools/ab_compare.py "$OUT/r/$1" | tee "$OUT/r/$1.txt"
}
ab noload "$L" "$N" per_tensor
for lib in new rs; do
  env -u OUT LD_LIBRARY_PATH=$PWD/build/$lib timeout 150 ncu --clock-control none -k regex:sm90_grouped \
    --launch-skip 6 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
    build/bench/moegemm-bench --only mixtral-fc2-prefill4k --dtype e4m3 --scale-mode per_tensor \
    --rounds 1 > $OUT/r/ncu-$lib.txt 2>&1
  echo "ncu $lib rc=$? at $((SECONDS - T0)) s"
done
grep -i -E "shared|Duration|Tensor|Issue Slot|Executed Ipc|Stall|Warp Cycles" $OUT/r/ncu-new.txt | head -40
echo ----
grep -i -E "shared|Duration|Tensor|Issue Slot|Executed Ipc|Stall|Warp Cycles" $OUT/r/ncu-rs.txt | head -40
cd "$OUT" && tar czf all.tgz r && rm -rf r
