# Session 26, call 3: the box stream with a token box per stage (weight_order.cu's new rows),
# then moegemm-bench's decode rows on the same machine (main's library, build/h2).
mkdir -p $OUT/r
tar -xJf .peers/pack/next.tar.xz
timeout 200 build/s26/weight_order > $OUT/r/weight_order.txt 2>&1; echo "rc=$?"; grep -E "^[a-z]|order 0|token box|bursts" $OUT/r/weight_order.txt
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
env -u OUT LD_LIBRARY_PATH=$PWD/build/h2 timeout 200 build/bench/moegemm-bench --only $DEC --rounds 1 --json $OUT/r/bench.json > $OUT/r/bench.log 2>&1; echo "bench rc=$?"
grep -E "decode|library" $OUT/r/bench.log | head -40
