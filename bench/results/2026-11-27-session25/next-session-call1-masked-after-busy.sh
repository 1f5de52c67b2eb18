# For session 26's first device call (written in session 25 after the device time was spent;
# bench/tools/masked_after_busy.cu has not run yet). Build it here first:
#   nvcc -O2 -std=c++17 -arch=sm_90a -Iinclude -Ibench/tools bench/tools/masked_after_busy.cu \
#        -Lbuild -lmoegemm -o build/s25/masked_after_busy
# and carry .peers/pack/next.tar.xz (main's library as build/h2), build/s25/masked_after_busy
# and build/examples (the C++ examples were refactored onto examples/cpp/example_support.hpp
# after the device time was spent: built, not run on a GPU yet).
# It times a dsv3ep8-fc2-shaped MASKED plan (device sizes) and a VARIABLE one (host sizes) from
# an idle GPU, right after a batch of resident do-nothing kernels, once more, and after another
# batch (NOTES §44: moegemm-bench's MASKED row ran up to 10% slower after such batches).
tar -xJf .peers/pack/next.tar.xz
for ex in quickstart masked_device_sizes cuda_graph; do
  LD_LIBRARY_PATH=$PWD/build/h2 timeout 60 build/examples/$ex | tail -2; echo "$ex rc=$?"
done
for run in 1 2; do LD_LIBRARY_PATH=$PWD/build/h2 timeout 150 build/s25/masked_after_busy; done
