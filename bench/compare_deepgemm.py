#!/usr/bin/env python3
"""libmoegemm beside DeepGEMM's contiguous grouped GEMMs, on the workloads of bench/workloads/moe.txt.

Runs on a GPU machine with PyTorch and a DeepGEMM build (`import deep_gemm`; DeepGEMM is not a
dependency of libmoegemm, and this script exits with status 2 where it cannot be imported). In
one process, with one timer (compare_torch.py's: CUDA events, median, L2 cleared before each
repetition), it times on the same inputs of each workload:

  library    moegemm_execute on a VARIABLE plan, A [sum rows, K] unpadded
  deepgemm   deep_gemm.m_grouped_bf16_gemm_nt_contiguous (bf16), or, with --fp8,
             deep_gemm.m_grouped_fp8_gemm_nt_contiguous with DeepSeek-V3's block scales

DeepGEMM's contiguous layout takes every expert's rows padded to its M alignment (128 unless
deep_gemm says otherwise): the script copies A into such a padded tensor (padding rows zero,
their A scales 1), gives DeepGEMM the per-row expert index (-1 on padding rows) and a padded D,
and checks and times it there. FLOPs count valid rows only, for both, as everywhere in bench/:
the padding's MMAs are DeepGEMM's cost. With --fp8 both take E4M3 A and B (random codes,
|x| in [0.25, 3.75]) and BLOCK scales (moegemm.h: A [rows, KB], B [E, NB, KB], random in
[0.5, 2)), libmoegemm with MOEGEMM_SCALE_BLOCK; DeepGEMM's A scales are put into the layout its
kernel reads (MN-major, TMA-aligned) once, before timing. Each D is checked against an fp32
reference of the (dequantized) inputs: relative Frobenius error below 1e-2.

Prints a table (µs, TFLOP/s, deepgemm time / library time) and writes JSON to --json and to
$OUT/compare_deepgemm.json when OUT is set. Exit status: 0 measured, 2 no GPU or no DeepGEMM,
3 a check or a backend failed.

DeepGEMM's build and the LD_PRELOAD its JIT needed on our device machine:
bench/tools/build_deepgemm.sh.

usage: python3 bench/compare_deepgemm.py [--lib PATH] [--only NAME[,NAME]] [--json FILE]
                                         [--workloads FILE] [--backend auto|cublaslt|native]
                                         [--fp8] [--l2-flush write|read]
"""
import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402  (the library's loading, the timer, the measurement steps)

torch = None
deep_gemm = None
PEERS = ("deepgemm",)
SCALE_BLOCK = 128        # K (and, for B, N) values per BLOCK scale


def ceil_div(x, y):
    return (x + y - 1) // y


class PaddedLayout:
    """DeepGEMM's contiguous layout of a workload: each expert's rows start at a multiple of
    `alignment`; `group` is the per-row expert index (-1 on padding rows) and `valid` the padded
    row of each of the workload's rows, in order."""

    def __init__(self, counts, alignment, dev):
        starts, group, valid = [], [], []
        row = 0
        for e, count in enumerate(counts):
            starts.append(row)
            padded = ceil_div(count, alignment) * alignment
            group += [e] * count + [-1] * (padded - count)
            valid += range(row, row + count)
            row += padded
        self.rows = row
        self.starts = starts
        self.group = torch.tensor(group, dtype=torch.int32, device=dev)
        self.valid = torch.tensor(valid, dtype=torch.int64, device=dev)

    def pad(self, x, fill=0.0):
        """x [sum rows, ...] with its rows moved to their padded places, `fill` elsewhere (E4M3:
        zero codes, moved as bytes: fp8 tensors take no indexed stores)."""
        shape = (self.rows,) + tuple(x.shape[1:])
        if x.dtype == torch.float8_e4m3fn:
            out = torch.zeros(shape, dtype=torch.uint8, device=x.device)
            out[self.valid] = x.view(torch.uint8)
            return out.view(x.dtype)
        out = torch.full(shape, fill, dtype=x.dtype, device=x.device)
        out[self.valid] = x
        return out


def measure_bf16(timer, name, experts, n, k, counts, backend, device, alignment):
    w = ct.WorkloadMeasurement(timer, name, experts, n, k, counts, device)
    dev = w.dev
    a = torch.randn((w.total, k), device=dev, dtype=torch.bfloat16)
    b = torch.randn((experts, n, k), device=dev, dtype=torch.bfloat16)  # [E, N, K]
    w.set_reference(lambda e, rows: a[rows].float() @ b[e].float().t())
    w.library(backend, device, a, b)

    layout = PaddedLayout(counts, alignment, dev)
    a_padded = layout.pad(a)
    d_padded = torch.empty((layout.rows, n), device=dev, dtype=torch.bfloat16)
    w.result["deepgemm_padded_rows"] = layout.rows
    w.record("deepgemm",
             lambda: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a_padded, b, d_padded,
                                                                  layout.group),
             lambda _: d_padded[layout.valid], probe=True)
    return w.finish(PEERS)


