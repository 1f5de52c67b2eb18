#!/usr/bin/env bash
# The GPU machine's work in one call, over a build configured elsewhere and carried along
# (build/): the GPU tests under ctest, compute-sanitizer over them, moegemm-bench on the
# built-in workloads, and bench/compare_torch.py. Logs and JSON go to $OUT (default gpu-out/).
#
#   tests/gpu_session.sh                 # every stage
#   tests/gpu_session.sh tests bench     # chosen stages: tests stress sass sanitize bindings bench torch
#                                        # fp8, layer (MoE layer: tests and benches),
#                                        # ab (two builds), multi_gpu (2 GPUs), soak, profile
#                                        # (ncu); none is
#                                        # part of the default
#   MOEGEMM_BENCH_ROUNDS=3 tests/gpu_session.sh bench fp8   # recorded runs: rounds of each row
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MOEGEMM_BUILD_DIR:-$root/build}"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests stress sass sanitize bindings bench torch)
failed=()

# CTest files hold the absolute source and build paths of the machine that configured them:
# make those paths lead here when this checkout lives elsewhere.
configured_src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
if [ -n "$configured_src" ] && [ "$configured_src" != "$root" ] && [ ! -e "$configured_src" ]; then
  mkdir -p "$(dirname "$configured_src")" && ln -s "$root" "$configured_src"
fi

