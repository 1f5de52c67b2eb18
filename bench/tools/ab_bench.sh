# Helpers for device A/B calls, sourced by the call scripts under bench/results/. Before
# sourcing, set WL (moegemm-bench --only); optionally BENCH_TIMEOUT (s per run, default 150).
# Results go to $OUT/r; `finish` packs them into $OUT/all.tgz (the device returns few files).
#   bench LIB JSON SCALE_MODE       one fp8 moegemm-bench run (--rounds 2) on LIB's library
#   ab NAME LIB_A LIB_B MODE [MODE_B]
#                                   A B B A (B in MODE_B if given), then ab_compare.py
#                                   (negative: A faster), printed and kept as $OUT/r/NAME.txt
set -u
export PYTHONUNBUFFERED=1
T0=$SECONDS
mkdir -p "$OUT/r"
bench() {
  env -u OUT LD_LIBRARY_PATH="$1" timeout "${BENCH_TIMEOUT:-150}" build/bench/moegemm-bench \
    --only "$WL" --dtype e4m3 --scale-mode "$3" --rounds 2 --json "$2" > /dev/null 2>&1
  echo "$2 rc=$? at $((SECONDS - T0)) s"
}
ab() {
  local mode_b=${5:-$4}
  bench "$2" "$OUT/r/$1-a-1.json" "$4"; bench "$3" "$OUT/r/$1-b-1.json" "$mode_b"
  bench "$3" "$OUT/r/$1-b-2.json" "$mode_b"; bench "$2" "$OUT/r/$1-a-2.json" "$4"
  python3 bench/tools/ab_compare.py "$OUT/r/$1" | tee "$OUT/r/$1.txt"
}
finish() {
  cd "$OUT" && tar czf all.tgz r && rm -rf r
}
