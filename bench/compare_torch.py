#!/usr/bin/env python3
"""libmoegemm beside PyTorch's MoE GEMM paths, on the workloads of bench/workloads/moe.txt.

Runs on a GPU machine with PyTorch. Loads libmoegemm.so through ctypes (as any FFI user would,
no extension to build) and times, on the same tensors of each workload:

  library      moegemm_execute on a VARIABLE plan (A [sum rows, K], B [E, N, K], D [sum rows, N])
  grouped_mm   torch._grouped_mm(A, B^T, offs)       (CUTLASS grouped GEMM on sm90)
  mm_loop      one torch.mm per expert with rows      (cuBLAS)
  bmm_padded   torch.bmm over every expert padded to the largest one's rows (cuBLAS strided batched)

bf16 in and out, fp32 accumulation. Times are medians of CUDA-event timings after warm-up
(triton.testing.do_bench, which also clears L2 before each repetition). The library's D is
checked against an fp32 PyTorch reference (relative Frobenius error below 1e-2).

Prints a table (µs, TFLOP/s and peer time / library time per peer) and writes JSON to --json
and to $OUT/compare_torch.json when OUT is set.

usage: python3 bench/compare_torch.py [--lib PATH] [--only NAME[,NAME]] [--json FILE]
                                      [--workloads FILE] [--backend auto|cublaslt|native]
"""

import argparse
import ctypes
import datetime
import json
import math
import os
import subprocess
import sys

import torch

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
DEFAULT_WORKLOADS = os.path.join(BENCH_DIR, "workloads", "moe.txt")
DEFAULT_LIBRARY = os.path.join(REPO_ROOT, "build", "libmoegemm.so")

CHECK_TOLERANCE = 1e-2  # relative Frobenius error of the library's D vs the fp32 reference
PEERS = ("grouped_mm", "mm_loop", "bmm_padded")

# --------------------------------------------------------------------------------------------
# The C API, mirrored from include/moegemm/moegemm.h. Enum values are pinned by the header.
# --------------------------------------------------------------------------------------------

MOEGEMM_STATUS_SUCCESS = 0
MOEGEMM_LAYOUT_VARIABLE = 0
MOEGEMM_MEMORY_HOST = 0
MOEGEMM_DESCRIBE_MAX = 256
BACKENDS = {"auto": 0, "native": 1, "cublaslt": 2}  # moegemm_backend_t


class MoegemmProblem(ctypes.Structure):
    """moegemm_problem_t, field for field (C enums are ints)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("layout", ctypes.c_int),  # moegemm_layout_t
        ("num_experts", ctypes.c_int32),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("max_rows", ctypes.c_int64),
        ("a_type", ctypes.c_int),  # moegemm_dtype_t
        ("b_type", ctypes.c_int),
        ("d_type", ctypes.c_int),
        ("weight_layout", ctypes.c_int),  # moegemm_weight_layout_t
        ("scale_mode", ctypes.c_int),  # moegemm_scale_mode_t
        ("backend", ctypes.c_int),  # moegemm_backend_t
        ("device", ctypes.c_int32),
        ("expected_rows", ctypes.c_int64),
        ("force_kernel", ctypes.c_char_p),
    ]


# moegemm_problem_init writes the library's own sizeof(moegemm_problem_t) bytes. A library newer
# than this mirror may have a larger struct, so the struct lives at the start of a larger zeroed
# buffer: the library never writes past it, and plan_create accepts a zero tail.
PROBLEM_BUFFER_BYTES = 1024


class MoegemmError(RuntimeError):
    def __init__(self, status_name, message):
        super().__init__(f"{status_name}: {message}")
        self.status_name = status_name
        self.message = message


class Library:
    """The few libmoegemm entry points this script calls, with their prototypes."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        c_int, c_size_t, c_void_p, c_char_p = (ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p,
                                               ctypes.c_char_p)
        prototypes = {
            "moegemm_problem_init": (c_int, [ctypes.POINTER(MoegemmProblem)]),
            "moegemm_plan_create": (c_int, [ctypes.POINTER(MoegemmProblem), ctypes.POINTER(c_void_p)]),
            "moegemm_plan_destroy": (c_int, [c_void_p]),
            "moegemm_plan_set_expert_sizes": (c_int, [c_void_p, ctypes.POINTER(ctypes.c_int32), c_int]),
            "moegemm_plan_get_workspace_size": (c_int, [c_void_p, ctypes.POINTER(c_size_t)]),
            "moegemm_plan_describe": (c_int, [c_void_p, c_char_p, c_size_t]),
            # plan, a, b, d, a_scale, b_scale, workspace, workspace_bytes, stream
            "moegemm_execute": (c_int, [c_void_p] * 7 + [c_size_t, c_void_p]),
            "moegemm_status_name": (c_char_p, [c_int]),
            "moegemm_get_last_error_message": (c_char_p, []),
            "moegemm_get_version": (c_int, []),
            "moegemm_get_version_string": (c_char_p, []),
        }
        for name, (restype, argtypes) in prototypes.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name[len("moegemm_"):], function)
        self.version = self.get_version_string().decode()

    def check(self, status, call):
        if status != MOEGEMM_STATUS_SUCCESS:
            raise MoegemmError(self.status_name(status).decode(),
                               f"{call} failed: {self.get_last_error_message().decode()}")


