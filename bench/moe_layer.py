#!/usr/bin/env python3
"""libmoegemm's whole MoE layer beside its peers: one process, one timer, CUDA graphs.

For each model of bench/layers.txt, token count and routing, times each layer captured once in
a CUDA graph and replayed (CUDA events around each replay, L2 flushed before each by zeroing a
buffer of at least twice the L2, the median of many replays):
  library  moegemm.moe_layer through bindings/python (not run, with the reason, where it is
           missing or reports NOT_SUPPORTED);
  unfused  the layer as users write it in PyTorch: routing by argsort and counts, gather,
           torch._grouped_mm FC1, activation, FC2, fp32 index_add_ combine (eager where it
           cannot be captured, as the output says);
  vllm     vLLM's Triton fused_moe_kernel with vLLM's tuned configs for the device
           (bench/vllm_fused_moe.py over build-peers/vllm, see bench/README.md); its
           block alignment, a CUDA op in vLLM and PyTorch here, is timed apart (align_us);
  floor    max(bytes / read rate, FLOPs / dense rate), both rates measured in this run.
Each output is compared with an fp32 layer: max |out - ref| / max |ref| above the tolerance
marks the row FAILED.

  python3 bench/moe_layer.py [--models a,b] [--tokens 1,64] [--routing uniform,zipf:1.2]
                             [--no-vllm] [--quick] [--json FILE]
Exit status: 0 every measured row passed, 1 error, 2 no CUDA GPU, 3 a row FAILED.
"""
import argparse
import dataclasses
import datetime
import functools
import inspect
import json
import math
import os
import subprocess
import sys
import zlib

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

# max |out - ref| / max |ref| against the fp32 layer: bf16 rounds the intermediate, the
# activation's steps and the output; fp8 also quantizes the activations per 1x128 group
# (vLLM: ~5% of max |ref|). Meant to catch wrong results, not to rank accuracy.
TOLERANCE = {"bf16": 2e-2, "fp8_block128": 1e-1}
FP8_BLOCK = 128


# --- workloads ------------------------------------------------------------------------------
@dataclasses.dataclass
class Model:
    name: str
    experts: int
    top_k: int
    hidden: int
    inter: int
    local: int = 0
    first: int = 0
    dtype: str = "bf16"
    act: str = "swiglu"
    gate: str = "gate_up"
    bias: bool = False
    alpha: float = 0.0
    limit: float = 0.0

    def __post_init__(self):
        self.local = self.local or self.experts
        ok = (self.dtype in TOLERANCE and self.act in ("swiglu", "swiglu_clamped")
              and self.gate in ("gate_up", "up_gate", "interleaved")
              and 0 <= self.first and self.first + self.local <= self.experts
              and (self.act == "swiglu" or self.alpha > 0 and self.limit > 0)
              and (self.dtype != "fp8_block128" or self.hidden % FP8_BLOCK == 0
                   and self.inter % FP8_BLOCK == 0))
        if not ok:
            raise ValueError("bad model %s" % self)

    @property
    def fp8(self):
        return self.dtype == "fp8_block128"


def read_layers(path):
    """(models, tokens, routings) of a layer workload file (format: its header)."""
    models, tokens, routings = [], [], []
    for n, line in enumerate(open(path), 1):
        words = line.split("#", 1)[0].split()
        try:
            if not words:
                continue
            if words[0] == "model":
                kw = {"name": words[1]}
                for w in words[2:]:
                    key, eq, val = w.partition("=")
                    kw[key] = (True if not eq else float(val) if key in ("alpha", "limit")
                               else val if key in ("dtype", "act", "gate") else int(val))
                models.append(Model(**kw))
            elif words[0] == "tokens":
                tokens = [int(t) for t in words[1:]]
            elif words[0] == "routing":
                routings = [check_routing(r) for r in words[1:]]
            else:
                raise ValueError("unknown line kind %r" % words[0])
        except (ValueError, TypeError, IndexError) as ex:
            raise SystemExit("%s:%d: %s" % (path, n, ex))
    return models, tokens, routings


def check_routing(r):
    if r != "uniform" and not (r.startswith("zipf:") and float(r[5:]) > 0):
        raise ValueError("routing %r: uniform or zipf:S" % r)
    return r


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


