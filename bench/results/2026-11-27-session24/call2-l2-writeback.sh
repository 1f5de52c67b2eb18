# Session 24, call 2: the write-flush experiment (bench/tools/l2_writeback.py) on build/xl2 (HEAD +
# MOEGEMM_X_STAGES / MOEGEMM_X_WPOLICY knobs); call 1's run of it failed at import.
T0=$SECONDS; mkdir -p $OUT/r
[ -d build/xl2 ] || tar -xJf .peers/pack/call1.tar.xz
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
timeout 400 python3 bench/tools/l2_writeback.py --lib build/xl2/libmoegemm.so --only $DEC --reps 30 \
  --configs base,s4=MOEGEMM_X_STAGES:4,s3=MOEGEMM_X_STAGES:3,nohint=MOEGEMM_X_WPOLICY:1,nohint-s4=MOEGEMM_X_WPOLICY:1+MOEGEMM_X_STAGES:4 \
  --json $OUT/r/l2.json > $OUT/r/l2.txt 2>&1
echo "l2 rc=$? at $((SECONDS - T0)) s"; cat $OUT/r/l2.txt
cd $OUT && tar czf all.tgz r && rm -rf r
