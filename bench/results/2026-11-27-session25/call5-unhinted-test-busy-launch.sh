# Session 25, call 5: the rewritten unhinted-copies test (grid of every SM; K of 4 x and 2 x the
# unhinted copies) on db41dc9's library (build/h2; main's kernels are identical), launch_cost's
# busy-queue rows (parameter size, PDL attribute), then moegemm-bench (bf16 decode, one round)
# with the bare-launch reference now launched into a queue of pending kernels.
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/next.tar.xz
H=$PWD/build/h2
export MOEGEMM_GIT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo session25)
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
LD_LIBRARY_PATH=$H timeout 120 build/tests/moegemm_gpu_tests "decode: unhinted first weight copies*" > $OUT/r/unhinted.txt 2>&1
echo "unhinted rc=$? at $((SECONDS - T0)) s"; grep -A12 "FAILED" $OUT/r/unhinted.txt | head -40; tail -3 $OUT/r/unhinted.txt
timeout 200 build/s25/launch_cost > $OUT/r/launch_cost.txt 2>&1; echo "launch_cost rc=$? at $((SECONDS - T0)) s"; grep "busy queue" $OUT/r/launch_cost.txt
for run in 1 2; do
  env -u OUT LD_LIBRARY_PATH=$H timeout 100 build/bench/moegemm-bench --only $DEC --json $OUT/r/bf16-$run.json > $OUT/r/bf16-$run.log 2>&1
  echo "bf16 $run rc=$? at $((SECONDS - T0)) s"; grep "bare launch" $OUT/r/bf16-$run.log
done
cd $OUT && tar czf all.tgz r && rm -rf r