class LibraryGemm:
    """A VARIABLE plan for one workload, with its workspace: execute() enqueues on the current
    torch stream."""

    def __init__(self, lib, experts, n, k, counts, backend, device):
        self.lib = lib
        self.plan = ctypes.c_void_p()
        self._problem_buffer = (ctypes.c_ubyte * PROBLEM_BUFFER_BYTES)()
        problem = MoegemmProblem.from_buffer(self._problem_buffer)
        lib.check(lib.problem_init(ctypes.byref(problem)), "moegemm_problem_init")
        if problem.struct_size != ctypes.sizeof(MoegemmProblem):
            print(f"warning: the library's moegemm_problem_t is {problem.struct_size} bytes, "
                  f"this mirror {ctypes.sizeof(MoegemmProblem)}: header and library differ",
                  file=sys.stderr)
        problem.layout = MOEGEMM_LAYOUT_VARIABLE
        problem.num_experts = experts
        problem.n, problem.k, problem.max_rows = n, k, sum(counts)
        problem.backend = backend
        problem.device = device
        lib.check(lib.plan_create(ctypes.byref(problem), ctypes.byref(self.plan)), "moegemm_plan_create")
        try:
            sizes = (ctypes.c_int32 * experts)(*counts)
            lib.check(lib.plan_set_expert_sizes(self.plan, sizes, MOEGEMM_MEMORY_HOST),
                      "moegemm_plan_set_expert_sizes")
            text = ctypes.create_string_buffer(MOEGEMM_DESCRIBE_MAX)
            lib.check(lib.plan_describe(self.plan, text, MOEGEMM_DESCRIBE_MAX), "moegemm_plan_describe")
            self.description = text.value.decode()
            workspace_bytes = ctypes.c_size_t()
            lib.check(lib.plan_get_workspace_size(self.plan, ctypes.byref(workspace_bytes)),
                      "moegemm_plan_get_workspace_size")
            self.workspace_bytes = workspace_bytes.value
            self.workspace = None
            if self.workspace_bytes:
                self.workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8,
                                             device=f"cuda:{device}")
        except Exception:
            self.close()
            raise

    def execute(self, a, b, d):
        workspace = self.workspace.data_ptr() if self.workspace is not None else None
        stream = torch.cuda.current_stream().cuda_stream
        status = self.lib.execute(self.plan, a.data_ptr(), b.data_ptr(), d.data_ptr(), None, None,
                                  workspace, self.workspace_bytes, stream)
        self.lib.check(status, "moegemm_execute")

    def close(self):
        if self.plan:
            torch.cuda.synchronize()  # the plan may own memory that queued executions read
            self.lib.plan_destroy(self.plan)
            self.plan = ctypes.c_void_p()


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


def make_timer():
    """A function timing a callable: median milliseconds over CUDA events after warm-up."""
    try:
        from triton.testing import do_bench
        return lambda fn: do_bench(fn, warmup=25, rep=200, return_mode="median")
    except ImportError:
        pass

    def time_with_events(fn, warmup=10, reps=50):
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # larger than any L2
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            flush.zero_()
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


