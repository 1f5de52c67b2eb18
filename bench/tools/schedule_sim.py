#!/usr/bin/env python3
"""How the native kernel's tile hand-out spreads its CTAs, simulated: no GPU, no timing.

    bench/tools/schedule_sim.py [--workloads FILE] [--only NAME[,NAME]] [--idle-cost X]
                                [--block-m 128] [--block-n 256] [--sms 132]

Takes each workload's 128 x 256 tiles in the kernel's order (map_tile in
src/native/tile_schedule.cuh, single CTAs: each expert's tiles walk down its row tiles of one
column tile before the next column) and gives them to `--sms` CTAs two ways: round robin (CTA c
takes tiles c, c + sms, ...: fp8 BLOCK plans) and tile tickets (each CTA's first tile is its
index, then the next unassigned tile as it finishes). A tile costs 1, or `--idle-cost` where
its upper 64 rows hold none of the expert's and that half skips its MMAs (bench/NOTES.md §40).

Prints per policy: the makespan (in tile times) and the spread of start times among the row
tiles of each column slab (an expert's weights for one column tile, which those tiles read
from L2 one after the other): mean and 90th percentile. Column-mates that start far apart keep
their slab's k-blocks in L2 longer, or read them from memory again (NOTES §40a).
"""
import argparse
import heapq
import math
import os
import sys

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH_DIR)
from compare_torch import DEFAULT_WORKLOADS, load_workloads  # noqa: E402  (no torch needed)


def kernel_tiles(n, rows, block_m, block_n):
    """[(expert, m_tile, n_tile, upper half idle)] in map_tile's order (single CTAs)."""
    tiles_n = math.ceil(n / block_n)
    tiles = []
    for expert, count in enumerate(rows):
        tiles_m = math.ceil(count / block_m)
        for local in range(tiles_m * tiles_n):
            m_tile, n_tile = local % tiles_m, local // tiles_m
            tiles.append((expert, m_tile, n_tile, count - m_tile * block_m <= block_m // 2))
    return tiles


def hand_out(costs, sms, tickets):
    """Start time of every tile, and the makespan."""
    start = [0.0] * len(costs)
    if not tickets:
        makespan = 0.0
        for cta in range(sms):
            t = 0.0
            for tile in range(cta, len(costs), sms):
                start[tile] = t
                t += costs[tile]
            makespan = max(makespan, t)
        return start, makespan
    free = [(costs[tile], tile) for tile in range(min(sms, len(costs)))]  # (finish time, tile)
    heapq.heapify(free)
    following = len(free)
    makespan = 0.0
    while free:
        t, _ = heapq.heappop(free)
        makespan = max(makespan, t)
        if following < len(costs):
            start[following] = t
            heapq.heappush(free, (t + costs[following], following))
            following += 1
    return start, makespan


def slab_spreads(tiles, start):
    """Start-time spread among the row tiles of each column slab read by more than one."""
    slabs = {}
    for (expert, _, n_tile, _), t in zip(tiles, start):
        slabs.setdefault((expert, n_tile), []).append(t)
    return sorted(max(v) - min(v) for v in slabs.values() if len(v) > 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    parser.add_argument("--only", default="", help="NAME[,NAME...]")
    parser.add_argument("--idle-cost", type=float, default=0.7,
                        help="cost of a tile whose upper half skips its MMAs (a full tile: 1)")
    parser.add_argument("--block-m", type=int, default=128)
    parser.add_argument("--block-n", type=int, default=256)
    parser.add_argument("--sms", type=int, default=132)
    args = parser.parse_args()
    wanted = set(filter(None, args.only.split(",")))
    for name, _, n, _, rows in load_workloads(args.workloads):
        if wanted and name not in wanted:
            continue
        tiles = kernel_tiles(n, rows, args.block_m, args.block_n)
        idle = sum(1 for t in tiles if t[3])
        print(f"{name}: {len(tiles)} tiles, {idle} with an idle upper half")
        for tickets in (False, True):
            for skip in (False, True):
                costs = [args.idle_cost if skip and t[3] else 1.0 for t in tiles]
                start, makespan = hand_out(costs, args.sms, tickets)
                spreads = slab_spreads(tiles, start)
                mean = sum(spreads) / len(spreads) if spreads else 0.0
                p90 = spreads[int(0.9 * len(spreads))] if spreads else 0.0
                print(f"  {'tickets' if tickets else 'round robin':<11} "
                      f"{'skip' if skip else 'no skip':<7} makespan {makespan:7.2f}  "
                      f"slab start spread mean {mean:5.2f}, p90 {p90:5.2f} (tile times)")


if __name__ == "__main__":
    main()
