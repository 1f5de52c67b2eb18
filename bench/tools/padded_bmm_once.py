"""Runs the padded batched GEMM of one workload (every expert padded to the largest) with
torch.bmm a few times, for ncu to profile cuBLAS's kernel beside the library's (NOTES §46):

    ncu -k regex:nvjet --launch-skip 3 --launch-count 1 python3 bench/tools/padded_bmm_once.py \
        --experts 8 --rows 201 --n 2048 --k 2048
"""
import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True, help="the largest expert's rows")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    a = torch.randn(args.experts, args.rows, args.k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.experts, args.n, args.k, device="cuda", dtype=torch.bfloat16)
    for _ in range(args.repeats):
        torch.bmm(a, b.transpose(1, 2))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
