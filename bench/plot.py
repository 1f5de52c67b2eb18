#!/usr/bin/env python3
"""Plot a moegemm-bench run: libmoegemm against its peers and against the floor.

    bench/plot.py bench.json [compare_torch.json] [-o performance.png]

Reads the JSON that `moegemm-bench --json` writes (and optionally the one from
`bench/compare_torch.py` for the PyTorch peers of the same machine) and writes one PNG with,
per workload:

  - top: peer time / libmoegemm time for every peer (> 1: libmoegemm faster), on a log
    scale, with a line at 1.0;
  - bottom: libmoegemm's fraction of the workload's floor (max of the compute and bandwidth
    floors measured in the same run; 100% = the floor).

The title names the device, the date and the git commit of the run. Ratios come from
`time_over_library` (moegemm-bench) and `*_over_library` (compare_torch.py), so peers and the
library are always from the same run.

matplotlib is an optional dependency of the repository, needed by this script only:
    python3 -m pip install matplotlib
"""

import argparse
import json
import math
import sys

# moegemm-bench backend label -> legend text (the names docs/performance.md uses).
BENCH_PEERS = {
    "cublaslt-loop": "cuBLASLt loop",
    "cublas-grouped": "cublasGemmGroupedBatchedEx",
    "padded-batched": "padded strided-batched",
}
# moegemm-bench backend ids (prefixes) of libmoegemm itself; every other backend is a peer.
LIBRARY_FORMS = ("library", "kernel:")
# compare_torch.py ratio key -> legend text.
TORCH_PEERS = {
    "grouped_mm_over_library": "torch._grouped_mm",
    "mm_loop_over_library": "torch.mm loop",
    "bmm_padded_over_library": "padded torch.bmm",
}


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def collect(bench, torch=None):
    """Returns (workload names, {peer: [ratio or None]}, [floor fraction or None])."""
    names = [w["name"] for w in bench["workloads"]]
    ratios = {}
    floors = []
    for i, w in enumerate(bench["workloads"]):
        backends = w.get("backends", [])
        lib = next((be for be in backends if be.get("backend") == "library"), None)
        floors.append(lib.get("floor_fraction") if lib and lib.get("ok") else None)
        for be in backends:
            # Peers only: libmoegemm's other forms (CUDA graph, MASKED, forced kernels) are not.
            if be.get("backend", "").startswith(LIBRARY_FORMS):
                continue
            label = BENCH_PEERS.get(be.get("label"), be.get("label", be.get("backend")))
            ok = be.get("ok") and lib and lib.get("ok")
            ratios.setdefault(label, [None] * len(names))[i] = (
                be.get("time_over_library") if ok else None)
    if torch is not None:
        by_name = {w["name"]: w for w in torch.get("workloads", [])}
        for key, label in TORCH_PEERS.items():
            ratios[label] = [by_name.get(n, {}).get(key) for n in names]
    return names, ratios, floors


def title_of(bench, torch):
    dev = bench.get("device", {})
    sw = bench.get("software", {})
    parts = [
        f"libmoegemm {bench.get('library', {}).get('version', '?')} on {dev.get('name', '?')}"
        f" (sm_{dev.get('compute_capability', '?').replace('.', '')}, {dev.get('sm_count', '?')} SMs)",
        f"{bench.get('date_utc', '?')[:10]}, commit {bench.get('git_commit', '?')},"
        f" CUDA {sw.get('runtime', '?')}, cuBLAS {sw.get('cublas_version', '?')}"
        + (f", torch {torch.get('torch')}" if torch else ""),
    ]
    return "\n".join(parts)


def geomean(values):
    vals = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def plot(bench, torch, out, linear=False, dpi=100):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("bench/plot.py needs matplotlib: python3 -m pip install matplotlib")

    names, ratios, floors = collect(bench, torch)
    peers = list(ratios)
    x = list(range(len(names)))
    width = 0.8 / max(1, len(peers))
    fig, (ax, axf) = plt.subplots(
        2, 1, figsize=(12, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    colors = plt.get_cmap("tab10").colors
    for j, peer in enumerate(peers):
        xs = [i - 0.4 + width * (j + 0.5) for i in x]
        vals = ratios[peer]
        gm = geomean(vals)
        label = f"{peer} (geomean {gm:.2f})" if gm else peer
        ax.bar([p for p, v in zip(xs, vals) if v is not None],
               [v for v in vals if v is not None], width, label=label,
               color=colors[j % len(colors)])
        for p, v in zip(xs, vals):  # a failed or missing peer is shown, not left out
            if v is None:
                ax.text(p, 1.0, "n/a", rotation=90, ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=1)
    if not linear:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel("peer time / libmoegemm time\n(> 1: libmoegemm faster)")
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.set_title(title_of(bench, torch), fontsize=10)

    fvals = [f * 100 if f is not None else 0 for f in floors]
    bars = axf.bar(x, fvals, 0.6, color="tab:gray")
    for b, f in zip(bars, floors):
        axf.text(b.get_x() + b.get_width() / 2, b.get_height() + 1,
                 f"{f * 100:.0f}" if f is not None else "n/a", ha="center", va="bottom",
                 fontsize=7)
    axf.axhline(100, color="black", linewidth=1)
    axf.set_ylim(0, 118)
    axf.set_ylabel("libmoegemm\n% of floor")
    axf.set_xticks(x)
    axf.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    axf.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json", help="moegemm-bench --json output (bench.json)")
    ap.add_argument("torch_json", nargs="?", help="bench/compare_torch.py --json output")
    ap.add_argument("-o", "--output", default="performance.png", help="PNG to write")
    ap.add_argument("--linear", action="store_true", help="linear ratio axis (default: log)")
    ap.add_argument("--dpi", type=int, default=100)
    args = ap.parse_args(argv)

    bench = load(args.bench_json)
    if bench.get("tool") != "moegemm-bench":
        sys.exit(f"{args.bench_json}: not a moegemm-bench JSON (tool = {bench.get('tool')!r})")
    torch = load(args.torch_json) if args.torch_json else None
    if torch is not None and torch.get("tool") != "compare_torch.py":
        sys.exit(f"{args.torch_json}: not a compare_torch.py JSON (tool = {torch.get('tool')!r})")
    plot(bench, torch, args.output, linear=args.linear, dpi=args.dpi)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
