# Session 24, call 11: host cost of moegemm_execute (moegemm-bench, two decode workloads) beside
# a bare launch of the same parameter size (bench/tools/launch_cost), twice, interleaved.
tar -xJf .peers/pack/call10.tar.xz build/h
for i in 1 2; do
  timeout 40 build/tools/launch_cost 2>&1 | head -12
  env -u OUT LD_LIBRARY_PATH=$PWD/build/h timeout 40 build/bench/moegemm-bench --only mixtral-fc2-decode64,qwen3moe-fc2-decode64 2>&1 | sed -n '/host cost per/,/^$/p'
done
