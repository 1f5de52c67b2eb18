# Session 26, call 1: the refactored C++ examples, masked_after_busy (twice), then the whole GPU
# suite (incl. [stress], [large]) on main's library (build/h2 from .peers/pack/next.tar.xz).
set -u
tar -xJf .peers/pack/next.tar.xz
H=$PWD/build/h2
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/r/gpu.txt
for ex in quickstart masked_device_sizes cuda_graph; do
  LD_LIBRARY_PATH=$H timeout 60 build/examples/$ex > $OUT/r/ex-$ex.txt 2>&1; echo "$ex rc=$?" >> $OUT/r/ex-$ex.txt
  tail -3 $OUT/r/ex-$ex.txt
done
for run in 1 2; do LD_LIBRARY_PATH=$H timeout 150 build/s25/masked_after_busy > $OUT/r/mab-$run.txt 2>&1; echo "rc=$?" >> $OUT/r/mab-$run.txt; cat $OUT/r/mab-$run.txt; done
LD_LIBRARY_PATH=$H MOEGEMM_REQUIRE_GPU=1 timeout 240 $H/moegemm_gpu_tests > $OUT/r/suite.txt 2>&1; echo "suite rc=$?"; tail -4 $OUT/r/suite.txt
tar -czf $OUT/all.tgz -C $OUT r
