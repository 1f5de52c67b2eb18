#!/usr/bin/env bash
# A device call prepared in session 22 (NOTES §41b, §41c), for the next session. Run from the repo
# root on the device with the libraries built from main (build/new: HEAD's kernels) and from the
# three patches beside this script (build/exp-slotwarp, build/exp-noscale, build/exp-fmaf; the
# last two are timing-only: wrong results, no --check). Carry: build/new build/exp-slotwarp
# build/exp-noscale build/exp-fmaf build/bench/moegemm-bench.
#   MOEGEMM_GIT_COMMIT=<head> bash bench/results/2026-11-27-session22/run-next-session-call1.sh
WL=mixtral-fc2-prefill4k,balanced-8x4096-m2048,dsv3ep8-fc2-prefill4k
BENCH_TIMEOUT=100
source bench/tools/ab_bench.sh
N=$PWD/build/new
ab slotwarp "$PWD/build/exp-slotwarp" "$N" block   # §41b: one slot arrival per warp
ab noscale "$PWD/build/exp-noscale" "$N" block     # §41c (3): scale warps off
ab fmaf "$PWD/build/exp-fmaf" "$N" per_tensor      # §41c (2): per-tensor promotion as FFMA
finish
