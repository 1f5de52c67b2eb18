#!/usr/bin/env python3
"""Renders one run's moegemm-bench JSON (and optionally compare_torch.py's JSON from the same
machine) as the Markdown tables that docs/performance.md records.

    python3 bench/results_table.py bench.json [compare_torch.json] > tables.md
"""
import json
import math
import sys

CUBLAS_PEERS = [("cublaslt_loop", "cuBLASLt loop"), ("cublas_grouped", "cublasGemmGroupedBatchedEx"),
                ("padded_batched", "padded strided-batched")]
TORCH_PEERS = [("grouped_mm", "`torch._grouped_mm`"), ("mm_loop", "`torch.mm` loop"),
               ("bmm_padded", "padded `torch.bmm`")]


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def cell(us, tflops):
    return f"{us:.1f} ({tflops:.0f})"


def bench_section(b):
    dev, sw, ceil = b["device"], b["software"], b["ceilings"]
    # dense_bf16_gemm, or dense_e4m3_gemm in runs with --dtype e4m3.
    dtype = b["settings"].get("dtype", "bf16")
    dense = ceil[f"dense_{dtype}_gemm"]
    skipped = b["settings"].get("skipped_peers", {})  # fp8 runs: peers without an fp8 form
    out = [f"Device {dev['name']} (sm_{dev['compute_capability'].replace('.', '')}, "
           f"{dev['sm_count']} SMs), driver {sw['driver']}, CUDA runtime {sw['runtime']}, "
           f"cuBLAS {sw['cublas_version']}; date {b['date_utc']}; commit `{b['git_commit']}`; "
           f"libmoegemm {b['library']['version']} backend {b['library']['backend']}.",
           "",
           f"Ceilings of the run: dense {dtype} cuBLASLt 8192³ = "
           f"**{dense['tflops']:.0f} TFLOP/s**; device-to-device copy = "
           f"**{ceil['device_copy']['gbps_read_plus_write'] / 1000:.2f} TB/s** (read + write).",
           "",
           "Each cell: median µs (TFLOP/s). Ratios are peer time / libmoegemm time (> 1: "
           "libmoegemm faster). Floor % = floor time / libmoegemm time.",
           "",
           "| workload | rows | floor µs | bound | libmoegemm | floor % | "
           + " | ".join(name for _, name in CUBLAS_PEERS) + " | "
           + " | ".join(f"{name} / lib" for _, name in CUBLAS_PEERS) + " |",
           "|---" * (6 + 2 * len(CUBLAS_PEERS)) + "|"]
    ratios = {key: [] for key, _ in CUBLAS_PEERS}
    for w in b["workloads"]:
        by = {r["backend"]: r for r in w["backends"]}
        lib = by.get("library")
        if not lib or not lib.get("ok"):
            why = "not supported" if lib and lib.get("not_supported") else "failed"
            out.append(f"| {w['name']} | {w['total_rows']} | {w['floor_us']:.0f} | {w['bound']} | "
                       f"{why}: {lib and lib.get('status')} |" + " |" * (1 + 2 * len(CUBLAS_PEERS)))
            continue
        row = [w["name"], str(w["total_rows"]), f"{w['floor_us']:.0f}", w["bound"],
               cell(lib["median_us"], lib["tflops"]), f"{100 * lib['floor_fraction']:.0f}%"]
        peer_ratio = []
        for key, _ in CUBLAS_PEERS:
            p = by.get(key)
            if p and p.get("ok"):
                row.append(cell(p["median_us"], p["tflops"]))
                ratio = p["median_us"] / lib["median_us"]
                ratios[key].append(ratio)
                peer_ratio.append(f"{ratio:.2f}")
            else:
                row.append("skipped" if key in skipped else "failed")
                peer_ratio.append("–")
        out.append("| " + " | ".join(row + peer_ratio) + " |")
    out += ["", "Geometric means of peer time / libmoegemm time: "
            + "; ".join(f"{name} {geomean(ratios[key]):.2f}" for key, name in CUBLAS_PEERS
                        if ratios[key]) + "."]
    variants = variants_section(b)
    return out + ([""] + variants if variants else [])


