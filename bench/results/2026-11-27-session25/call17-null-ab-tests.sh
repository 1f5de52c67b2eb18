# Session 25, call 17: the review-mended tests on main's library (build/h2); host_cost_ab's null
# test (build/h2 against build/h2b, a copy of the same file) and a60d560 (build/h4) against
# build/h2 again with the pair order alternating; launch_cost's parameter-block A/B at the real
# sizes (4896 / 2352 bytes).
tar -xJf .peers/pack/s25d.tar.xz; H=$PWD/build/h2
for f in "decode: unhinted first weight copies*" "host sizes of up to 1024 experts*"; do
  LD_LIBRARY_PATH=$H MOEGEMM_REQUIRE_GPU=1 timeout 200 build/tests/moegemm_gpu_tests "$f" 2>&1 | tail -2 | head -1
done
for pair in "h2 h2b" "h2b h2" "h2 h4" "h4 h2" "h2 h4"; do
  set -- $pair; echo "A=$1 B=$2"; timeout 100 build/s25/host_cost_ab $PWD/build/$1/libmoegemm.so $PWD/build/$2/libmoegemm.so
done
timeout 200 build/s25/launch_cost 2>&1 | grep -m1 "parameter block"
