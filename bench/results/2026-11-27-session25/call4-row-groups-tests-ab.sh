# Session 25, call 4: swap-AB weights through the 4-D map of 8-row groups (build/h3 = 1e01dba)
# against db41dc9 (build/h2): GPU tests on h3 (the unhinted-copies test with the harness fix,
# [stress] 16-bit and E4M3, [device_sizes], the whole suite but [stress]/[large]), memcheck on
# the decode-shaped tests, then l2_writeback.py on both libraries (read and write flush) twice.
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/s25.tar.xz
H=$PWD/build/h3
DEC=mixtral-fc1-decode64,mixtral-fc2-decode64,dsv3ep8-fc1-decode128,dsv3ep8-fc2-decode128,qwen3moe-fc1-decode64,qwen3moe-fc2-decode64
t() { env "${@:4}" LD_LIBRARY_PATH=$H timeout $2 build/tests/moegemm_gpu_tests "$3" > $OUT/r/$1.txt 2>&1
      echo "$1 rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$1.txt | tr '\n' ' ')"; }
t unhinted 60 "decode: unhinted first weight copies*"
t stress 60 "[stress]"
t stress-e4m3 90 "[stress]" MOEGEMM_STRESS_E4M3=1
t device-sizes 60 "[device_sizes]"
t suite 150 "~[large]~[stress]"
LD_LIBRARY_PATH=$H timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 build/tests/moegemm_gpu_tests "[device_sizes]" > $OUT/r/memcheck.txt 2>&1
echo "memcheck rc=$? at $((SECONDS - T0)) s: $(tail -3 $OUT/r/memcheck.txt | tr '\n' ' ')"
for pass in 1 2; do for lib in h2 h3; do
  timeout 60 python3 bench/tools/l2_writeback.py --lib $PWD/build/$lib/libmoegemm.so --only $DEC --reps 40 --flushes read,write \
    --configs $lib > $OUT/r/l2-$lib-$pass.txt 2>&1; echo "l2 $lib $pass rc=$? at $((SECONDS - T0)) s"
done; done
for f in $OUT/r/l2-*.txt; do echo "## $f"; grep -v "write - read\|bmm_padded\|grouped_mm" $f; done
cd $OUT && tar czf all.tgz r && rm -rf r
