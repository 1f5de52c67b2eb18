# Session 25, call 13: host cost and GPU time, a60d560 (build/h4: 2.35 KB parameter block)
# against db41dc9 (build/h2: 4.9 KB), A B A B: moegemm-bench on the six bf16 decode workloads
# (one round; the resident bare launch of the new bench, with the new block size, after all
# rows), then two prefill workloads once each (the prefill kernels' parameter offsets moved).
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/s25b.tar.xz
export MOEGEMM_GIT_COMMIT=a60d560
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
for pass in 1 2; do for lib in h2 h4; do
  env -u OUT LD_LIBRARY_PATH=$PWD/build/$lib timeout 100 build/bench/moegemm-bench --only $DEC --json $OUT/r/dec-$lib-$pass.json > $OUT/r/dec-$lib-$pass.log 2>&1
  echo "dec $lib $pass rc=$? at $((SECONDS - T0)) s"; grep -A7 "host cost per" $OUT/r/dec-$lib-$pass.log | tail -6 | sed "s/^/$lib $pass /"
done; done
for lib in h2 h4; do
  env -u OUT LD_LIBRARY_PATH=$PWD/build/$lib timeout 150 build/bench/moegemm-bench --only mixtral-fc1-prefill4k,qwen3moe-fc2-prefill4k --json $OUT/r/pre-$lib.json > $OUT/r/pre-$lib.log 2>&1
  echo "prefill $lib rc=$? at $((SECONDS - T0)) s"; grep -E "libmoegemm\[auto\] +[0-9]" $OUT/r/pre-$lib.log | sed "s/^/$lib /"
done
cd $OUT && tar czf all.tgz r && rm -rf r
