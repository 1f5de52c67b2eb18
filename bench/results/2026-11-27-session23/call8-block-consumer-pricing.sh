# Session 23, call 8 (timing only, wrong results): BLOCK with the scale warps off AND consumers
# that read no slot (constant scales from a run-time value, no slot arrivals) = build/nr,
# against per-tensor on HEAD's kernels (build/new); control: build/nr per-tensor vs HEAD.
tar -xJf .peers/pack/nr.tar.xz
N=$PWD/build/new; R=$PWD/build/nr
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k
BENCH_TIMEOUT=100
source bench/tools/ab_bench.sh
ab x "$R" "$N" block per_tensor
bench "$R" "$OUT/r/c-a-1.json" per_tensor; bench "$N" "$OUT/r/c-b-1.json" per_tensor
python3 bench/tools/ab_compare.py "$OUT/r/c" | tee "$OUT/r/c.txt"
finish
