#!/usr/bin/env python3
"""libmoegemm's fused MoE layer from PyTorch: moegemm.moe_layer against an unfused reference.

A small Qwen-like layer: 32 experts, top-8 routing from a softmax router, hidden 1024,
intermediate 512 (SwiGLU: w1 holds the gate rows, then the up rows), bf16. The reference runs
the experts one by one in fp32 (FC1, SwiGLU, FC2, weighted sum), rounding the intermediate to
bf16 as the layer does; the fused output must match it within 2% of its magnitude. Then the
same call under torch.compile and in a CUDA graph replayed with new routing.

    MOEGEMM_LIBRARY=build/libmoegemm.so PYTHONPATH=bindings/python python3 examples/moe_layer.py

Prints OK; exits 77 without PyTorch, a CUDA device, or an sm_90 GPU (the layer needs one).
"""
import sys

try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed")
    sys.exit(77)

import moegemm

E, TOP_K, H, I = 32, 8, 1024, 512


def reference(x, ids, weights, w1, w2):
    """The layer, unfused, in fp32."""
    out = torch.zeros(x.shape[0], x.shape[1], device=x.device)
    for e in range(w1.shape[0]):
        tok, j = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue  # an expert no token chose
        h = x[tok].float() @ w1[e].float().t()
        gate, up = h[:, :I], h[:, I:]
        h = (torch.nn.functional.silu(gate) * up).to(x.dtype).float()
        out.index_add_(0, tok, (h @ w2[e].float().t()) * weights[tok, j][:, None])
    return out


def route(x, router):
    """Softmax over the router's logits, the top-k experts and their renormalized weights."""
    probs = torch.softmax(x.float() @ router.t(), dim=-1)
    weights, ids = probs.topk(TOP_K, dim=-1)  # int64 ids, as models produce them
    return ids, weights / weights.sum(dim=-1, keepdim=True)


def main():
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    if torch.cuda.get_device_capability() != (9, 0):
        print("SKIP: the MoE layer needs an sm_90 GPU (H100/H200)")
        return 77
    torch.manual_seed(0)
    dev, dtype = "cuda", torch.bfloat16
    w1 = (torch.randn(E, 2 * I, H, device=dev) / H ** 0.5).to(dtype)
    w2 = (torch.randn(E, H, I, device=dev) / I ** 0.5).to(dtype)
    router = torch.randn(E, H, device=dev)

    for tokens in (1, 7, 200):
        x = torch.randn(tokens, H, device=dev).to(dtype)
        ids, weights = route(x, router)
        out = moegemm.moe_layer(x, ids, weights, w1, w2, activation="swiglu")
        ref = reference(x, ids, weights, w1, w2)
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        print("T=%-4d max |out - ref| / max |ref| = %.2e" % (tokens, err))
        if not err < 2e-2:
            print("FAIL")
            return 1

    # torch.compile traces the custom op moegemm::moe_layer into one graph
    @torch.compile(fullgraph=True)
    def block(x, ids, weights):
        return x + moegemm.moe_layer(x, ids, weights, w1, w2)

    x = torch.randn(64, H, device=dev).to(dtype)
    ids, weights = route(x, router)
    compiled = block(x, ids, weights)
    if not torch.equal(compiled, x + moegemm.moe_layer(x, ids, weights, w1, w2)):
        print("FAIL: torch.compile changed the result")
        return 1

    # A CUDA graph: the first call for a shape (which creates the plan) runs before capture;
    # replays read new ids and weights from the same buffers.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        moegemm.moe_layer(x, ids, weights, w1, w2)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = moegemm.moe_layer(x, ids, weights, w1, w2)
    for _ in range(3):
        x.copy_(torch.randn(64, H, device=dev).to(dtype))
        new_ids, new_weights = route(x, router)
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        graph.replay()
        ref = reference(x, ids, weights, w1, w2)
        err = ((graph_out.float() - ref).abs().max() / ref.abs().max()).item()
        if not err < 2e-2:
            print("FAIL: graph replay, error %.2e" % err)
            return 1
    print("torch.compile and CUDA graph replays agree")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
