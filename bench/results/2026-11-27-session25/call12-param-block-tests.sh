# Session 25, call 12: a60d560 (build/h4: 388 ints of host sizes in the parameters, more experts'
# host sizes copied into the workspace): the new tests first, the whole GPU suite, then memcheck
# and initcheck of the tests that take the copy path.
T0=$SECONDS; mkdir -p $OUT/r
tar -xJf .peers/pack/s25b.tar.xz
H=$PWD/build/h4
t() { env "${@:4}" LD_LIBRARY_PATH=$H MOEGEMM_REQUIRE_GPU=1 timeout $2 build/tests/moegemm_gpu_tests "$3" > $OUT/r/$1.txt 2>&1
      echo "$1 rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$1.txt | tr '\n' ' ')"; }
t copied 120 "host sizes of more experts than*"
t schedule 120 "host schedule: every layout*"
t suite 400 "*"
grep -B3 -A25 FAILED $OUT/r/suite.txt | head -60
for tool in memcheck initcheck; do
  LD_LIBRARY_PATH=$H timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 build/tests/moegemm_gpu_tests "host sizes of more experts than*" > $OUT/r/$tool.txt 2>&1
  echo "$tool rc=$? at $((SECONDS - T0)) s: $(tail -2 $OUT/r/$tool.txt | tr '\n' ' ')"
done
cd $OUT && tar czf all.tgz r && rm -rf r