def measure_workload(lib, timer, name, experts, n, k, counts, backend, device):
    """Times the library and the three peers on one workload; returns a result dict."""
    dev = torch.device("cuda", device)
    total = sum(counts)
    flops = 2.0 * total * n * k
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    result = {"name": name, "experts": experts, "n": n, "k": k, "total_rows": total,
              "active_experts": sum(1 for c in counts if c), "max_expert_rows": max(counts),
              "flops": flops}

    # Values uniform in [-1, 1): never zeros, the same kind of data as moegemm-bench.
    a = torch.rand(total, k, device=dev, dtype=torch.bfloat16) * 2 - 1
    # B is [E, N, K], the nn.Linear layout the library's default WEIGHTS_NK takes.
    b = torch.rand(experts, n, k, device=dev, dtype=torch.bfloat16) * 2 - 1
    b_t = b.transpose(-2, -1)  # [E, K, N] view, what torch's grouped and batched GEMMs take
    offs = torch.tensor(starts[1:], device=dev, dtype=torch.int32)

    # fp32 reference, one expert at a time to bound the memory it takes.
    reference = torch.empty(total, n, device=dev, dtype=torch.float32)
    for e in range(experts):
        if counts[e]:
            rows = slice(starts[e], starts[e + 1])
            torch.mm(a[rows].float(), b[e].float().t(), out=reference[rows])

    def record(key, fn, output_of=None):
        """Runs fn once, checks the D that output_of(fn's return value) gives (if any) against
        the reference, then times fn. Failures are recorded, not raised."""
        try:
            returned = fn()
            torch.cuda.synchronize()
            if output_of is not None:
                result[f"{key}_relerr"] = relative_error(output_of(returned), reference)
            ms = timer(fn)
            result[f"{key}_us"] = 1e3 * ms
            result[f"{key}_tflops"] = flops / (ms * 1e-3) / 1e12
        except MoegemmError as error:
            result[f"{key}_error"] = {"status": error.status_name, "message": error.message}
        except Exception as error:  # a peer torch cannot run here (e.g. _grouped_mm off sm90)
            result[f"{key}_error"] = {"status": type(error).__name__, "message": str(error)[:300]}

    # libmoegemm
    # NaN-filled: rows the library does not write cannot pass the check.
    d_library = torch.full((total, n), float("nan"), device=dev, dtype=torch.bfloat16)
    gemm = None
    try:
        gemm = LibraryGemm(lib, experts, n, k, counts, backend, device)
        result["plan"] = gemm.description
        record("library", lambda: gemm.execute(a, b, d_library), lambda _: d_library)
    except MoegemmError as error:
        result["library_error"] = {"status": error.status_name, "message": error.message}
    finally:
        if gemm is not None:
            gemm.close()
    del d_library

    # torch._grouped_mm: it allocates its output (from torch's caching allocator, so cheaply).
    record("grouped_mm", lambda: torch._grouped_mm(a, b_t, offs=offs, out_dtype=torch.bfloat16),
           lambda d: d)

    # Per-expert torch.mm into one preallocated output.
    d_loop = torch.full((total, n), float("nan"), device=dev, dtype=torch.bfloat16)
    active = [e for e in range(experts) if counts[e]]

    def mm_loop():
        for e in active:
            torch.mm(a[starts[e]:starts[e + 1]], b_t[e], out=d_loop[starts[e]:starts[e + 1]])

    record("mm_loop", mm_loop, lambda _: d_loop)
    del d_loop

    # Every expert padded to the largest expert's rows, one batched GEMM over all E experts
    # (padding rows hold random values: the peer computes them whatever they hold).
    try:
        a_padded = torch.rand(experts, max(counts), k, device=dev, dtype=torch.bfloat16) * 2 - 1
        d_padded = torch.empty(experts, max(counts), n, device=dev, dtype=torch.bfloat16)
        record("bmm_padded", lambda: torch.bmm(a_padded, b_t, out=d_padded))
        del a_padded, d_padded
    except torch.cuda.OutOfMemoryError as error:
        result["bmm_padded_error"] = {"status": "OutOfMemoryError", "message": str(error)[:300]}

    for peer in PEERS:
        if "library_us" in result and f"{peer}_us" in result:
            result[f"{peer}_over_library"] = result[f"{peer}_us"] / result["library_us"]
    if "library_relerr" in result:
        result["library_check_passed"] = result["library_relerr"] < CHECK_TOLERANCE
    return result


