# Session 23, call 3: is the RS form itself slower (A loaded once per tile, timing only), and
# what ncu says of shared memory in the SS (build/new) and RS (build/rs) per-tensor kernels.
tar -xJf .peers/pack/rs.tar.xz
N=$PWD/build/new; R=$PWD/build/rs; L=$PWD/build/rs-noload
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048
BENCH_TIMEOUT=120
source bench/tools/ab_bench.sh
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
finish
