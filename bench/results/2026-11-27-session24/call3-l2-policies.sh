# Session 24, call 3: L2 policies of the decode weight and token copies under read and write
# flushes (bench/tools/l2_writeback.py) on build/xl2b (HEAD + MOEGEMM_X_STAGES / X_WPOLICY /
# X_APOLICY knobs: weights 0 evict_first, 1 no hint, 2 evict_first 0.5, 3 0.25, 5 evict_normal,
# 7 evict_first 0.75; tokens 0 no hint, 1 evict_last, 2 evict_normal).
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/call3.tar.xz
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
timeout 400 python3 bench/tools/l2_writeback.py --lib build/xl2b/libmoegemm.so --only $DEC --reps 40 --flushes read,write \
  --configs base,w1=MOEGEMM_X_WPOLICY:1,w5=MOEGEMM_X_WPOLICY:5,w7=MOEGEMM_X_WPOLICY:7,w2=MOEGEMM_X_WPOLICY:2,w3=MOEGEMM_X_WPOLICY:3,w1a1=MOEGEMM_X_WPOLICY:1+MOEGEMM_X_APOLICY:1,w2a1=MOEGEMM_X_WPOLICY:2+MOEGEMM_X_APOLICY:1,a1=MOEGEMM_X_APOLICY:1 \
  --json $OUT/r/l2.json > $OUT/r/l2.txt 2>&1
echo "l2 rc=$? at $((SECONDS - T0)) s"; cat $OUT/r/l2.txt
cd $OUT && tar czf all.tgz r && rm -rf r