def print_table(results):
    """One row per workload: each backend's µs (TFLOP/s), each peer's time over the library's,
    the library's check error."""
    columns = ("library",) + PEERS
    name_width = max([len("workload")] + [len(r["name"]) for r in results])
    header = (f"{'workload':<{name_width}} {'rows':>6} "
              + " ".join(f"{c + ' µs (TFLOP/s)':>23}" for c in columns) + " "
              + " ".join(f"{p + '/lib':>15}" for p in PEERS)
              + f" {'lib err':>9}")
    print(header)
    print("-" * len(header))

    def timing(r, backend):
        if f"{backend}_us" not in r:
            return f"{'failed':>23}"
        text = f"{r[backend + '_us']:.1f} ({r[backend + '_tflops']:.0f})"
        return f"{text:>23}"

    def ratio(r, peer):
        key = f"{peer}_over_library"
        return f"{format(r[key], '.2f') + 'x':>15}" if key in r else f"{'-':>15}"

    for r in results:
        line = f"{r['name']:<{name_width}} {r['total_rows']:>6} "
        line += " ".join(timing(r, c) for c in columns) + " "
        line += " ".join(ratio(r, p) for p in PEERS)
        if "library_relerr" in r:
            flag = "" if r["library_check_passed"] else " FAIL"
            line += f" {r['library_relerr']:>9.2e}{flag}"
        print(line.rstrip())

    # Geometric mean of peer time / library time over the workloads both ran.
    print()
    for peer in PEERS:
        ratios = [r[f"{peer}_over_library"] for r in results if f"{peer}_over_library" in r]
        if ratios:
            mean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"{peer} time / library time: geometric mean {mean:.2f}x over {len(ratios)} workloads"
                  " (> 1: library faster)")

    errors = [(r["name"], key[:-len("_error")], value) for r in results for key, value in r.items()
              if key.endswith("_error")]
    if errors:
        print("\nfailures:")
        for name, backend, error in errors:
            print(f"  {name} / {backend}: {error['status']}: {error['message']}")
    plans = [(r["name"], r["plan"]) for r in results if "plan" in r]
    if plans:
        print("\nlibmoegemm plans:")
        for name, plan in plans:
            print(f"  {name}: {plan}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default=os.environ.get("MOEGEMM_LIBRARY", DEFAULT_LIBRARY),
                        help="libmoegemm.so (default: $MOEGEMM_LIBRARY, else build/libmoegemm.so)")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="workload file")
    parser.add_argument("--only", default="", help="NAME[,NAME...]: measure only these workloads")
    parser.add_argument("--json", default="", help="write the results to this JSON file too")
    parser.add_argument("--backend", default="auto", choices=sorted(BACKENDS), help="libmoegemm backend")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    args = parser.parse_args()

    workloads = load_workloads(args.workloads)
    if args.only:
        wanted = [name for name in args.only.split(",") if name]
        unknown = sorted(set(wanted) - {w[0] for w in workloads})
        if unknown:
            available = ", ".join(w[0] for w in workloads)
            sys.exit(f"unknown workload(s) {', '.join(unknown)}; available: {available}")
        workloads = [w for w in workloads if w[0] in wanted]

    if not torch.cuda.is_available():
        print("compare_torch.py: no CUDA GPU available; nothing to measure", file=sys.stderr)
        return 2
    torch.cuda.set_device(args.device)
    try:
        lib = Library(args.lib)
    except OSError as error:
        sys.exit(f"compare_torch.py: cannot load libmoegemm from {args.lib} ({error}); "
                 "build it, or pass --lib / set MOEGEMM_LIBRARY")
    timer = make_timer()
    props = torch.cuda.get_device_properties(args.device)
    run = {
        "tool": "compare_torch.py",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "library": {"path": os.path.abspath(args.lib), "version": lib.version, "backend": args.backend},
        "device": {"name": props.name, "sm_count": props.multi_processor_count,
                   "compute_capability": f"{props.major}.{props.minor}"},
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "workloads_file": os.path.abspath(args.workloads),
        "check_tolerance": CHECK_TOLERANCE,
    }
    print(f"{props.name} ({props.multi_processor_count} SMs), torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}), libmoegemm {lib.version} [{args.backend}] from {args.lib}, "
          f"commit {run['git_commit']}", file=sys.stderr)

    results = []
    for index, (name, experts, n, k, counts) in enumerate(workloads, 1):
        print(f"[{index}/{len(workloads)}] {name}...", file=sys.stderr, flush=True)
        results.append(measure_workload(lib, timer, name, experts, n, k, counts,
                                        BACKENDS[args.backend], args.device))
        torch.cuda.empty_cache()
    run["workloads"] = results

    print_table(results)
    paths = [args.json] if args.json else []
    if os.environ.get("OUT"):
        paths.append(os.path.join(os.environ["OUT"], "compare_torch.json"))
    for path in paths:
        with open(path, "w") as f:
            json.dump(_finite(run), f, indent=1)
        print(f"wrote {path}", file=sys.stderr)

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
