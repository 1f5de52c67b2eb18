# Session 24, call 7: swap-AB producers issuing k-blocks in pairs (MOEGEMM_X_BURST=1 on build/xl2c,
# the box stream's bursts of 2 ran ~1% faster in bench/tools/weight_order.cu) against the same
# library without it: the GPU stress and correctness tests with it on, l2_writeback (bf16,
# read / write flush), moegemm-bench decode bf16 and fp8 A B B A (A: bursts, B: none).
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/call7.tar.xz
L=$PWD/build/xl2c
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
export MOEGEMM_GIT_COMMIT=1f19a05+burst
t() {  # name timeout filter [env...]
  env "${@:4}" MOEGEMM_X_BURST=1 LD_LIBRARY_PATH=$L timeout $2 build/tests/moegemm_gpu_tests "$3" > $OUT/r/$1.txt 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$1.txt | tr '\n' ' ')"
}
t stress 60 "[stress]"
t stress-e4m3 90 "[stress]" MOEGEMM_STRESS_E4M3=1
t correctness 150 "[correctness]"
timeout 120 python3 bench/tools/l2_writeback.py --lib $L/libmoegemm.so --only $DEC --reps 40 --flushes read,write \
  --configs base,burst=MOEGEMM_X_BURST:1 > $OUT/r/l2.txt 2>&1; echo "l2 rc=$? at $((SECONDS - T0)) s"; cat $OUT/r/l2.txt
b() {  # json dtype burst
  env -u OUT MOEGEMM_X_BURST=$3 LD_LIBRARY_PATH=$L timeout 120 build/bench/moegemm-bench --only $DEC --dtype $2 --rounds 1 --json $1 > ${1%.json}.log 2>&1
  echo "$1 rc=$? at $((SECONDS - T0)) s"
}
for d in bf16 e4m3; do
  b $OUT/r/$d-a-1.json $d 1; b $OUT/r/$d-b-1.json $d 0; b $OUT/r/$d-b-2.json $d 0; b $OUT/r/$d-a-2.json $d 1
  python3 bench/tools/ab_compare.py $OUT/r/$d | tee $OUT/r/$d-ab.txt
done
cd $OUT && tar czf all.tgz r && rm -rf r