run_stage() {  # name, command...
  local name="$1"; shift
  echo "=== $name: $*" | tee -a "$out/session.log"
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$out/session.log"
  [ $rc -eq 0 ] || failed+=("$name")
  tail -n 25 "$out/$name.log"
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv \
  >"$out/device.txt" 2>&1
cat "$out/device.txt"

# The commit the build was made from (written by each build, bench/CMakeLists.txt): the
# device's copy of the checkout may carry stale git metadata.
commit="$(cat "$build/source-commit.txt" 2>/dev/null ||
  git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export MOEGEMM_GIT_COMMIT="${MOEGEMM_GIT_COMMIT:-$commit}"
export PYTHONUNBUFFERED=1
export MOEGEMM_REQUIRE_GPU=1  # here a missing GPU fails the GPU tests instead of skipping them

# Rounds of the bench and fp8 stages (moegemm-bench --rounds): 3 for recorded runs, where one
# round can read a slow stretch of libmoegemm's kernels (the power cap) as a difference between
# rows.
bench_rounds="${MOEGEMM_BENCH_ROUNDS:-1}"

# When the stress stage runs, it runs gpu.stress (its whole output logged), not ctest.
ctest_exclude=()
[[ " ${stages[*]} " == *" stress "* ]] && ctest_exclude=(--exclude-regex '^gpu\.stress$')

for stage in "${stages[@]}"; do
  case "$stage" in
    tests)
      # Packaging tests need the build machine's toolchain paths and the fuzzers its clang: CI
      # runs them. The bindings stage runs the bindings against this machine's Python, the
      # sass stage the SASS check (its CTest entry names the build machine's python3).
      run_stage ctest ctest --test-dir "${configured_src:-$root}/build" --output-on-failure \
        ${ctest_exclude[@]+"${ctest_exclude[@]}"} \
        --label-exclude "packaging|fuzz|bindings|sass|soak" ;;
    soak)
      # Ten minutes (MOEGEMM_SOAK_SECONDS) of random problems on four threads, eager and as
      # graph replays, plans made and dropped throughout; ends with the counts and the memory
      # figures for tests/RELIABILITY.md.
      run_stage soak env MOEGEMM_SOAK_SECONDS="${MOEGEMM_SOAK_SECONDS:-600}" \
        "$build/tests/moegemm_gpu_tests" "[.soak]" --durations yes ;;
    stress)
      # Thousands of random problems against the GPU reference (MOEGEMM_STRESS_CASES and
      # MOEGEMM_STRESS_SEED pass through) with its oracle's self-test, then the concurrency
      # tests (8 threads, one plan on two streams, determinism, two-GPU misuse when the machine
      # has two). The logs end with the counts for tests/RELIABILITY.md.
      run_stage stress "$build/tests/moegemm_gpu_tests" "[stress],[oracle]" --durations yes
      run_stage concurrency "$build/tests/moegemm_gpu_tests" "[concurrency]" --durations yes ;;
    sanitize)
      # memcheck, synccheck and initcheck over the whole GPU suite but [stress] (thousands of
      # problems: too slow under a sanitizer; its oracle's self-test, [oracle], stays in);
      # racecheck over the native kernels only (MOEGEMM_TEST_BACKENDS=native): cuBLASLt's
      # kernels make racecheck fail inside the sanitizer on sm_90 ("failed to handle a hardware
      # exception"). Catch's "~[large]~[stress]" excludes both tags ("~[large],~[stress]" would
      # be an "or").
      # Each tool gets at most MOEGEMM_SANITIZE_SECONDS (default 300): a tool that runs away
      # fails its stage (exit 124) instead of eating the session.
      # initcheck and racecheck are the slow tools: they leave out the multi-threaded
      # [concurrency] tests too (memcheck and synccheck cover them).
      limit="${MOEGEMM_SANITIZE_SECONDS:-300}"
      for tool in memcheck synccheck; do
        run_stage "sanitize-$tool" timeout "$limit" compute-sanitizer --tool "$tool" \
          --error-exitcode 1 "$build/tests/moegemm_gpu_tests" "~[large]~[stress]"
      done
      run_stage sanitize-initcheck timeout "$limit" compute-sanitizer --tool initcheck \
        --error-exitcode 1 "$build/tests/moegemm_gpu_tests" "~[large]~[stress]~[concurrency]"
      MOEGEMM_TEST_BACKENDS=native run_stage sanitize-racecheck timeout "$limit" \
        compute-sanitizer --tool racecheck --error-exitcode 1 "$build/tests/moegemm_gpu_tests" \
        "~[large]~[stress]~[concurrency]" ;;
    sass)
      # The native kernels must run on wgmma and keep everything in registers: the check CI
      # runs too (tests/sass_check.py), here with the GPU machine's cuobjdump.
      run_stage sass python3 "$root/tests/sass_check.py" "$(command -v cuobjdump)" \
        "$build/libmoegemm.so" ;;
    bindings)
      # The examples, the Python binding's GPU tests and the Rust example, against this build.
      run_stage examples ctest --test-dir "${configured_src:-$root}/build" -L examples --output-on-failure
      run_stage python env MOEGEMM_LIBRARY="$build/libmoegemm.so" PYTHONPATH="$root/bindings/python" \
        python3 -m pytest -q -rs -p no:cacheprovider "$root/bindings/python/tests"
      # The Rust example is built by `ctest -L bindings` on the build machine (no cargo here).
      rust_example="$build/rust-target/release/examples/grouped_gemm"
      if [ -x "$rust_example" ]; then
        run_stage rust env LD_LIBRARY_PATH="$build" "$rust_example"
      else
        echo "=== rust: $rust_example not built (run ctest -L bindings before carrying build/)"
        failed+=(rust)
      fi ;;
    bench)
      run_stage bench "$build/bench/moegemm-bench" --check --rounds "$bench_rounds" \
        --workloads "$root/bench/workloads/moe.txt" --json "$out/bench.json" ;;
    layer)
      # The MoE layer and the fused epilogues: their GPU tests, what the fused operations cost
      # (FC1 with SwiGLU and with a gather against the plain FC1), and the whole layer against
      # vLLM's Triton fused_moe (prepared on the build machine into build-peers/vllm by
      # bench/tools/fetch_vllm_fused_moe.sh and carried along) and the unfused PyTorch layer.
      run_stage layer-tests "$build/tests/moegemm_gpu_tests" \
        "[epilogue],[cublaslt_epilogue],[moe_layer],[moe_routing]" --durations yes
      run_stage epilogue-cost env MOEGEMM_LIBRARY="$build/libmoegemm.so" \
        PYTHONPATH="$root/bindings/python" python3 "$root/bench/epilogue_cost.py" \
        --json "$out/epilogue_cost.json"
      run_stage layer-bench env MOEGEMM_LIBRARY="$build/libmoegemm.so" \
        PYTHONPATH="$root/bindings/python" python3 "$root/bench/moe_layer.py" \
        --lib "$build/libmoegemm.so" --json "$out/moe_layer.json" ;;
    torch)
      run_stage torch python3 "$root/bench/compare_torch.py" --lib "$build/libmoegemm.so" \
        --workloads "$root/bench/workloads/moe.txt" --json "$out/compare_torch.json" ;;
    fp8)
      # E4M3 inputs (issue 6): moegemm-bench in the block-scaled and rowwise modes (with the
      # cuBLASLt per-tensor baseline where it serves), and compare_torch.py --fp8 against
      # torch._scaled_grouped_mm (rowwise).
      # (OUT unset for the bench: it would also write $OUT/bench.json, the bf16 stage's file.)
      for mode in block rowwise per_tensor; do
        run_stage "bench-fp8-$mode" env -u OUT "$build/bench/moegemm-bench" --check \
          --rounds "$bench_rounds" --dtype e4m3 \
          --scale-mode "$mode" --workloads "$root/bench/workloads/moe.txt" \
          --json "$out/bench-fp8-$mode.json"
      done
      run_stage torch-fp8 env -u OUT python3 "$root/bench/compare_torch.py" --fp8 --lib "$build/libmoegemm.so" \
        --workloads "$root/bench/workloads/moe.txt" --json "$out/compare_torch_fp8.json" ;;
    ab)
      # Two versions of the library in one run, interleaved A B B A, on MOEGEMM_AB_WORKLOADS
      # (comma-separated names; default all), with the bench options in MOEGEMM_AB_ARGS (e.g.
      # "--dtype e4m3 --scale-mode block"); logs and JSON are named $MOEGEMM_AB_TAG-a-1...
      # (default ab), so that one session can hold several A/Bs. Either two builds: this
      # build's moegemm-bench with this build's library (A) and with the libmoegemm.so.0 in the
      # folder MOEGEMM_AB_LIB (B, carried along; a release build serves in place of the testing
      # build the bench links, with the default options); or one build and a setting: A with
      # the bench options in MOEGEMM_AB_SET (e.g. "--set host_schedule=0"), B without them.
      # bench/tools/ab_compare.py summarizes the JSON.
      b_env=()
      a_args=()
      if [ -n "${MOEGEMM_AB_LIB:-}" ] && [ -e "$MOEGEMM_AB_LIB/libmoegemm.so.0" ]; then
        b_lib="$(mktemp -d)"
        ln -s "$(cd "$MOEGEMM_AB_LIB" && pwd)/libmoegemm.so.0" "$b_lib/libmoegemm_testing.so"
        b_env=(LD_LIBRARY_PATH="$b_lib")
      elif [ -n "${MOEGEMM_AB_SET:-}" ]; then
        read -r -a a_args <<<"$MOEGEMM_AB_SET"
      fi
      if [ ${#a_args[@]} -eq 0 ] && [ ${#b_env[@]} -eq 0 ]; then
        echo "=== ab: set MOEGEMM_AB_LIB (a folder with libmoegemm.so.0) or MOEGEMM_AB_SET"
        failed+=(ab)
      else
        tag="${MOEGEMM_AB_TAG:-ab}"
        mkdir -p "$out/ab-json"  # packed with the logs: the device tool returns 8 files
        read -r -a ab_args <<<"${MOEGEMM_AB_ARGS:-}"
        [ -n "${MOEGEMM_AB_WORKLOADS:-}" ] && ab_args+=(--only "$MOEGEMM_AB_WORKLOADS")
        echo "A: this build ${a_args[*]:-}; B: ${b_env[*]:-this build}" | tee "$out/$tag-setup.txt"
        env ${b_env[@]+"${b_env[@]}"} ldd "$build/bench/moegemm-bench" | grep moegemm \
          | tee -a "$out/$tag-setup.txt"
        for run in a-1 b-1 b-2 a-2; do
          side_env=()
          side_args=(${a_args[@]+"${a_args[@]}"})
          if [ "${run%-*}" = b ]; then
            side_env=(${b_env[@]+"${b_env[@]}"})
            side_args=()
          fi
          run_stage "$tag-$run" env -u OUT ${side_env[@]+"${side_env[@]}"} \
            "$build/bench/moegemm-bench" --workloads "$root/bench/workloads/moe.txt" \
            ${ab_args[@]+"${ab_args[@]}"} ${side_args[@]+"${side_args[@]}"} \
            --json "$out/ab-json/$tag-$run.json"
        done
        python3 "$root/bench/tools/ab_compare.py" "$out/ab-json/$tag" | tee "$out/$tag-summary.txt"
      fi ;;
    multi_gpu)
      # The misuse cases that need two GPUs (a stream, workspace or D of the other device):
      # run on an nvidia-h200-x2 machine; on one GPU they only warn.
      run_stage multi_gpu "$build/tests/moegemm_gpu_tests" "[multi_gpu]" --success ;;
    profile)
      # ncu on one launch of the library's kernel per workload in MOEGEMM_PROFILE_WORKLOADS
      # (default balanced-8x4096-m2048; MOEGEMM_PROFILE_ARGS adds bench options, e.g.
      # "--dtype e4m3 --scale-mode rowwise"): speed of light, warp states, and the SASS lines where
      # warps stall (source page, CSV), at the clocks the GPU chooses itself.
      for w in ${MOEGEMM_PROFILE_WORKLOADS:-balanced-8x4096-m2048}; do
        run_stage "profile-$w" ncu --clock-control none -k regex:sm90_grouped --launch-skip 20 \
          --launch-count 1 --section SpeedOfLight --section WarpStateStats \
          --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
          --import-source yes -f -o "$out/profile-$w" \
          env -u OUT "$build/bench/moegemm-bench" --workloads "$root/bench/workloads/moe.txt" --only "$w" \
          --reps 30 --min-time 1 --warmup 100 ${MOEGEMM_PROFILE_ARGS:-}
        ncu -i "$out/profile-$w.ncu-rep" --page details >"$out/profile-$w-details.txt" 2>&1
        ncu -i "$out/profile-$w.ncu-rep" --page source --csv --print-source sass \
          >"$out/profile-$w-sass.csv" 2>&1
        rm -f "$out/profile-$w.ncu-rep"
      done ;;
    *) echo "unknown stage $stage (tests stress sass sanitize bindings bench torch fp8 ab multi_gpu profile)"; failed+=("$stage") ;;
  esac
done

# The device tool returns at most 8 files from $OUT: pack the logs into one archive, named
# after the stages (and the A/B's tag) so that several invocations in one call keep theirs.
if [ -n "${OUT:-}" ]; then
  archive="logs-$(IFS=-; echo "${stages[*]}")${MOEGEMM_AB_TAG:+-$MOEGEMM_AB_TAG}.tgz"
  (cd "$out" && shopt -s nullglob && tar czf "$archive" ./*.log ./*.txt ./*.csv ./ab-json* &&
    rm -rf ./*.log ./*.txt ./*.csv ./ab-json)
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED stages: ${failed[*]}"
  exit 1
fi
echo "all stages passed"
