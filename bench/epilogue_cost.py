#!/usr/bin/env python3
"""What the grouped GEMM's fused operations cost: FC1 of an MoE layer with its SwiGLU (and a
bias) in the epilogue and with A rows gathered from a token matrix, against the plain FC1 GEMM
of the same problem, in one process with one timer (CUDA events, L2 flushed between calls,
median), sizes on the device as the layer runs them.

    PYTHONPATH=bindings/python MOEGEMM_LIBRARY=build/libmoegemm.so \\
        python3 bench/epilogue_cost.py [--rows 16384 65536] [--json out.json]

Rows are routed rows (tokens x top-k), spread over the experts at random (every expert gets
some). Each variant's time is reported as a ratio to the plain FC1 of the same rows.
"""
import argparse
import json
import statistics

import torch

import moegemm

MODELS = {
    # name: experts, hidden (K of FC1), intermediate (FC1 has 2I columns with SwiGLU)
    "qwen3-30b-a3b": (128, 2048, 768),
    "mixtral-8x7b": (8, 4096, 14336),
    "deepseek-v3-ep8": (32, 7168, 2048),
}

VARIANTS = {
    # name: Plan keyword arguments beyond the problem's shape, and the per-call arrays
    "plain": ({}, ()),
    "swiglu": ({"activation": "swiglu"}, ()),
    "swiglu+bias": ({"activation": "swiglu", "epilogue_inputs": ("bias",)}, ("bias",)),
    "gather": ({"gather_rows": None}, ("a_rows",)),
    "gather+swiglu": ({"activation": "swiglu", "gather_rows": None}, ("a_rows",)),
}


def time_call(fn, flush, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def run_model(name, rows, reps, flush, variants, top_k=8):
    experts, hidden, inter = MODELS[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    split = torch.rand(experts, generator=gen, device="cuda") + 0.5
    sizes = (split / split.sum() * rows).floor().to(torch.int32)
    sizes[0] += rows - int(sizes.sum())
    tokens = max(1, rows // top_k)
    w1 = torch.randn(experts, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16) * 0.02
    x_rows = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    x_tokens = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    a_rows = torch.randint(0, tokens, (rows,), device="cuda", dtype=torch.int32,
                           generator=gen)
    bias = torch.randn(experts, 2 * inter, device="cuda", dtype=torch.bfloat16)
    out = {}
    for variant in variants:
        kwargs, arrays = VARIANTS[variant]
        kw = dict(kwargs)
        gather = "gather_rows" in kw
        if gather:
            kw["gather_rows"] = tokens
        plan = moegemm.Plan(num_experts=experts, n=2 * inter, k=hidden, max_rows=rows,
                            backend="native", **kw)
        plan.set_expert_sizes(sizes)  # device tensor: read on the GPU, as the layer does
        d = torch.empty(rows, inter if "activation" in kw else 2 * inter, device="cuda",
                        dtype=torch.bfloat16)
        call_arrays = {}
        if "bias" in arrays:
            call_arrays["bias"] = bias
        if "a_rows" in arrays:
            call_arrays["a_rows"] = a_rows
        a = x_tokens if gather else x_rows
        fn = lambda: plan.execute(a, w1, d, **call_arrays)  # noqa: E731
        for _ in range(5):
            fn()
        out[variant] = {"us": time_call(fn, flush, reps), "kernel": plan.describe()}
        plan.close()
    base = out.get("plain", {}).get("us")
    for v in out.values():
        v["ratio"] = v["us"] / base if base else float("nan")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rows", nargs="+", type=int, default=[16384, 65536])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="variants to time (ratios are to plain, when it runs)")
    parser.add_argument("--json")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * props.L2_cache_size // 4 + 1, device="cuda", dtype=torch.float32)
    results = {"device": props.name, "rows": {}}
    print(f"{'model':18} {'rows':>6} " + " ".join(f"{v:>14}" for v in args.variants))
    for model in args.models:
        for rows in args.rows:
            r = run_model(model, rows, args.reps, flush, args.variants)
            results["rows"][f"{model}/{rows}"] = r
            print(f"{model:18} {rows:>6} " + " ".join(
                f"{r[v]['us']:8.1f} {r[v]['ratio']:.3f}" for v in args.variants), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
