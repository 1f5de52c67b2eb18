# Session 26, call 11: the review mends on the GPU (library 3770244 as build/h3 from
# .peers/pack/s26.tar.xz): the whole GPU suite (new: DEVICE sizes in pageable host memory
# refused, pinned accepted), the Python binding's tests (new GPU tests: one plan on two
# streams, the cache's retire, fp8 scale checks) and the C/C++ examples (moegemm_problem_init
# now a macro over moegemm_problem_init_sized).
set -u
tar -xJf .peers/pack/s26.tar.xz
H=$PWD/build/h3; mkdir -p $OUT/r
LD_LIBRARY_PATH=$H MOEGEMM_REQUIRE_GPU=1 timeout 280 $H/moegemm_gpu_tests > $OUT/r/suite.txt 2>&1; echo "suite rc=$?"; tail -3 $OUT/r/suite.txt
LD_LIBRARY_PATH=$H timeout 60 $H/moegemm_gpu_tests "set_expert_sizes: DEVICE sizes in pageable host memory are refused" > $OUT/r/new-api-test.txt 2>&1; echo "new api test rc=$?"; tail -2 $OUT/r/new-api-test.txt
MOEGEMM_LIBRARY=$H/libmoegemm.so PYTHONPATH=build/bindings/python/pydeps:bindings/python timeout 150 python3 -m pytest -q -rs -p no:cacheprovider bindings/python/tests > $OUT/r/python.txt 2>&1; echo "python rc=$?"; tail -6 $OUT/r/python.txt
for ex in quickstart masked_device_sizes cuda_graph; do LD_LIBRARY_PATH=$H timeout 60 build/examples/$ex > $OUT/r/ex-$ex.txt 2>&1; echo "$ex rc=$?"; done
tar -czf $OUT/all.tgz -C $OUT r
