#!/usr/bin/env bash
# A device call prepared in session 22 (NOTES §41b, §41c), for the next session. Run from the repo
# root on the device with the libraries built from main (build/new: HEAD's kernels) and from the
# three patches beside this script (build/exp-slotwarp, build/exp-noscale, build/exp-fmaf; the
# last two are timing-only: wrong results, no --check). Carry: build/new build/exp-slotwarp
# build/exp-noscale build/exp-fmaf build/bench/moegemm-bench.
#   MOEGEMM_GIT_COMMIT=<head> bash bench/results/2026-11-27-session22/run-next-session-call1.sh
set -u
export PYTHONUNBUFFERED=1
T0=$SECONDS
mkdir -p "$OUT/r"
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k
bench() {  # LIB JSON SCALE_MODE
  env -u OUT LD_LIBRARY_PATH="$1" timeout 100 build/bench/moegemm-bench --only "$WL" \
    --dtype e4m3 --scale-mode "$3" --rounds 2 --json "$2" > /dev/null 2>&1
  echo "$2 rc=$? at $((SECONDS - T0)) s"
}
ab() {  # NAME LIB_A LIB_B SCALE_MODE   (A B B A; negative: A faster)
  bench "$2" "$OUT/r/$1-a-1.json" "$4"; bench "$3" "$OUT/r/$1-b-1.json" "$4"
  bench "$3" "$OUT/r/$1-b-2.json" "$4"; bench "$2" "$OUT/r/$1-a-2.json" "$4"
  python3 bench/tools/ab_compare.py "$OUT/r/$1" | tee "$OUT/r/$1.txt"
}
N=$PWD/build/new
ab slotwarp "$PWD/build/exp-slotwarp" "$N" block   # §41b: one slot arrival per warp
ab noscale "$PWD/build/exp-noscale" "$N" block     # §41c (3): scale warps off
ab fmaf "$PWD/build/exp-fmaf" "$N" per_tensor      # §41c (2): per-tensor promotion as FFMA
cd "$OUT" && tar czf all.tgz r && rm -rf r