class Weights:
    """One model's local experts on the device, scaled for unit-variance products: bf16, or
    e4m3 codes with fp32 scales per 128x128 block (amax / 448)."""

    def __init__(self, m, dev):
        g = torch.Generator(device=dev).manual_seed(seed_of(m.name))
        L, H, I = m.local, m.hidden, m.inter
        self.m = m
        self.w1, self.w1_scale = self._make(g, L, 2 * I, H, dev)
        self.w2, self.w2_scale = self._make(g, L, H, I, dev)
        self.b1 = self.b2 = None
        if m.bias:
            self.b1 = (0.1 * torch.randn(L, 2 * I, generator=g, device=dev)).to(torch.bfloat16)
            self.b2 = (0.1 * torch.randn(L, H, generator=g, device=dev)).to(torch.bfloat16)

    def _make(self, g, L, N, K, dev):
        fp8 = self.m.fp8
        w = torch.empty(L, N, K, device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
        s = torch.empty(L, N // FP8_BLOCK, K // FP8_BLOCK, device=dev) if fp8 else None
        for e in range(L):  # one expert at a time: no fp32 copy of all the weights
            we = torch.randn(N, K, generator=g, device=dev) / math.sqrt(K)
            if fp8:
                blocks = we.view(N // FP8_BLOCK, FP8_BLOCK, K // FP8_BLOCK, FP8_BLOCK)
                s[e] = blocks.abs().amax(dim=(1, 3)) / 448.0
                we = (blocks / s[e][:, None, :, None]).view(N, K)
            w[e] = we.to(w.dtype)
        return w, s

    def f32(self, name, e):
        """Expert e's w1 or w2 in fp32 (dequantized for fp8)."""
        w = getattr(self, name)[e].float()
        s = getattr(self, name + "_scale")
        if s is not None:
            w *= s[e].repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)
        return w

    def expert_bytes(self):
        """Bytes one expert's weights, scales and biases occupy."""
        ts = [self.w1, self.w2, self.w1_scale, self.w2_scale, self.b1, self.b2]
        return sum(t[0].numel() * t.element_size() for t in ts if t is not None)


def make_inputs(m, T, routing, dev):
    """x bf16 [T, H], topk_ids int32 [T, k] (distinct experts per token) and topk_weights
    fp32 [T, k] (a softmax over the choices), reproducible per (model, tokens, routing)."""
    g = torch.Generator(device=dev).manual_seed(seed_of(m.name, T, routing))
    p = torch.ones(m.experts, device=dev)
    if routing.startswith("zipf:"):
        rank = torch.randperm(m.experts, generator=g, device=dev) + 1
        p = rank.float() ** -float(routing[5:])
    ids = torch.multinomial(p.expand(T, -1).contiguous(), m.top_k, replacement=False, generator=g)
    wts = torch.softmax(torch.randn(T, m.top_k, generator=g, device=dev), -1)
    x = torch.randn(T, m.hidden, generator=g, device=dev).to(torch.bfloat16)
    return x, ids.to(torch.int32).contiguous(), wts.contiguous()


# --- the layer in PyTorch -------------------------------------------------------------------
def gated(h, m):
    """The gated activation of FC1's [rows, 2I] output, in h's dtype."""
    if m.gate == "interleaved":
        g, u = h[:, 0::2], h[:, 1::2]
    elif m.gate == "up_gate":
        u, g = h.chunk(2, dim=-1)
    else:
        g, u = h.chunk(2, dim=-1)
    if m.act == "swiglu":
        return F.silu(g) * u
    g, u = g.clamp(max=m.limit), u.clamp(-m.limit, m.limit)  # gpt-oss
    return (u + 1) * g * torch.sigmoid(m.alpha * g)


def reference(m, W, x, ids, wts):
    """The layer in fp32, expert by expert with host-side sizes."""
    out = torch.zeros(x.shape[0], m.hidden, device=x.device)
    local = ids.long() - m.first
    for e in torch.unique(local[(local >= 0) & (local < m.local)]).tolist():
        t, j = torch.nonzero(local == e, as_tuple=True)
        h = x[t].float() @ W.f32("w1", e).T
        if m.bias:
            h += W.b1[e].float()
        y = gated(h, m) @ W.f32("w2", e).T
        if m.bias:
            y += W.b2[e].float()
        out.index_add_(0, t, y * wts[t, j, None])
    return out


def make_unfused(m, W, x, ids, wts):
    """The layer a user writes around torch._grouped_mm; no host sync, so it can be captured."""
    if m.fp8:
        raise NotRun("PyTorch has no grouped GEMM with 128x128 block-scaled fp8 weights")
    if not hasattr(torch, "_grouped_mm"):
        raise NotRun("this PyTorch has no torch._grouped_mm")
    T, k = ids.shape
    L, ep = m.local, m.local != m.experts
    flat_ids, flat_w = ids.reshape(-1), wts.reshape(-1)
    ones = torch.ones(T * k, dtype=torch.int32, device=x.device)
    w1t, w2t = W.w1.transpose(-2, -1), W.w2.transpose(-2, -1)

    def layer():
        key = flat_ids.long() - m.first
        if ep:  # other ranks' choices sort after every local expert's
            key = torch.where((key >= 0) & (key < L), key, L)
        order = torch.argsort(key, stable=True)
        # Counts by scatter_add_: torch.bincount sizes its output on the host (a sync).
        counts = torch.zeros(L + 1, dtype=torch.int32, device=x.device).scatter_add_(0, key, ones)
        offs = counts[:L].cumsum(0, dtype=torch.int32)
        tok = order // k
        h = torch._grouped_mm(x.index_select(0, tok), w1t, offs=offs)
        expert = key[order].clamp(max=L - 1)
        if m.bias:
            h = h + W.b1.index_select(0, expert)
        y = torch._grouped_mm(gated(h, m), w2t, offs=offs)
        if m.bias:
            y = y + W.b2.index_select(0, expert)
        y = y.float() * flat_w[order, None]
        if ep:  # _grouped_mm leaves the rows past the last offset unwritten
            y = torch.where((key[order] < L)[:, None], y, 0.0)
        out = torch.zeros(T, m.hidden, dtype=torch.float32, device=x.device)
        return out.index_add_(0, tok, y).to(x.dtype)
    return layer


# --- libmoegemm -----------------------------------------------------------------------------
class NotRun(Exception):
    """A backend that cannot run this row; the message says why."""


def import_moegemm(lib):
    """The binding (this repository's) on the library at `lib`, or why it cannot be imported
    (no library built, version mismatch, ...). The binding reads MOEGEMM_LIBRARY on import."""
    if lib:
        os.environ["MOEGEMM_LIBRARY"] = os.path.abspath(lib)
    try:
        import moegemm
        return moegemm
    except Exception as ex:
        return "import moegemm failed: " + short(ex)


def make_library(moegemm, m, W, x, ids, wts, tune=False):
    """moegemm.moe_layer on these inputs, called once (its plan is made outside any capture;
    with `tune`, its GEMMs tuned on these inputs by moegemm.autotune_moe_layer first); NotRun
    where the binding lacks what the model needs or the library reports NOT_SUPPORTED."""
    fn = getattr(moegemm, "moe_layer", None)
    if fn is None:
        raise NotRun("moegemm.moe_layer is missing")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    any_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    takes = lambda *names: all(n in params or any_kw for n in names)
    kw = {"activation": m.act, "gate_layout": m.gate}
    if m.bias:
        kw.update(b1=W.b1, b2=W.b2)
    if m.act == "swiglu_clamped":
        kw.update(activation_alpha=m.alpha, activation_limit=m.limit)
    if m.fp8:
        if not takes("w1_scale", "w2_scale"):
            raise NotRun("NOT_SUPPORTED: moe_layer takes no fp8 weight scales")
        kw.update(w1_scale=W.w1_scale, w2_scale=W.w2_scale)
    if m.local != m.experts:
        if not takes("num_experts", "first_expert"):
            raise NotRun("moe_layer takes no expert range (num_experts, first_expert)")
        kw.update(num_experts=m.experts, first_expert=m.first)
    out = torch.empty(x.shape[0], m.hidden, dtype=x.dtype, device=x.device)

    def layer():
        fn(x, ids, wts, W.w1, W.w2, out=out, **kw)
        return out
    try:
        if tune:
            if not hasattr(moegemm, "autotune_moe_layer"):
                raise NotRun("moegemm.autotune_moe_layer is missing")
            moegemm.autotune_moe_layer(x, ids, wts, W.w1, W.w2, out=out, **kw)
        layer()  # creates the plan outside any capture
    except moegemm.NotSupportedError as ex:
        raise NotRun("NOT_SUPPORTED: %s" % ex)
    return layer


# --- timing ---------------------------------------------------------------------------------
class Timer:
    """CUDA events around each call, L2 flushed before each, median of the calls."""

    def __init__(self, dev, min_time, min_reps, max_reps=1000):
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 64 << 20
        self.flush = torch.empty(max(2 * l2, 256 << 20), dtype=torch.int8, device=dev)
        self.min_time, self.min_reps, self.max_reps = min_time, min_reps, max_reps

    def measure(self, run):
        ev = lambda: torch.cuda.Event(enable_timing=True)
        run()
        s, e = ev(), ev()
        s.record()
        run()
        e.record()
        torch.cuda.synchronize()
        reps = int(min(self.max_reps, max(self.min_reps, self.min_time / (s.elapsed_time(e) * 1e-3
                                                                          + 1e-4))))
        pairs = [(ev(), ev()) for _ in range(reps)]
        for s, e in pairs:
            self.flush.zero_()
            s.record()
            run()
            e.record()
        torch.cuda.synchronize()
        t = sorted(s.elapsed_time(e) * 1e3 for s, e in pairs)
        return {"median_us": t[len(t) // 2], "min_us": t[0], "max_us": t[-1], "reps": reps}


def capture(fn):
    """fn in a CUDA graph, after warm-up calls on a side stream (Triton compiles, plans are
    made, the allocator settles). Returns (graph, what the captured call returned)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        res = fn()
    return g, res


def time_layer(timer, fn):
    """fn timed as a graph replay, or eagerly where capture fails. Returns (stats, output)."""
    try:
        g, res = capture(fn)
        stats = dict(mode="graph", **timer.measure(g.replay))
    except Exception as ex:
        torch.cuda.synchronize()
        res = None
        stats = dict(mode="eager", capture_error=short(ex), **timer.measure(fn))
    return stats, (fn() if res is None else res)


def short(ex, n=300):
    text = ("%s: %s" % (type(ex).__name__, ex)).replace("\n", " ")
    return text if len(text) <= n else text[:n] + "..."


def measure_bandwidth(timer, dev):
    """Read rate (a sum over 1 GiB) and copy rate (1 GiB read and written), GB/s."""
    src = torch.zeros(1 << 28, device=dev)
    dst = torch.empty_like(src)
    return {"read_gbps": src.nbytes / timer.measure(lambda: src.sum())["median_us"] / 1e3,
            "copy_gbps": 2 * src.nbytes / timer.measure(lambda: dst.copy_(src))["median_us"] / 1e3}


def measure_ceilings(timer, dev, fp8):
    """measure_bandwidth, and the dense bf16 (and fp8) rate of an 8192^3 product, TFLOP/s."""
    c = measure_bandwidth(timer, dev)
    n = 8192
    a = torch.randn(n, n, device=dev).to(torch.bfloat16)
    b = torch.randn(n, n, device=dev).to(torch.bfloat16)
    o = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    c["dense_bf16_tflops"] = 2 * n ** 3 / timer.measure(lambda: torch.matmul(a, b, out=o))[
        "median_us"] / 1e6
    if fp8:
        try:
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev)
            run = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                           out_dtype=torch.bfloat16)
            c["dense_fp8_tflops"] = 2 * n ** 3 / timer.measure(run)["median_us"] / 1e6
        except Exception as ex:
            c["dense_fp8_error"] = short(ex)
    return c


def floor_of(m, W, T, ids, ceil):
    """Least time: the touched experts' bytes plus x, out and the routing at the read rate, or
    the FLOPs of the routed rows at the dense rate, whichever is longer."""
    local = ids.long() - m.first
    valid = (local >= 0) & (local < m.local)
    rows, active = int(valid.sum()), int(torch.unique(local[valid]).numel())
    nbytes = active * W.expert_bytes() + 2 * T * m.hidden * 2 + ids.numel() * 8
    flops = 2 * rows * 3 * m.hidden * m.inter  # FC1 2I x H, FC2 H x I
    rate = ceil.get("dense_fp8_tflops", 2 * ceil["dense_bf16_tflops"]) if m.fp8 \
        else ceil["dense_bf16_tflops"]
    bw_us, fl_us = nbytes / ceil["read_gbps"] / 1e3, flops / rate / 1e6
    return {"routed_rows": rows, "active_experts": active, "flops": flops, "min_bytes": nbytes,
            "bandwidth_floor_us": bw_us, "compute_floor_us": fl_us, "floor_us": max(bw_us, fl_us),
            "bound": "bandwidth" if bw_us >= fl_us else "compute"}


# --- one row --------------------------------------------------------------------------------
def make_vllm(vllm, m, W, x, ids, wts, timer):
    """vLLM's layer on these inputs, its block alignment done once and timed apart."""
    peer = vllm(W.w1, W.w2, num_experts=m.experts, first_expert=m.first, b1=W.b1, b2=W.b2,
                w1_scale=W.w1_scale, w2_scale=W.w2_scale,
                block_shape=[FP8_BLOCK, FP8_BLOCK] if m.fp8 else None,
                activation=lambda h: gated(h, m))
    align, layer, info = peer.prepare(x, ids, wts)
    align()
    info["align_us"] = (0.0 if info["naive_block_assignment"]
                        else time_layer(timer, align)[0]["median_us"])
    return layer, info


def need(peer):
    """The peer, or NotRun with the reason it is missing (a string in its place)."""
    if isinstance(peer, str):
        raise NotRun(peer)
    return peer


def run_row(m, W, T, routing, timer, ceil, moegemm, vllm, tune=False):
    """One (model, tokens, routing): every backend timed and checked against fp32. moegemm and
    vllm: the binding and vLLM's FusedMoE bound to its kernels, or why they are missing; tune:
    the library's layer autotuned on the row's inputs first."""
    x, ids, wts = make_inputs(m, T, routing, W.w1.device)
    ref = reference(m, W, x, ids, wts)
    row = {"model": m.name, "tokens": T, "routing": routing, "dtype": m.dtype,
           "experts": m.experts, "local_experts": m.local, "first_expert": m.first,
           "top_k": m.top_k, "hidden": m.hidden, "inter": m.inter, "activation": m.act,
           "gate_layout": m.gate, "bias": m.bias, **floor_of(m, W, T, ids, ceil)}
    builders = {"library": lambda: (make_library(need(moegemm), m, W, x, ids, wts, tune),
                                    {"autotuned": tune}),
                "unfused": lambda: (make_unfused(m, W, x, ids, wts), {}),
                "vllm": lambda: make_vllm(need(vllm), m, W, x, ids, wts, timer)}
    row["backends"] = b = {}
    for name, build in builders.items():
        try:
            layer, extra = build()
            stats, out = time_layer(timer, layer)
            err = ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
            ok = err <= TOLERANCE[m.dtype]  # False for NaN
            b[name] = dict(ok=ok, max_rel_err=err, **stats, **extra)
        except NotRun as ex:
            b[name] = {"ok": None, "not_run": str(ex)}
        except Exception as ex:
            b[name] = {"ok": False, "error": short(ex)}
    t = {n: v["median_us"] for n, v in b.items() if "median_us" in v}
    for n in t:
        b[n]["time_over_floor"] = t[n] / row["floor_us"]
    if "library" in t:
        row["ratios"] = {"library_over_floor": t["library"] / row["floor_us"]}
        for n in ("vllm", "unfused"):
            if n in t:
                row["ratios"][n + "_over_library"] = t[n] / t["library"]
    row["status"] = "FAILED" if any(v["ok"] is False for v in b.values()) else "ok"
    return row


# --- output ---------------------------------------------------------------------------------
COLUMNS = ("%-15s %6s %-8s %9s %9s %7s %9s %-5s %9s %-4s %9s %9s %9s %8s %8s %8s  %s")
HEADER = COLUMNS % ("model", "tokens", "routing", "lib_us", "vllm_us", "align", "torch_us",
                    "mode", "floor_us", "bnd", "vllm/lib", "torch/lib", "lib/floor", "err_lib",
                    "err_vllm", "err_torch", "status")


def row_line(r):
    """One row of the table; notes say why a backend did not run or ran eagerly."""
    b, ratios = r["backends"], r.get("ratios", {})
    us = lambda n: "%.1f" % b[n]["median_us"] if "median_us" in b[n] else "-"
    err = lambda n: "%.1e" % b[n]["max_rel_err"] if "max_rel_err" in b[n] else "-"
    ratio = lambda k: "%.2f" % ratios[k] if k in ratios else "-"
    align = b["vllm"].get("align_us")
    notes = ["%s: %s" % (n, x.get("not_run") or x.get("error")) for n, x in b.items()
             if x.get("not_run") or x.get("error")]
    notes += ["%s eager: %s" % (n, x["capture_error"]) for n, x in b.items()
              if "capture_error" in x]
    line = COLUMNS % (
        r["model"][:15], r["tokens"], r["routing"][:8], us("library"), us("vllm"),
        "-" if align is None else "%.1f" % align, us("unfused"), b["unfused"].get("mode", "-"),
        "%.1f" % r["floor_us"], r["bound"][:4], ratio("vllm_over_library"),
        ratio("unfused_over_library"), ratio("library_over_floor"), err("library"), err("vllm"),
        err("unfused"), r["status"])
    return line + "".join("\n    " + n[:150] for n in notes)


def run_text(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                              cwd=ROOT).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(dev):
    p = torch.cuda.get_device_properties(dev)
    smi = run_text(["nvidia-smi", "-i", str(dev.index or 0), "--format=csv,noheader",
                    "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit"])
    smi = [s.strip() for s in smi.split(",")] if smi else [None] * 4
    commit = os.environ.get("MOEGEMM_GIT_COMMIT") or run_text(["git", "rev-parse", "HEAD"])
    if commit and run_text(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += "-dirty"
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    device = {"ordinal": dev.index or 0, "name": p.name, "compute_capability": "%d.%d" % (
        p.major, p.minor), "sms": p.multi_processor_count, "memory_bytes": p.total_memory,
        "l2_bytes": getattr(p, "L2_cache_size", None), "max_sm_clock": smi[1],
        "max_mem_clock": smi[2], "power_limit": smi[3]}
    software = {"driver": smi[0], "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
                "triton": triton_version, "python": sys.version.split()[0]}
    return commit, device, software


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default=os.path.join(HERE, "layers.txt"), help="workload file")
    ap.add_argument("--lib", default=os.environ.get("MOEGEMM_LIBRARY") or next(
        (p for p in [os.path.join(ROOT, "build", "libmoegemm.so")] if os.path.exists(p)), None),
        help="libmoegemm to load (default: $MOEGEMM_LIBRARY, else build/libmoegemm.so, else "
             "the binding's search)")
    ap.add_argument("--models", help="comma-separated model names (default: all)")
    ap.add_argument("--tokens", help="comma-separated token counts (default: the file's)")
    ap.add_argument("--routing", help="comma-separated routings (default: the file's)")
    ap.add_argument("--no-vllm", action="store_true", help="leave vLLM's fused_moe out")
    ap.add_argument("--autotune", action="store_true",
                    help="tune the library's layer on each row's inputs before timing it "
                         "(moegemm.autotune_moe_layer; the tuned kernels stay for the process)")
    ap.add_argument("--vllm-dir", help="fetched vLLM files (default: build-peers/vllm)")
    ap.add_argument("--vllm-config-device", help="device part of vLLM's config file names "
                    "(default: this GPU's, e.g. NVIDIA_H100_80GB_HBM3; NVIDIA_H200 uses the "
                    "H200's tuned configs)")
    ap.add_argument("--quick", action="store_true",
                    help="short timing (50 ms, >= 10 replays); tokens 1,64,1024,4096 and "
                         "uniform routing unless given")
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds of replays per layer")
    ap.add_argument("--min-reps", type=int, default=30, help="fewest replays per layer")
    ap.add_argument("--json", help="write the results here (also $OUT/moe_layer.json if OUT)")
    a = ap.parse_args()

    models, tokens, routings = read_layers(a.layers)
    if a.quick:
        a.min_time, a.min_reps = 0.05, 10
        tokens, routings = [1, 64, 1024, 4096], ["uniform"]
    if a.models:
        names = a.models.split(",")
        unknown = set(names) - {m.name for m in models}
        if unknown:
            raise SystemExit("unknown models: %s" % ", ".join(sorted(unknown)))
        models = [m for m in models if m.name in names]
    tokens = [int(t) for t in a.tokens.split(",")] if a.tokens else tokens
    routings = [check_routing(r) for r in a.routing.split(",")] if a.routing else routings
    if not torch.cuda.is_available():
        print("moe_layer.py: no CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.set_float32_matmul_precision("highest")  # the reference: no TF32

    moegemm = import_moegemm(a.lib)
    vllm = "--no-vllm"
    if not a.no_vllm:
        try:
            import vllm_fused_moe
            kernels = vllm_fused_moe.load(a.vllm_dir or vllm_fused_moe.DEFAULT_DIR)
            vllm = functools.partial(vllm_fused_moe.FusedMoE, kernels,
                                     device_name=a.vllm_config_device)
        except Exception as ex:
            vllm = "vLLM peer unavailable: " + short(ex)
            print(vllm, file=sys.stderr)

    commit, device, software = environment(dev)
    timer = Timer(dev, a.min_time, a.min_reps)
    ceil = measure_ceilings(timer, dev, any(m.fp8 for m in models))
    result = {
        "tool": "moe_layer.py", "schema_version": 1,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": commit, "device": device, "software": software,
        "library": ({"error": moegemm} if isinstance(moegemm, str) else
                    {"version": moegemm.version_string(), "path": moegemm.library_path}),
        "vllm": ({"error": vllm} if isinstance(vllm, str) else
                 {"source": kernels.source, "dir": kernels.vllm_dir,
                  "config_device": a.vllm_config_device or vllm_fused_moe.device_file_name()}),
        "settings": {"layers": os.path.relpath(a.layers, ROOT), "models": [m.name for m in models],
                     "tokens": tokens, "routings": routings, "min_time_s": a.min_time,
                     "min_reps": a.min_reps, "l2_flush_bytes": timer.flush.numel(),
                     "tolerance": TOLERANCE, "timing": "CUDA events around each call, L2 "
                     "flushed (zeroed buffer) before each, median"},
        "ceilings": ceil, "rows": []}
    paths = [p for p in (a.json, os.environ.get("OUT") and
                         os.path.join(os.environ["OUT"], "moe_layer.json")) if p]
    print("%s, torch %s, driver %s, commit %s" % (device["name"], software["torch"],
                                                   software["driver"], commit))
    print("read %.0f GB/s, copy %.0f GB/s, dense bf16 %.0f TFLOP/s%s" % (
        ceil["read_gbps"], ceil["copy_gbps"], ceil["dense_bf16_tflops"],
        ", fp8 %.0f" % ceil["dense_fp8_tflops"] if "dense_fp8_tflops" in ceil else ""))
    print("library: %s" % ", ".join("%s %s" % kv for kv in result["library"].items()))
    print("vllm: %s" % ", ".join("%s %s" % kv for kv in result["vllm"].items()))
    print(HEADER, flush=True)
    failed = False
    for m in models:
        W = Weights(m, dev)
        for T in tokens:
            for r in routings:
                row = run_row(m, W, T, r, timer, ceil, moegemm, vllm, a.autotune)
                failed |= row["status"] == "FAILED"
                result["rows"].append(row)
                print(row_line(row), flush=True)
                for p in paths:  # after every row: a run cut short keeps what it measured
                    with open(p, "w") as f:
                        json.dump(result, f, indent=1)
                torch.cuda.empty_cache()
        del W
        torch.cuda.empty_cache()
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
