# Session 26, call 10: moegemm-bench --exhaustive, fp8 E4M3 per-tensor, four decode workloads,
# twice, on main's library (build/h2 from .peers/pack/next.tar.xz).
tar -xJf .peers/pack/next.tar.xz; mkdir -p $OUT/r
for run in 1 2; do env -u OUT LD_LIBRARY_PATH=$PWD/build/h2 timeout 250 build/bench/moegemm-bench --only qwen3moe-fc1-decode64,qwen3moe-fc2-decode64,dsv3ep8-fc2-decode128,mixtral-fc2-decode64 --dtype e4m3 --scale-mode per_tensor --exhaustive --json $OUT/r/fp8-$run.json > $OUT/r/fp8-$run.log 2>&1; echo "run $run rc=$?"; done
