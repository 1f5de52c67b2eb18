# Session 24, call 12: unhinted first copies only where they are at most a quarter of a CTA's
# stream (build/h2) against HEAD~1's kernels (build/new): [stress] (16-bit, E4M3), l2_writeback
# (bf16, read / write flush), fp8 moegemm-bench on the two fp8 rows that take them.
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/call12.tar.xz
LD_LIBRARY_PATH=$PWD/build/h2 timeout 20 build/tests/moegemm_gpu_tests "[stress]" | tail -2
MOEGEMM_STRESS_E4M3=1 LD_LIBRARY_PATH=$PWD/build/h2 timeout 20 build/tests/moegemm_gpu_tests "[stress]" | tail -2
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
for lib in new h2; do
  timeout 40 python3 bench/tools/l2_writeback.py --lib $PWD/build/$lib/libmoegemm.so --only $DEC --reps 30 --flushes read,write --configs $lib 2>&1 | grep -v "write - read\|bmm\|grouped"
done
for lib in new h2 new h2; do
  env -u OUT LD_LIBRARY_PATH=$PWD/build/$lib timeout 30 build/bench/moegemm-bench --only mixtral-fc1-decode64,dsv3ep8-fc1-decode128 --dtype e4m3 --json $OUT/r/fp8-$lib-$SECONDS.json 2>&1 | grep "libmoegemm\[" | grep -v round | awk -v l=$lib '{print l, $0}'
done
echo "done at $((SECONDS - T0)) s"; cd $OUT && tar czf all.tgz r && rm -rf r
