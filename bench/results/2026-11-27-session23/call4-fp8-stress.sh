# Session 23, call 4: the E4M3 oracle test, [stress] with its new E4M3 cases (default 25%, then
# 3000 cases all E4M3), and [fp8] (its reference now dequantizes through support code).
set -u
T0=$SECONDS
mkdir -p "$OUT/r"
tar -xJf .peers/pack/head.tar.xz
export LD_LIBRARY_PATH=$PWD/build/new
t() {  # NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" stdbuf -oL build/tests/moegemm_gpu_tests "$@" > "$OUT/r/$name.txt" 2>&1
  echo "$name rc=$? at $((SECONDS - T0)) s"; tail -3 "$OUT/r/$name.txt"
}
t oracle 120 "[oracle]" --durations yes
t stress 200 "[stress]"
MOEGEMM_STRESS_E4M3=1 MOEGEMM_STRESS_CASES=3000 MOEGEMM_STRESS_SEED=777 t stress-e4m3 200 "[stress]"
grep -A40 "summary" "$OUT/r/stress-e4m3.txt" | head -60
t fp8 260 "[fp8]" --durations yes
cd "$OUT" && tar czf all.tgz r && rm -rf r
