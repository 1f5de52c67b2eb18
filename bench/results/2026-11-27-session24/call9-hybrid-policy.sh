# Session 24, call 9: decode weights copied without an L2 hint for the first N copies of each
# CTA (enough to push an L2 of dirty lines out once), evict-first after (MOEGEMM_X_WPOLICY=8,
# MOEGEMM_X_NFIRST=N on build/xl2d), against evict-first throughout (base) and no hint (w1),
# after read and write flushes (bench/tools/l2_writeback.py).
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/call9.tar.xz
L=$PWD/build/xl2d
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
timeout 200 python3 bench/tools/l2_writeback.py --lib $L/libmoegemm.so --only $DEC --reps 40 --flushes read,write \
  --configs base,w1=MOEGEMM_X_WPOLICY:1,h16=MOEGEMM_X_WPOLICY:8+MOEGEMM_X_NFIRST:16,h32=MOEGEMM_X_WPOLICY:8+MOEGEMM_X_NFIRST:32,h64=MOEGEMM_X_WPOLICY:8+MOEGEMM_X_NFIRST:64,h128=MOEGEMM_X_WPOLICY:8+MOEGEMM_X_NFIRST:128 \
  --json $OUT/r/l2.json > $OUT/r/l2.txt 2>&1; echo "l2 rc=$? at $((SECONDS - T0)) s"; cat $OUT/r/l2.txt
MOEGEMM_X_WPOLICY=8 MOEGEMM_X_NFIRST=32 LD_LIBRARY_PATH=$L timeout 30 build/tests/moegemm_gpu_tests "[stress]" > $OUT/r/stress.txt 2>&1; echo "stress rc=$?: $(tail -2 $OUT/r/stress.txt | tr '\n' ' ')"
cd $OUT && tar czf all.tgz r && rm -rf r
