# Session 26, calls 6 and 7: moegemm-bench --exhaustive (every kernel variant forced through
# problem.force_kernel) on main's library (build/h2 from .peers/pack/next.tar.xz), twice:
# call 6 the six bf16 decode workloads, call 7 tutorial-8x2048 with --rounds 2.
tar -xJf .peers/pack/next.tar.xz; mkdir -p $OUT/r
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
for run in 1 2; do env -u OUT LD_LIBRARY_PATH=$PWD/build/h2 timeout 280 build/bench/moegemm-bench --only $DEC --exhaustive --json $OUT/r/exh-$run.json > $OUT/r/exh-$run.log 2>&1; echo "run $run rc=$?"; done
for run in 1 2; do env -u OUT LD_LIBRARY_PATH=$PWD/build/h2 timeout 200 build/bench/moegemm-bench --only tutorial-8x2048 --exhaustive --rounds 2 --json $OUT/r/tut-$run.json > $OUT/r/tut-$run.log 2>&1; echo "run $run rc=$?"; done
