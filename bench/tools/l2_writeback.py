#!/usr/bin/env python3
"""What the dirty lines of a write flush cost a decode launch, and what changes it.

Times libmoegemm (VARIABLE plans, host sizes) and padded torch.bmm / torch._grouped_mm on
decode workloads after three ways of clearing L2 before each repetition:
  read        sum a 256 MB buffer (L2 ends clean)
  write       zero a 256 MB buffer (L2 ends full of dirty lines; triton's do_bench does this)
  write-idle  zero it, then let the GPU idle ~IDLE_US before the timed call (does L2 write its
              dirty lines back on its own, or only when reads evict them?)
Library configurations are environment settings read at plan creation (`--configs`:
NAME=VAR:VALUE+VAR:VALUE,...; a NAME alone is the plan as built), so one process compares them,
interleaved over `--rounds` (session 24 compared L2 policies and stage counts through the
MOEGEMM_X_* knobs of bench/results/2026-11-27-session24/tried-decode-l2-policy-knobs.patch;
two builds are compared by running it once with each --lib). Median µs per (workload,
config, flush) and round; each configuration's output is first checked against
torch._grouped_mm. bench/NOTES.md §43.

Usage: l2_writeback.py --lib build/libmoegemm.so --only W1,W2 [--flushes read,write]
                       [--configs base,pdl0=MOEGEMM_PDL:0]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import compare_torch as ct  # noqa: E402

ct.torch = torch  # compare_torch imports torch in its main(); its classes use the global

FLUSHES = ("read", "write", "write-idle")


def parse_configs(text):
    configs = []
    for item in text.split(","):
        name, _, settings = item.partition("=")
        env = {}
        for setting in filter(None, settings.split("+")):
            var, _, value = setting.partition(":")
            env[var] = value
        configs.append((name, env))
    return configs


def make_plan(lib, env, experts, n, k, counts, device):
    saved = {var: os.environ.get(var) for var in env}
    os.environ.update(env)
    try:
        return ct.LibraryGemm(lib, experts, n, k, counts, ct.BACKENDS["native"], device)
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def timer(flush_buffer, idle_cycles):
    def time(fn, flush, reps):
        times = []
        for _ in range(reps):
            if flush == "read":
                flush_buffer.sum()
            else:
                flush_buffer.zero_()
                if flush == "write-idle":
                    torch.cuda._sleep(idle_cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        times.sort()
        return times[len(times) // 2]
    return time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", default=ct.DEFAULT_LIBRARY)
    parser.add_argument("--only", required=True)
    parser.add_argument("--configs", default="base")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--idle-us", type=float, default=200)
    parser.add_argument("--flushes", default=",".join(FLUSHES))
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    flushes = args.flushes.split(",")

    torch.cuda.set_device(0)
    lib = ct.Library(args.lib)
    flush_buffer = torch.ones(256 << 18, dtype=torch.float32, device="cuda")
    time = timer(flush_buffer, int(args.idle_us * 1980))  # cycles at up to 1.98 GHz
    configs = parse_configs(args.configs)
    results = []
    for name, experts, n, k, counts in ct.select_workloads(ct.DEFAULT_WORKLOADS, args.only):
        dev = torch.device("cuda", 0)
        total = sum(counts)
        a = torch.rand(total, k, device=dev, dtype=torch.bfloat16) * 2 - 1
        b = torch.rand(experts, n, k, device=dev, dtype=torch.bfloat16) * 2 - 1
        b_t = b.transpose(-2, -1)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        offs = torch.tensor(starts[1:], device=dev, dtype=torch.int32)
        a_padded = torch.rand(experts, max(counts), k, device=dev, dtype=torch.bfloat16) * 2 - 1
        d_padded = torch.empty(experts, max(counts), n, device=dev, dtype=torch.bfloat16)
        reference = torch._grouped_mm(a, b_t, offs=offs, out_dtype=torch.bfloat16).float()
        calls = {}
        for cname, env in configs:
            plan = make_plan(lib, env, experts, n, k, counts, 0)
            d = torch.full((total, n), float("nan"), device=dev, dtype=torch.bfloat16)
            plan.execute(a, b, d)
            torch.cuda.synchronize()
            err = ((d.float() - reference).norm() / reference.norm()).item()
            if not err < 1e-2:
                sys.exit(f"{name} {cname}: relative error {err} against torch._grouped_mm")
            calls[f"lib-{cname}"] = (lambda plan=plan, d=d: plan.execute(a, b, d), plan)
        calls["bmm_padded"] = (lambda: torch.bmm(a_padded, b_t, out=d_padded), None)
        calls["grouped_mm"] = (lambda: torch._grouped_mm(a, b_t, offs=offs,
                                                         out_dtype=torch.bfloat16), None)
        for fn, _ in calls.values():  # warm up
            for _ in range(10):
                fn()
        torch.cuda.synchronize()
        row = {"workload": name, "times": {}}
        for r in range(args.rounds):
            order = list(calls.items()) if r % 2 == 0 else list(reversed(calls.items()))
            for key, (fn, _) in order:
                for flush in flushes:
                    row["times"].setdefault(f"{key} {flush}", []).append(time(fn, flush, args.reps))
        for _, plan in calls.values():
            if plan is not None:
                plan.close()
        results.append(row)
        print(f"== {name}")
        for key in calls:
            cells = []
            for flush in flushes:
                ts = row["times"][f"{key} {flush}"]
                cells.append(f"{flush} " + "/".join(f"{t:.1f}" for t in ts))
            print(f"  {key:<22} " + "  ".join(cells))
        print("  write - read, min of rounds: " + ", ".join(
            f"{key} {min(row['times'][f'{key} write']) - min(row['times'][f'{key} read']):+.1f}"
            for key in calls))
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