def measure_fp8(timer, name, experts, n, k, counts, backend, device, alignment):
    w = ct.WorkloadMeasurement(timer, name, experts, n, k, counts, device)
    dev = w.dev
    a = ct.random_e4m3((w.total, k), dev)
    b = ct.random_e4m3((experts, n, k), dev)  # [E, N, K]: K-major, as both need
    k_blocks, n_blocks = ceil_div(k, SCALE_BLOCK), ceil_div(n, SCALE_BLOCK)
    scale_a = ct.random_scales((w.total, k_blocks), dev)          # [rows, KB]
    scale_b = ct.random_scales((experts, n_blocks, k_blocks), dev)  # [E, NB, KB]

    def along_k(scales):  # [.., KB] -> [.., K]: each scale over its 128 K-values
        return scales.repeat_interleave(SCALE_BLOCK, dim=-1)[..., :k]

    def expert_product(e, rows):
        a_values = a[rows].float() * along_k(scale_a[rows])
        b_scales = along_k(scale_b[e]).repeat_interleave(SCALE_BLOCK, dim=0)[:n]  # [N, K]
        return a_values @ (b[e].float() * b_scales).t()

    w.set_reference(expert_product)
    w.library(backend, device, a, b, scale_a, scale_b, "e4m3", "block")

    layout = PaddedLayout(counts, alignment, dev)
    a_padded = layout.pad(a)
    scale_a_padded = layout.pad(scale_a, fill=1.0)
    # The layout DeepGEMM's sm90 kernel reads A's scales in (MN-major, TMA-aligned): made here,
    # outside the timing, so that the call's own check finds it done.
    transform = getattr(deep_gemm, "get_mn_major_tma_aligned_tensor", None) or getattr(
        getattr(deep_gemm, "_C", None), "get_mn_major_tma_aligned_tensor", None)
    if transform is not None:
        scale_a_padded = transform(scale_a_padded)
    d_padded = torch.empty((layout.rows, n), device=dev, dtype=torch.bfloat16)
    w.result["deepgemm_padded_rows"] = layout.rows
    gemm = getattr(deep_gemm, "m_grouped_fp8_gemm_nt_contiguous", None) or getattr(
        deep_gemm, "m_grouped_fp8_fp4_gemm_nt_contiguous")
    w.record("deepgemm",
             lambda: gemm((a_padded, scale_a_padded), (b, scale_b), d_padded, layout.group,
                          disable_ue8m0_cast=True),
             lambda _: d_padded[layout.valid], probe=True)
    return w.finish(PEERS)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default=os.environ.get("MOEGEMM_LIBRARY", ct.DEFAULT_LIBRARY),
                        help="libmoegemm.so (default: $MOEGEMM_LIBRARY, else build/libmoegemm.so)")
    parser.add_argument("--workloads", default=ct.DEFAULT_WORKLOADS, help="workload file")
    parser.add_argument("--only", default="", help="NAME[,NAME...]: measure only these workloads")
    parser.add_argument("--json", default="", help="write the results to this JSON file too")
    parser.add_argument("--backend", default="auto", choices=sorted(ct.BACKENDS),
                        help="libmoegemm backend")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--fp8", action="store_true",
                        help="E4M3 inputs with BLOCK scales (1 x 128 for A, 128 x 128 for B)")
    parser.add_argument("--l2-flush", default="write", choices=("write", "read"),
                        help="how L2 is cleared before each timed call (compare_torch.py)")
    args = parser.parse_args()

    global torch, deep_gemm
    try:
        import torch as torch_module
    except ImportError as error:
        sys.exit(f"compare_deepgemm.py: PyTorch is needed ({error})")
    torch = ct.torch = torch_module
    if not torch.cuda.is_available():
        print("compare_deepgemm.py: no CUDA GPU available; nothing to measure", file=sys.stderr)
        return 2
    try:
        import deep_gemm as deep_gemm_module
    except Exception as error:  # not built here, or built for another torch
        print(f"compare_deepgemm.py: cannot import deep_gemm ({type(error).__name__}: {error}); "
              "nothing to measure", file=sys.stderr)
        return 2
    deep_gemm = deep_gemm_module

    workloads = ct.select_workloads(args.workloads, args.only)

    torch.cuda.set_device(args.device)
    library_version = ct.load_library(args.lib, "compare_deepgemm.py").version_string()
    timer = ct.make_timer(args.l2_flush)
    get_alignment = getattr(deep_gemm, "get_mk_alignment_for_contiguous_layout", None)
    alignment = get_alignment() if get_alignment is not None else 128
    props = torch.cuda.get_device_properties(args.device)
    run = {
        "tool": "compare_deepgemm.py",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": ct.git_commit(),
        "library": {"path": os.path.abspath(args.lib), "version": library_version,
                    "backend": args.backend},
        "device": {"name": props.name, "sm_count": props.multi_processor_count,
                   "compute_capability": f"{props.major}.{props.minor}"},
        "torch": torch.__version__,
        "deep_gemm": getattr(deep_gemm, "__version__", "unknown"),
        "deep_gemm_alignment": alignment,
        "workloads_file": os.path.abspath(args.workloads),
        "check_tolerance": ct.CHECK_TOLERANCE,
        "dtype": "e4m3" if args.fp8 else "bf16",
        "scale_mode": "block" if args.fp8 else "none",
        "l2_flush": args.l2_flush,
    }
    measure = measure_fp8 if args.fp8 else measure_bf16
    print(f"{props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, "
          f"deep_gemm {run['deep_gemm']} (alignment {alignment}), libmoegemm {library_version} "
          f"[{args.backend}], commit {run['git_commit']}, {run['dtype']} inputs", file=sys.stderr)
    results = ct.measure_workloads(
        workloads, lambda *workload: measure(timer, *workload, args.backend, args.device,
                                             alignment))
    run["workloads"] = results

    ct.print_table(results, PEERS)
    ct.write_json(run, args.json, "compare_deepgemm.json")
    failed = any(key.endswith("_error") for r in results for key in r) or any(
        not r.get("library_check_passed", True) or r.get("deepgemm_relerr", 0) >= ct.CHECK_TOLERANCE
        for r in results)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
