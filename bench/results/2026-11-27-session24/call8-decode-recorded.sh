# Session 24, call 8: issue 5's recorded decode run and its repeat on HEAD's library (build/new,
# kernels SASS-identical to 5fd9931): moegemm-bench bf16 --check --rounds 2 (eager, graph,
# MASKED, host cost, cuBLASLt padded peer), compare_torch.py with the read and the write flush,
# moegemm-bench fp8 per-tensor --rounds 2; then the same again.
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/call1.tar.xz build/new
N=$PWD/build/new
export MOEGEMM_GIT_COMMIT=$(cat .commit)
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/device.txt
for run in 1 2; do
  env -u OUT LD_LIBRARY_PATH=$N timeout 140 build/bench/moegemm-bench --only $DEC --check --rounds 2 --json $OUT/r/bf16-$run.json > $OUT/r/bf16-$run.log 2>&1
  echo "bf16 $run rc=$? at $((SECONDS - T0)) s"
  for f in read write; do
    timeout 100 python3 bench/compare_torch.py --lib $N/libmoegemm.so.0 --only $DEC --l2-flush $f --json $OUT/r/torch-$f-$run.json > $OUT/r/torch-$f-$run.log 2>&1
    echo "torch $f $run rc=$? at $((SECONDS - T0)) s"
  done
  env -u OUT LD_LIBRARY_PATH=$N timeout 80 build/bench/moegemm-bench --only $DEC --dtype e4m3 --scale-mode per_tensor --rounds 2 --json $OUT/r/fp8-$run.json > $OUT/r/fp8-$run.log 2>&1
  echo "fp8 $run rc=$? at $((SECONDS - T0)) s"
done
cd $OUT && tar czf all.tgz r && rm -rf r
