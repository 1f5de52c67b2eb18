#!/usr/bin/env python3
"""Summarizes an A/B of moegemm-bench runs (tests/gpu_session.sh, stage ab).

    bench/tools/ab_compare.py PREFIX

reads PREFIX-a-*.json and PREFIX-b-*.json (moegemm-bench --json) and prints, for each workload
and each libmoegemm row (eager, graph, MASKED, forced kernels), the median time of every run of
each side, their means and the change from B to A in percent (negative: A faster). Rows a
side did not measure, or measured with a failed check, are left out and counted at the end.
"""
import glob
import json
import statistics
import sys


def load(paths):
    """{(workload, backend): [median_us, ...]} over the runs in `paths`."""
    times, skipped = {}, 0
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        for w in run["workloads"]:
            checks_failed = any(c.get("compared") and not c.get("passed")
                                for c in w.get("checks", []))
            for b in w["backends"]:
                if not b["backend"].startswith(("library", "kernel:")):
                    continue
                if "median_us" not in b or not b.get("ok", True) or checks_failed:
                    skipped += 1
                    continue
                times.setdefault((w["name"], b["backend"]), []).append(b["median_us"])
    return times, skipped


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    prefix = sys.argv[1]
    a_paths = sorted(glob.glob(prefix + "-a-*.json"))
    b_paths = sorted(glob.glob(prefix + "-b-*.json"))
    if not a_paths or not b_paths:
        print(f"ab_compare: no {prefix}-a-*.json or {prefix}-b-*.json", file=sys.stderr)
        return 1
    a, a_skipped = load(a_paths)
    b, b_skipped = load(b_paths)
    print(f"A: {len(a_paths)} run(s), B: {len(b_paths)} run(s); µs (each run), means, A vs B")
    for key in sorted(set(a) & set(b)):
        workload, backend = key
        ma, mb = statistics.mean(a[key]), statistics.mean(b[key])
        runs_a = "/".join(f"{t:.1f}" for t in a[key])
        runs_b = "/".join(f"{t:.1f}" for t in b[key])
        print(f"{workload:24s} {backend:34s} B {mb:9.1f} ({runs_b})  A {ma:9.1f} ({runs_a})"
              f"  {100 * (ma / mb - 1):+6.1f}%")
    if a_skipped or b_skipped:
        print(f"left out (not measured or failed): A {a_skipped}, B {b_skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
