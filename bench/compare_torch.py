#!/usr/bin/env python3
"""libmoegemm beside PyTorch's MoE GEMM paths, on the workloads of bench/workloads/moe.txt.

Runs on a GPU machine with PyTorch. Calls libmoegemm.so through its Python binding,
bindings/python (pure Python, no extension to build; --lib says which library it loads), and
times, on the same tensors of each workload:

  library      moegemm_execute on a VARIABLE plan (A [sum rows, K], B [E, N, K], D [sum rows, N])
  grouped_mm   torch._grouped_mm(A, B^T, offs)       (CUTLASS grouped GEMM on sm90)
  mm_loop      one torch.mm per expert with rows      (cuBLAS)
  bmm_padded   torch.bmm over every expert padded to the largest one's rows (cuBLAS strided batched)

bf16 in and out, fp32 accumulation. Times are medians of CUDA-event timings after warm-up
(triton.testing.do_bench, which also clears L2 before each repetition by zeroing 256 MB; with
--l2-flush read, L2 is cleared by reading 256 MB instead, so no timed call pays for writing the
flush's dirty lines back). The library's D is
checked against an fp32 PyTorch reference (relative Frobenius error below 1e-2).

With --fp8, A and B are random E4M3 codes (|x| in [0.25, 3.75]) with rowwise scales in
[0.5, 2) (scale_a [sum rows], scale_b [E, N]), D bf16, and the backends are:

  library            moegemm_execute, E4M3 with MOEGEMM_SCALE_ROWWISE
  scaled_grouped_mm  torch._scaled_grouped_mm(A, B^T, scale_a, scale_b, offs)
  scaled_mm_loop     one torch._scaled_mm per expert with rows (scale_a [rows, 1], scale_b [1, N])

checked against an fp32 reference of the dequantized inputs. A library answering NOT_SUPPORTED
(no kernel for ROWWISE in this build or on this GPU) is recorded as "not supported", a torch
API that is missing or refuses the call as "unavailable: <reason>"; neither is a failure.

Prints a table (µs, TFLOP/s and peer time / library time per peer) and writes JSON to --json
and to $OUT/compare_torch.json when OUT is set.

usage: python3 bench/compare_torch.py [--lib PATH] [--only NAME[,NAME]] [--json FILE]
                                      [--workloads FILE] [--backend auto|cublaslt|native] [--fp8]
                                      [--l2-flush write|read]
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys

# PyTorch is imported by main() once the arguments are parsed, so that --help (and a machine
# without PyTorch) gets an answer instead of an ImportError. The binding is imported by
# load_library(), once --lib says which library it must load.
torch = None
moegemm = None

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
BINDING_DIR = os.path.join(REPO_ROOT, "bindings", "python")
DEFAULT_WORKLOADS = os.path.join(BENCH_DIR, "workloads", "moe.txt")
DEFAULT_LIBRARY = os.path.join(REPO_ROOT, "build", "libmoegemm.so")

CHECK_TOLERANCE = 1e-2  # relative Frobenius error of the library's D vs the fp32 reference
PEERS = ("grouped_mm", "mm_loop", "bmm_padded")
FP8_PEERS = ("scaled_grouped_mm", "scaled_mm_loop")  # with --fp8
BACKENDS = ("auto", "cublaslt", "native")  # the binding's names of moegemm_backend_t

# --------------------------------------------------------------------------------------------
# libmoegemm, through its Python binding (bindings/python)
# --------------------------------------------------------------------------------------------


def load_library(path, tool):
    """Imports the Python binding (the repository's bindings/python, ahead of an installed one)
    on the library at `path`, and returns the `moegemm` module. The binding reads the library's
    path from MOEGEMM_LIBRARY when it is imported; exits when it cannot load that very file."""
    global moegemm
    if moegemm is not None:
        return moegemm
    if not os.path.exists(path):
        sys.exit(f"{tool}: cannot load libmoegemm from {path} (no such file); "
                 "build it, or pass --lib / set MOEGEMM_LIBRARY")
    os.environ["MOEGEMM_LIBRARY"] = os.path.abspath(path)
    if os.path.isdir(BINDING_DIR) and BINDING_DIR not in sys.path:
        sys.path.insert(0, BINDING_DIR)
    try:
        import moegemm as module
    except ImportError as error:  # MoegemmLibraryNotFound, MoegemmVersionMismatch, no binding
        sys.exit(f"{tool}: cannot load libmoegemm from {path} ({error}); "
                 "build it, or pass --lib / set MOEGEMM_LIBRARY")
    # The binding falls back to other places when MOEGEMM_LIBRARY does not load: refuse those.
    if os.path.realpath(module.library_path) != os.path.realpath(path):
        sys.exit(f"{tool}: cannot load libmoegemm from {path} (the binding loaded "
                 f"{module.library_path} instead); build it, or pass --lib / set MOEGEMM_LIBRARY")
    moegemm = module
    return module


def error_fields(error):
    """(status name, message) of a libmoegemm failure, as the JSON records them."""
    return error.status_name, f"{error.function} failed: {error.message}"


class LibraryGemm:
    """A VARIABLE plan for one workload: execute() enqueues on the current torch stream, with
    the workspace the binding keeps for that stream. Inputs of `input_type` ("bf16", or "e4m3"
    with `scale_mode`), D bf16."""

    def __init__(self, experts, n, k, counts, backend, device, input_type="bf16",
                 scale_mode="none"):
        self.plan = moegemm.Plan(layout="variable", num_experts=experts, n=n, k=k,
                                 max_rows=sum(counts), a_type=input_type, d_type="bf16",
                                 scale_mode=scale_mode, backend=backend, device=device)
        try:
            self.plan.set_expert_sizes(list(counts))  # host sizes
            self.description = self.plan.describe()
        except Exception:
            self.close()
            raise

    def execute(self, a, b, d, a_scale=None, b_scale=None):
        """a_scale, b_scale: fp32 tensors in the plan's scale layout (E4M3), else None."""
        self.plan.execute(a, b, d, a_scale=a_scale, b_scale=b_scale)

    def close(self):
        if not self.plan.closed:
            torch.cuda.synchronize()  # the plan may own memory that queued executions read
            self.plan.close()


# --------------------------------------------------------------------------------------------
# Workloads, timing, reporting
# --------------------------------------------------------------------------------------------

def load_workloads(path):
    """[(name, E, N, K, rows_per_expert)] from a workload file (`#` starts a comment)."""
    workloads = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            name, experts, n, k = fields[0], *map(int, fields[1:4])
            counts = [int(x) for x in fields[4:]]
            if len(counts) != experts:
                sys.exit(f"{path}:{number}: {name} has {len(counts)} row counts for E = {experts}")
            workloads.append((name, experts, n, k, counts))
    return workloads


def make_timer(l2_flush="write"):
    """A function timing a callable: median milliseconds over CUDA events after warm-up, L2
    cleared before each repetition.

    l2_flush "write" (the default, the anchors' method): triton.testing.do_bench, which clears L2
    by zeroing a 256 MB buffer. The zeros stay in L2 as dirty lines, so the timed call also pays
    for writing them back to memory as its reads evict them: about an L2's worth of writes
    (~12 µs on an H200), the same for every backend, which compresses the ratios of short,
    memory-bound calls toward 1. l2_flush "read": the L2 is cleared by reading a 256 MB buffer
    (its lines stay clean), so each timed call starts from a cold L2 and pays only for its own
    traffic."""
    if l2_flush == "write":
        try:
            from triton.testing import do_bench
            return lambda fn: do_bench(fn, warmup=25, rep=200, return_mode="median")
        except ImportError:
            pass

    def time_with_events(fn, warmup_ms=25, rep_ms=200):
        flush = torch.ones(256 << 18, dtype=torch.float32, device="cuda")  # 256 MB, > any L2
        clear = flush.zero_ if l2_flush == "write" else flush.sum
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        end.record()
        end.synchronize()
        estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(warmup_ms / estimate_ms))):
            fn()
        times = []
        for _ in range(max(20, int(rep_ms / estimate_ms))):
            clear()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        return times[len(times) // 2]
    return time_with_events


def git_commit():
    if os.environ.get("MOEGEMM_GIT_COMMIT"):
        return os.environ["MOEGEMM_GIT_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def relative_error(value, reference):
    """||value - reference||_F / ||reference||_F in fp32 (inf when value has non-finite entries)."""
    value = value.float()
    if not torch.isfinite(value).all():
        return math.inf
    return ((value - reference).norm() / reference.norm()).item()


class WorkloadMeasurement:
    """One workload's shape, its expert offsets and its result dict, with the measurement steps
    that the bf16 and fp8 modes share: record() for any backend, library() for libmoegemm."""

    def __init__(self, timer, name, experts, n, k, counts, device):
        self.timer = timer
        self.dev = torch.device("cuda", device)
        self.experts, self.n, self.k, self.counts = experts, n, k, counts
        self.total = sum(counts)
        self.flops = 2.0 * self.total * n * k
        self.starts = [0]
        for c in counts:
            self.starts.append(self.starts[-1] + c)
        self.active = [e for e in range(experts) if counts[e]]
        self.offs = torch.tensor(self.starts[1:], device=self.dev, dtype=torch.int32)
        self.reference = None  # fp32 D, set by each mode before anything is recorded
        self.result = {"name": name, "experts": experts, "n": n, "k": k, "total_rows": self.total,
                       "active_experts": len(self.active), "max_expert_rows": max(counts),
                       "flops": self.flops}

    def rows(self, expert):
        return slice(self.starts[expert], self.starts[expert + 1])

    def set_reference(self, expert_product):
        """The fp32 reference D, one expert at a time (to bound the memory it takes):
        expert_product(e, rows) returns expert e's rows of D in fp32."""
        self.reference = torch.empty(self.total, self.n, device=self.dev, dtype=torch.float32)
        for e in self.active:
            self.reference[self.rows(e)] = expert_product(e, self.rows(e))

    def error(self, key, error):
        if isinstance(error, moegemm.MoegemmError):
            status, message = error_fields(error)
            self.result[f"{key}_error"] = {"status": status, "message": message}
        else:  # a peer torch cannot run here (e.g. _grouped_mm off sm90)
            self.result[f"{key}_error"] = {"status": type(error).__name__,
                                           "message": str(error)[:300]}

    def record(self, key, fn, output_of=None, probe=False):
        """Runs fn once, checks the D that output_of(fn's return value) gives (if any) against
        the reference, then times fn. Failures are recorded, not raised. With probe, a first call
        that fails records the backend as unavailable (`{key}_unavailable`: the reason), not as
        failed: a private torch API this torch or this GPU does not have."""
        try:
            returned = fn()
            torch.cuda.synchronize()
        except Exception as error:
            if probe:
                self.result[f"{key}_unavailable"] = f"{type(error).__name__}: {str(error)[:300]}"
            else:
                self.error(key, error)
            return
        try:
            if output_of is not None:
                self.result[f"{key}_relerr"] = relative_error(output_of(returned), self.reference)
            ms = self.timer(fn)
            self.result[f"{key}_us"] = 1e3 * ms
            self.result[f"{key}_tflops"] = self.flops / (ms * 1e-3) / 1e12
        except Exception as error:
            self.error(key, error)

    def library(self, backend, device, a, b, a_scale=None, b_scale=None, input_type="bf16",
                scale_mode="none"):
        """Plans, checks and times libmoegemm on a, b (and the fp8 scales). An fp8 plan the
        library answers NOT_SUPPORTED is recorded as `library_not_supported`, not as failed:
        its fp8 coverage is partial by design (moegemm.h, MOEGEMM_DTYPE_E4M3). backend, input_type
        and scale_mode are the binding's names ("auto", "bf16", "e4m3", "rowwise", ...)."""
        # NaN-filled: rows the library does not write cannot pass the check.
        d = torch.full((self.total, self.n), float("nan"), device=self.dev, dtype=torch.bfloat16)
        gemm = None
        try:
            gemm = LibraryGemm(self.experts, self.n, self.k, self.counts, backend, device,
                               input_type, scale_mode)
            self.result["plan"] = gemm.description
            self.record("library", lambda: gemm.execute(a, b, d, a_scale, b_scale), lambda _: d)
        except moegemm.MoegemmError as error:
            if input_type == "e4m3" and isinstance(error, moegemm.NotSupportedError):
                self.result["library_not_supported"] = error_fields(error)[1]
            else:
                self.error("library", error)
        finally:
            if gemm is not None:
                gemm.close()

    def finish(self, peers):
        """The result dict, with each peer's time over the library's and the library's check."""
        result = self.result
        for peer in peers:
            if "library_us" in result and f"{peer}_us" in result:
                result[f"{peer}_over_library"] = result[f"{peer}_us"] / result["library_us"]
        if "library_relerr" in result:
            result["library_check_passed"] = result["library_relerr"] < CHECK_TOLERANCE
        return result


def measure_bf16(timer, name, experts, n, k, counts, backend, device):
    """Times the library and the three bf16 peers on one workload; returns a result dict."""
    w = WorkloadMeasurement(timer, name, experts, n, k, counts, device)
    dev, total = w.dev, w.total
    # Values uniform in [-1, 1): never zeros, the same kind of data as moegemm-bench.
    a = torch.rand(total, k, device=dev, dtype=torch.bfloat16) * 2 - 1
    # B is [E, N, K], the nn.Linear layout the library's default WEIGHTS_NK takes.
    b = torch.rand(experts, n, k, device=dev, dtype=torch.bfloat16) * 2 - 1
    b_t = b.transpose(-2, -1)  # [E, K, N] view, what torch's grouped and batched GEMMs take
    w.set_reference(lambda e, rows: a[rows].float() @ b[e].float().t())

    w.library(backend, device, a, b)

    # torch._grouped_mm: it allocates its output (from torch's caching allocator, so cheaply).
    w.record("grouped_mm",
             lambda: torch._grouped_mm(a, b_t, offs=w.offs, out_dtype=torch.bfloat16),
             lambda d: d)

    # (Each peer's buffers are locals of its own function: freed before the next peer runs.)
    record_mm_loop(w, a, b_t, total, n, dev)
    record_bmm_padded(w, b_t, experts, max(counts), n, k, dev)
    return w.finish(PEERS)


def record_mm_loop(w, a, b_t, total, n, dev):
    """Per-expert torch.mm into one preallocated output."""
    d_loop = torch.full((total, n), float("nan"), device=dev, dtype=torch.bfloat16)

    def mm_loop():
        for e in w.active:
            torch.mm(a[w.rows(e)], b_t[e], out=d_loop[w.rows(e)])

    w.record("mm_loop", mm_loop, lambda _: d_loop)


def record_bmm_padded(w, b_t, experts, rows, n, k, dev):
    """Every expert padded to the largest expert's rows, one batched GEMM over all E experts
    (padding rows hold random values: the peer computes them whatever they hold)."""
    try:
        a_padded = torch.rand(experts, rows, k, device=dev, dtype=torch.bfloat16) * 2 - 1
        d_padded = torch.empty(experts, rows, n, device=dev, dtype=torch.bfloat16)
        w.record("bmm_padded", lambda: torch.bmm(a_padded, b_t, out=d_padded))
    except torch.cuda.OutOfMemoryError as error:
        w.error("bmm_padded", error)


def random_e4m3(shape, dev):
    """Random E4M3 codes as moegemm-bench draws them: random sign, exponent 5..8 and mantissa,
    so |x| lies in [0.25, 3.75] (never zero, never NaN)."""
    def bits(low, high):
        return torch.randint(low, high, shape, device=dev, dtype=torch.uint8)
    codes = (bits(0, 2) << 7) | (bits(5, 9) << 3) | bits(0, 8)
    return codes.view(torch.float8_e4m3fn)


def random_scales(shape, dev):
    """fp32 scales uniform in [0.5, 2), as moegemm-bench fills them."""
    return torch.rand(shape, device=dev, dtype=torch.float32) * 1.5 + 0.5


def measure_fp8(timer, name, experts, n, k, counts, backend, device):
    """Times libmoegemm with E4M3 inputs and ROWWISE scales beside torch's fp8 MoE paths on one
    workload; returns a result dict. A torch without one of them records it as unavailable."""
    w = WorkloadMeasurement(timer, name, experts, n, k, counts, device)
    dev, total = w.dev, w.total
    a = random_e4m3((total, k), dev)
    b = random_e4m3((experts, n, k), dev)  # [E, N, K]: WEIGHTS_NK, K-major as fp8 GEMMs need
    b_t = b.transpose(-2, -1)  # [E, K, N] view, column-major: what torch's fp8 GEMMs take
    # ROWWISE (moegemm.h): one scale per row of A, one per output column of each expert.
    scale_a = random_scales((total,), dev)
    scale_b = random_scales((experts, n), dev)
    # The reference multiplies the dequantized inputs in fp32.
    w.set_reference(lambda e, rows: (a[rows].float() * scale_a[rows, None])
                    @ (b[e].float() * scale_b[e][:, None]).t())

    w.library(backend, device, a, b, scale_a, scale_b, "e4m3", "rowwise")

    # torch._scaled_grouped_mm, rowwise (2d x 3d with offsets): it allocates its output.
    scaled_grouped_mm = getattr(torch, "_scaled_grouped_mm", None)
    if scaled_grouped_mm is None:
        w.result["scaled_grouped_mm_unavailable"] = (
            f"torch {torch.__version__} has no torch._scaled_grouped_mm")
    else:
        w.record("scaled_grouped_mm",
                 lambda: scaled_grouped_mm(a, b_t, scale_a, scale_b, offs=w.offs,
                                           out_dtype=torch.bfloat16),
                 lambda d: d, probe=True)

    # One torch._scaled_mm per expert with rows, rowwise: scale_a [rows, 1], scale_b [1, N].
    # The per-expert views are made once, outside the timed loop.
    scaled_mm = getattr(torch, "_scaled_mm", None)
    if scaled_mm is None:
        w.result["scaled_mm_loop_unavailable"] = f"torch {torch.__version__} has no torch._scaled_mm"
    else:
        operands = [(a[w.rows(e)], b_t[e], scale_a[w.rows(e)].unsqueeze(1),
                     scale_b[e].unsqueeze(0)) for e in w.active]

        def scaled_mm_loop():
            return [scaled_mm(x, y, sx, sy, out_dtype=torch.bfloat16) for x, y, sx, sy in operands]

        w.record("scaled_mm_loop", scaled_mm_loop, torch.cat, probe=True)
    return w.finish(FP8_PEERS)


def print_table(results, peers):
    """One row per workload: each backend's µs (TFLOP/s), each peer's time over the library's,
    the library's check error."""
    columns = ("library",) + peers
    name_width = max([len("workload")] + [len(r["name"]) for r in results])
    titles = [f"{c} µs (TFLOP/s)" for c in columns]
    widths = [max(23, len(title)) for title in titles]
    ratio_titles = [f"{p}/lib" for p in peers]
    ratio_widths = [max(15, len(title)) for title in ratio_titles]
    header = (f"{'workload':<{name_width}} {'rows':>6} "
              + " ".join(f"{t:>{w}}" for t, w in zip(titles, widths)) + " "
              + " ".join(f"{t:>{w}}" for t, w in zip(ratio_titles, ratio_widths))
              + f" {'lib err':>9}")
    print(header)
    print("-" * len(header))

    def timing(r, backend):
        if f"{backend}_us" in r:
            return f"{r[backend + '_us']:.1f} ({r[backend + '_tflops']:.0f})"
        if f"{backend}_not_supported" in r:
            return "not supported"
        if f"{backend}_unavailable" in r:
            return "unavailable"
        return "failed"

    def ratio(r, peer):
        key = f"{peer}_over_library"
        return format(r[key], ".2f") + "x" if key in r else "-"

    for r in results:
        line = f"{r['name']:<{name_width}} {r['total_rows']:>6} "
        line += " ".join(f"{timing(r, c):>{w}}" for c, w in zip(columns, widths)) + " "
        line += " ".join(f"{ratio(r, p):>{w}}" for p, w in zip(peers, ratio_widths))
        if "library_relerr" in r:
            flag = "" if r["library_check_passed"] else " FAIL"
            line += f" {r['library_relerr']:>9.2e}{flag}"
        print(line.rstrip())

    # Geometric mean of peer time / library time over the workloads both ran.
    print()
    for peer in peers:
        ratios = [r[f"{peer}_over_library"] for r in results if f"{peer}_over_library" in r]
        if ratios:
            mean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"{peer} time / library time: geometric mean {mean:.2f}x over {len(ratios)} workloads"
                  " (> 1: library faster)")

    def listed(suffix, title, text):
        """Prints `title` and each result key ending in `suffix`, as text(value)."""
        rows = [(r["name"], key[:-len(suffix)], value) for r in results for key, value in r.items()
                if key.endswith(suffix)]
        if rows:
            print(f"\n{title}")
            for name, backend, value in rows:
                print(f"  {name} / {backend}: {text(value)}")

    listed("_not_supported", "not supported by libmoegemm (this build or GPU):", str)
    listed("_unavailable", "unavailable in this torch or on this GPU:", str)
    listed("_error", "failures:", lambda error: f"{error['status']}: {error['message']}")
    plans = [(r["name"], r["plan"]) for r in results if "plan" in r]
    if plans:
        print("\nlibmoegemm plans:")
        for name, plan in plans:
            print(f"  {name}: {plan}")


def select_workloads(path, only):
    """The workloads of `path`, or those `only` names (NAME[,NAME...]); exits on unknown names."""
    workloads = load_workloads(path)
    if only:
        wanted = [name for name in only.split(",") if name]
        unknown = sorted(set(wanted) - {w[0] for w in workloads})
        if unknown:
            available = ", ".join(w[0] for w in workloads)
            sys.exit(f"unknown workload(s) {', '.join(unknown)}; available: {available}")
        workloads = [w for w in workloads if w[0] in wanted]
    return workloads


def measure_workloads(workloads, measure):
    """[measure(name, experts, n, k, counts)] over the workloads, with progress on stderr."""
    results = []
    for index, (name, experts, n, k, counts) in enumerate(workloads, 1):
        print(f"[{index}/{len(workloads)}] {name}...", file=sys.stderr, flush=True)
        results.append(measure(name, experts, n, k, counts))
        torch.cuda.empty_cache()
    return results


def write_json(run, path, out_name):
    """The run as JSON to `path` (if any) and to $OUT/out_name (when OUT is set)."""
    paths = [path] if path else []
    if os.environ.get("OUT"):
        paths.append(os.path.join(os.environ["OUT"], out_name))
    for target in paths:
        with open(target, "w") as f:
            json.dump(_finite(run), f, indent=1)
        print(f"wrote {target}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default=os.environ.get("MOEGEMM_LIBRARY", DEFAULT_LIBRARY),
                        help="libmoegemm.so (default: $MOEGEMM_LIBRARY, else build/libmoegemm.so)")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="workload file")
    parser.add_argument("--only", default="", help="NAME[,NAME...]: measure only these workloads")
    parser.add_argument("--json", default="", help="write the results to this JSON file too")
    parser.add_argument("--backend", default="auto", choices=sorted(BACKENDS), help="libmoegemm backend")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    parser.add_argument("--fp8", action="store_true",
                        help="E4M3 inputs with rowwise scales, bf16 out: libmoegemm (ROWWISE) "
                             "against torch._scaled_grouped_mm and a torch._scaled_mm loop "
                             "instead of the bf16 peers")
    parser.add_argument("--l2-flush", default="write", choices=("write", "read"),
                        help="how L2 is cleared before each timed call: 'write' zeroes 256 MB "
                             "(triton's do_bench, the anchors' method; the timed call also writes "
                             "the dirty zeros back), 'read' reads 256 MB (clean lines: each call "
                             "pays only for its own traffic)")
    args = parser.parse_args()

    global torch
    try:
        import torch as torch_module
    except ImportError as error:
        sys.exit(f"compare_torch.py: PyTorch is needed ({error})")
    torch = torch_module
    if args.fp8 and not hasattr(torch, "float8_e4m3fn"):
        sys.exit(f"compare_torch.py: --fp8 needs torch.float8_e4m3fn, which torch "
                 f"{torch.__version__} does not have")

    workloads = select_workloads(args.workloads, args.only)

    if not torch.cuda.is_available():
        print("compare_torch.py: no CUDA GPU available; nothing to measure", file=sys.stderr)
        return 2
    torch.cuda.set_device(args.device)
    library_version = load_library(args.lib, "compare_torch.py").version_string()
    timer = make_timer(args.l2_flush)
    props = torch.cuda.get_device_properties(args.device)
    run = {
        "tool": "compare_torch.py",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "library": {"path": os.path.abspath(args.lib), "version": library_version,
                    "backend": args.backend},
        "device": {"name": props.name, "sm_count": props.multi_processor_count,
                   "compute_capability": f"{props.major}.{props.minor}"},
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "workloads_file": os.path.abspath(args.workloads),
        "check_tolerance": CHECK_TOLERANCE,
        "dtype": "e4m3" if args.fp8 else "bf16",
        "scale_mode": "rowwise" if args.fp8 else "none",
        "l2_flush": args.l2_flush,
    }
    measure, peers = (measure_fp8, FP8_PEERS) if args.fp8 else (measure_bf16, PEERS)
    print(f"{props.name} ({props.multi_processor_count} SMs), torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}), libmoegemm {library_version} [{args.backend}] "
          f"from {args.lib}, commit {run['git_commit']}, {run['dtype']} inputs", file=sys.stderr)

    results = measure_workloads(
        workloads, lambda *workload: measure(timer, *workload, args.backend, args.device))
    run["workloads"] = results

    print_table(results, peers)
    write_json(run, args.json, "compare_torch.json")

    # Not supported (libmoegemm) and unavailable (torch) are reported, not failures.
    failed = any(key.endswith("_error") for r in results for key in r) or any(
        not r.get("library_check_passed", True) for r in results)
    return 3 if failed else 0


def _finite(value):
    """The results with non-finite floats as None: JSON has no NaN or infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
