# Session 26, call 8: ncu of tutorial-8x2048, the library's kernel (AUTO: 128 x 256 TMA-store)
# beside cuBLAS's padded batched kernel (torch.bmm, every expert padded to 201 rows).
tar -xJf .peers/pack/next.tar.xz; mkdir -p $OUT/r
S="--clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
env -u OUT LD_LIBRARY_PATH=$PWD/build/h2 timeout 200 ncu $S -k regex:sm90_grouped_gemm --launch-skip 10 --launch-count 1 \
  build/bench/moegemm-bench --only tutorial-8x2048 --rounds 1 > $OUT/r/ncu-lib.txt 2>&1; echo "lib rc=$?"
timeout 200 ncu $S -k regex:"nvjet|gemm|xmma|cutlass" --launch-skip 3 --launch-count 1 \
  python3 bench/tools/padded_bmm_once.py --experts 8 --rows 201 --n 2048 --k 2048 > $OUT/r/ncu-bmm.txt 2>&1; echo "bmm rc=$?"
for f in lib bmm; do echo "== $f"; grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Memory Throughput|Grid Size|Block Size|Registers|Shared Memory Config|Cluster|Achieved Occupancy|Issue Slots Busy|No Eligible|One or More|Warp Cycles Per Issued|SM Frequency|Executed Ipc A|L1/TEX Hit|L2 Hit" $OUT/r/ncu-$f.txt | head -40; done
