# Session 25, call 2: issue 5's recorded run and its repeat on db41dc9's library (build/h2 from
# .peers/pack/next.tar.xz): per run moegemm-bench bf16 --check --rounds 2, compare_torch.py with
# the read and the write flush, moegemm-bench fp8 per-tensor --rounds 2. Call 8 ran this script
# again with MOEGEMM_GIT_COMMIT=85adf39 (that commit's moegemm-bench: resident bare launches
# timed between the rows, which slowed its MASKED rows; NOTES §44).
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/next.tar.xz
H=$PWD/build/h2
export MOEGEMM_GIT_COMMIT=db41dc9
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/device.txt
t() { env "${@:4}" LD_LIBRARY_PATH=$H timeout $2 build/tests/moegemm_gpu_tests "$3" > $OUT/r/$1.txt 2>&1
      echo "$1 rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$1.txt | tr '\n' ' ')"; }
for run in 1 2; do
  env -u OUT LD_LIBRARY_PATH=$H timeout 140 build/bench/moegemm-bench --only $DEC --check --rounds 2 --json $OUT/r/bf16-$run.json > $OUT/r/bf16-$run.log 2>&1
  echo "bf16 $run rc=$? at $((SECONDS - T0)) s"
  for f in read write; do
    timeout 100 python3 bench/compare_torch.py --lib $H/libmoegemm.so --only $DEC --l2-flush $f --json $OUT/r/torch-$f-$run.json > $OUT/r/torch-$f-$run.log 2>&1
    echo "torch $f $run rc=$? at $((SECONDS - T0)) s"
  done
  env -u OUT LD_LIBRARY_PATH=$H timeout 80 build/bench/moegemm-bench --only $DEC --dtype e4m3 --scale-mode per_tensor --rounds 2 --json $OUT/r/fp8-$run.json > $OUT/r/fp8-$run.log 2>&1
  echo "fp8 $run rc=$? at $((SECONDS - T0)) s"
done
cd $OUT && tar czf all.tgz r && rm -rf r
