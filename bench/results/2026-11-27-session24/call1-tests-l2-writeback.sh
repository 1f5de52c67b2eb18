# Session 24, call 1: the GPU tests left unrun by session 23's test refactor ([oracle], [stress]
# with and without E4M3, [fp8]) on HEAD's library (build/new), and the write-flush experiment
# (bench/tools/l2_writeback.py) on build/xl2 (HEAD + MOEGEMM_X_STAGES / MOEGEMM_X_WPOLICY knobs).
tar -xJf .peers/pack/call1.tar.xz
T0=$SECONDS; mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/device.txt
N=$PWD/build/new
run_tests() {  # name timeout filter [env]
  env $4 LD_LIBRARY_PATH=$N timeout $2 build/tests/moegemm_gpu_tests "$3" > $OUT/r/$1.txt 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$1.txt | tr '\n' ' ')"
}
run_tests oracle 60 "[oracle]"
run_tests stress 60 "[stress]"
run_tests stress-e4m3 90 "[stress]" MOEGEMM_STRESS_E4M3=1
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
timeout 240 python3 bench/tools/l2_writeback.py --lib build/xl2/libmoegemm.so --only $DEC --reps 30 \
  --configs base,s4=MOEGEMM_X_STAGES:4,s3=MOEGEMM_X_STAGES:3,nohint=MOEGEMM_X_WPOLICY:1,nohint-s4=MOEGEMM_X_WPOLICY:1+MOEGEMM_X_STAGES:4 \
  --json $OUT/r/l2.json > $OUT/r/l2.txt 2>&1
echo "l2 rc=$? at $((SECONDS - T0)) s"; cat $OUT/r/l2.txt
run_tests fp8 $((570 - (SECONDS - T0))) "[fp8]"
cd $OUT && tar czf all.tgz r && rm -rf r
