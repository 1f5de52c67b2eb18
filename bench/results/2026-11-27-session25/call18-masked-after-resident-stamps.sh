# Session 25, call 18: why the MASKED row ran up to 10% slower after batches of resident
# do-nothing kernels (NOTES §44). Phase-stamp build of main's library (build/s25/stamps) under
# db41dc9's moegemm-bench ("old": no resident bare launches) and 85adf39's ("between": resident
# bare launches right after the eager host cost), old between old between, on
# dsv3ep8-fc2-decode128; the stamps of each plan's last launch go to $OUT/<bench>-<n>.txt.
T0=$SECONDS; mkdir -p $OUT/r
S=$PWD/build/s25/stamps
n=0
for b in old between old between; do
  n=$((n + 1))
  env -u OUT MOEGEMM_PHASE_STAMPS=$OUT/r/$b-$n.txt LD_LIBRARY_PATH=$S timeout 100 build/s25/moegemm-bench-$b \
    --only dsv3ep8-fc2-decode128 > $OUT/r/$b-$n.log 2>&1
  echo "$b $n rc=$? at $((SECONDS - T0)) s"; grep -E "libmoegemm\[(masked|auto|graph)\] +[0-9]" $OUT/r/$b-$n.log
  python3 bench/tools/phase_stamps.py $OUT/r/$b-$n.txt > $OUT/r/$b-$n.summary.txt 2>&1
done
cd $OUT && tar czf all.tgz r && rm -rf r