def variants_section(b):
    """libmoegemm measured three ways (eager, CUDA graph, MASKED with device sizes) and its host
    cost per call; empty for runs that predate these measurements."""
    workloads = [w for w in b["workloads"]
                 if any(r["backend"] in ("library_graph", "library_masked")
                        or "host_us_per_call" in r for r in w["backends"])]
    if not workloads:
        return []
    bare = any("bare_launch_host_us" in w for w in workloads)
    out = ["libmoegemm three ways: eager (VARIABLE, host sizes), replayed from a CUDA graph, and "
           "MASKED with device sizes (max_rows = 2 x the largest expert, expected_rows = mean; "
           "decode workloads only). Times: median µs; ratios variant / eager (< 1: the variant "
           "faster); floor % = floor time / time; host: CPU µs per moegemm_execute (median of "
           "20 x 100 back-to-back calls)"
           + ("; bare launch: the same for a kernel with the library's parameter size and "
              "attributes (from commit ca18a4e on: one that stays as long as the library's, timed "
              "after all rows; before, right after the eager host cost, an empty one)."
              if bare else "."),
           "",
           "| workload | eager | graph | graph / eager | masked | masked floor % | masked / eager "
           "| host eager | host masked |" + (" bare launch |" if bare else ""),
           "|---" * (10 if bare else 9) + "|"]
    ratios = {"library_graph": [], "library_masked": []}
    for w in workloads:
        by = {r["backend"]: r for r in w["backends"] if r.get("ok")}
        lib = by.get("library")
        row = [w["name"], f"{lib['median_us']:.1f}" if lib else "failed"]
        for key in ("library_graph", "library_masked"):
            r = by.get(key)
            row.append(f"{r['median_us']:.1f}" if r else "–")
            if key == "library_masked":
                row.append(f"{100 * r['floor_fraction']:.0f}%" if r else "–")
            if r and lib:
                ratios[key].append(r["median_us"] / lib["median_us"])
                row.append(f"{ratios[key][-1]:.2f}")
            else:
                row.append("–")
        for key in ("library", "library_masked"):
            host = by.get(key, {}).get("host_us_per_call")
            row.append(f"{host:.2f}" if host is not None else "–")
        if bare:
            host = w.get("bare_launch_host_us")
            row.append(f"{host:.2f}" if host is not None else "–")
        out.append("| " + " | ".join(row) + " |")
    out += ["", f"Geometric means of variant time / eager time: graph "
            f"{geomean(ratios['library_graph']):.2f}; masked {geomean(ratios['library_masked']):.2f}."]
    return out


def torch_section(t):
    out = [f"PyTorch peers (`bench/compare_torch.py`, torch {t['torch']}, {t['device']['name']}, "
           f"{t['date_utc']}, commit `{t['git_commit']}`). Cells: median µs (TFLOP/s); "
           "ratios peer / libmoegemm; `err`: libmoegemm's relative Frobenius error against an "
           "fp32 PyTorch reference.",
           "",
           "| workload | libmoegemm | " + " | ".join(name for _, name in TORCH_PEERS) + " | "
           + " | ".join(f"{name} / lib" for _, name in TORCH_PEERS) + " | err |",
           "|---" * (3 + 2 * len(TORCH_PEERS)) + "|"]
    ratios = {key: [] for key, _ in TORCH_PEERS}
    for w in t["workloads"]:
        lib_us = w.get("library_us")
        if not lib_us:
            out.append(f"| {w['name']} | failed |" + " |" * (2 * len(TORCH_PEERS) + 1))
            continue
        row = [w["name"], cell(lib_us, w["library_tflops"])]
        rr = []
        for key, _ in TORCH_PEERS:
            us = w.get(f"{key}_us")
            row.append(cell(us, w[f"{key}_tflops"]) if us else "failed")
            if us:
                ratios[key].append(us / lib_us)
                rr.append(f"{us / lib_us:.2f}")
            else:
                rr.append("–")
        out.append("| " + " | ".join(row + rr + [f"{w.get('library_relerr', float('nan')):.1e}"]) + " |")
    out += ["", "Geometric means of peer time / libmoegemm time: "
            + "; ".join(f"{name} {geomean(ratios[key]):.2f}" for key, name in TORCH_PEERS
                        if ratios[key]) + "."]
    return out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(argv) >= 2 else 2)
    with open(argv[1]) as f:
        lines = bench_section(json.load(f))
    if len(argv) > 2:
        with open(argv[2]) as f:
            lines += [""] + torch_section(json.load(f))
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv)
