# For session 25's first device call: main's kernels are a44e4b7's (GPU-tested; SASS md5
# 148dc062 of `cuobjdump -sass | grep -v blank`), but the plan's quarter rule for the unhinted
# weight copies, the new decode test and the bench's bare launch have not run. Build here, then pack
# (tar -cJf .peers/pack/next.tar.xz build/h2 with build/h2 the stripped HEAD library, as in
# session 24) and carry it with build/tests/moegemm_gpu_tests and build/bench/moegemm-bench.
# Checks: the new decode test and [stress] both ways, [device_sizes]; then MOEGEMM_UNHINTED_
# WEIGHT_COPIES=0 against the default in one library (l2_writeback configs), fp8 on the rows
# that take the copies; then issue 5's recorded run and its repeat (call10-*.sh with build/h2).
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/next.tar.xz
H=$PWD/build/h2
t() { env "${@:4}" LD_LIBRARY_PATH=$H timeout $2 build/tests/moegemm_gpu_tests "$3" > $OUT/r/$1.txt 2>&1
      echo "$1 rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$1.txt | tr '\n' ' ')"; }
t unhinted 60 "decode: unhinted first weight copies*"
t stress 40 "[stress]"
t stress-e4m3 60 "[stress]" MOEGEMM_STRESS_E4M3=1
t device-sizes 60 "[device_sizes]"
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
timeout 90 python3 bench/tools/l2_writeback.py --lib $H/libmoegemm.so --only $DEC --reps 40 --flushes read,write \
  --configs default,evictfirst=MOEGEMM_UNHINTED_WEIGHT_COPIES:0 > $OUT/r/l2.txt 2>&1; echo "l2 rc=$?"; cat $OUT/r/l2.txt
for s in 1 0 0 1; do
  env -u OUT MOEGEMM_UNHINTED_WEIGHT_COPIES=$s LD_LIBRARY_PATH=$H timeout 60 build/bench/moegemm-bench --only $DEC --dtype e4m3 \
    --json $OUT/r/fp8-$s-$SECONDS.json 2>&1 | grep "libmoegemm\[" | grep -v round | sed "s/^/unhinted=$s /"
done
echo "done at $((SECONDS - T0)) s"; cd $OUT && tar czf all.tgz r && rm -rf r
