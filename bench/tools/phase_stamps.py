#!/usr/bin/env python3
"""Summarizes the per-CTA phase stamps of a MOEGEMM_PHASE_STAMPS build (CMake option).

The library appends, when each native plan is destroyed, the stamps of its last launch to the
file named by the environment variable MOEGEMM_PHASE_STAMPS: a '# E=.. N=.. K=.. grid=..'
header, then one line per CTA of 128 numbers (grouped_gemm_params.hpp, PhaseSlot): globaltimer
nanoseconds in slots 0-63, clock64 of the same moments in slots 64-127 (files of 64 numbers,
from builds before the producer's stamps, read the same way without them).

    python3 bench/tools/phase_stamps.py stamps.txt

A stamps build beside the release one, for a GPU call (the library and the bench only; the
bench finds the library through LD_LIBRARY_PATH where the machine's checkout lives elsewhere):

    cmake -S . -B build-stamps -DCMAKE_BUILD_TYPE=Release -DMOEGEMM_PHASE_STAMPS=ON \
          -DMOEGEMM_BUILD_TESTS=OFF -DMOEGEMM_BUILD_EXAMPLES=OFF -DMOEGEMM_INSTALL=OFF
    cmake --build build-stamps -j2 --target moegemm-bench
    mkdir stamps && cp build-stamps/bench/moegemm-bench stamps/ &&
        cp build-stamps/libmoegemm.so.0.1.0 stamps/libmoegemm.so.0   # untracked: it travels
    # on the GPU machine:
    MOEGEMM_PHASE_STAMPS=$OUT/s.txt LD_LIBRARY_PATH=$PWD/stamps stamps/moegemm-bench \
        --only qwen3moe-fc2-decode64 --min-time 100 --warmup 100

In such a build MOEGEMM_DEBUG_START_DELAY_NS=N (at plan creation) makes every CTA's producer
wait N ns before its first copy: whether a launch ends that much later (bench/NOTES.md §34a).
"""
import statistics
import sys

ENTRY, PROLOGUE, PRODUCER, FIRST_FULL, EXIT, TILE, MAX_TILES, COUNT = 0, 1, 2, 3, 4, 5, 9, 31
SCHEDULED, STAGED, MAP, C_START, P_ACQUIRE, READY, P_START = 24, 25, 26, 27, 28, 29, 30
# The producer's side of each of the first MAX_TILES tiles (files of 128 numbers per CTA; those
# of 64, from builds before these stamps, have none): its group known, its first copy issued.
P_GROUP, P_FIRST_COPY = 32, 32 + MAX_TILES
# Warp 1's schedule in the parallel prologue (files from builds before these stamps hold 0).
S_START, S_BUILT, S_WAITED = 32 + 2 * MAX_TILES, 33 + 2 * MAX_TILES, 34 + 2 * MAX_TILES
# Inside the build: its first pass over the lane's experts, then its scans (0 in older files).
S_PASS1, S_SCANNED = 35 + 2 * MAX_TILES, 36 + 2 * MAX_TILES
CLOCK = 32  # where the clock64 half starts: set per file from the row length (half of it)


def spread(values, scale=1.0):
    if not values:
        return "-"
    v = sorted(x * scale for x in values)
    return f"min {v[0]:7.2f}  med {statistics.median(v):7.2f}  max {v[-1]:7.2f}"


def summarize(header, rows):
    print(header)
    t0 = min(r[ENTRY] for r in rows)
    # Each CTA's clock rate from its own entry -> exit pair (globaltimer may tick coarsely).
    ghz = []
    for r in rows:
        ns = r[EXIT] - r[ENTRY]
        cycles = r[CLOCK + EXIT] - r[CLOCK + ENTRY]
        if ns > 0 and cycles > 0:
            ghz.append(cycles / ns)
    clock_ghz = statistics.median(ghz) if ghz else 1.0
    us = lambda cycles: cycles / clock_ghz / 1e3
    print(f"  CTAs {len(rows)}, SM clock ~{clock_ghz:.2f} GHz (clock64 / globaltimer)")
    print("  entry after the first CTA (us):   ", spread([(r[ENTRY] - t0) / 1e3 for r in rows]))
    print("  prologue (us):                    ",
          spread([us(r[CLOCK + PROLOGUE] - r[CLOCK + ENTRY]) for r in rows]))
    # Parallel prologue: entry -> sizes staged (first __syncthreads) -> a tensor map published
    # (warp 2) and the schedule done (warp 1), both from the staging.
    for name, a, b in (("entry -> sizes staged", ENTRY, STAGED),
                       ("sizes staged -> map published", STAGED, MAP),
                       ("sizes staged -> schedule done", STAGED, SCHEDULED),
                       ("  staged -> warp 1 starts", STAGED, S_START),
                       ("  warp 1: start -> schedule built", S_START, S_BUILT),
                       ("    build: start -> first pass done", S_START, S_PASS1),
                       ("    build: first pass -> scans done", S_PASS1, S_SCANNED),
                       ("    build: scans -> schedule written", S_SCANNED, S_BUILT),
                       ("  warp 1: built -> grid wait returned", S_BUILT, S_WAITED),
                       ("  warp 1: wait -> schedule done", S_WAITED, SCHEDULED),
                       ("the later of them -> prologue end", None, PROLOGUE)):
        if a is not None and max(a, b) >= CLOCK:
            continue  # a file of 64 slots: no such stamps
        if a is None:
            pairs = [r for r in rows if r[MAP] and r[SCHEDULED]]
            values = [us(r[CLOCK + b] - max(r[CLOCK + MAP], r[CLOCK + SCHEDULED])) for r in pairs]
        else:
            pairs = [r for r in rows if r[a] and r[b]]
            values = [us(r[CLOCK + b] - r[CLOCK + a]) for r in pairs]
        if pairs:
            print(f"  {name + ' (us):':35s}", spread(values))
    # Producer thread: prologue end -> its start (registers released) -> maps acquired ->
    # ready (cluster wait done); consumer 0: prologue end -> its start (registers acquired).
    for name, a, b in (("prologue end -> producer start", PROLOGUE, P_START),
                       ("producer start -> maps acquired", P_START, P_ACQUIRE),
                       ("maps acquired -> producer ready", P_ACQUIRE, READY),
                       ("prologue end -> consumer start", PROLOGUE, C_START)):
        pairs = [r for r in rows if r[a] and r[b]]
        if pairs:
            print(f"  {name + ' (us):':35s}",
                  spread([us(r[CLOCK + b] - r[CLOCK + a]) for r in pairs]))
    print("  prologue end -> first full (us):  ",
          spread([us(r[CLOCK + FIRST_FULL] - r[CLOCK + PROLOGUE]) for r in rows if r[COUNT]]))
    print("  producer's last copy issued (us from t0):",
          spread([(r[PRODUCER] - t0) / 1e3 for r in rows]))
    print("  consumer exit (us from t0):       ", spread([(r[EXIT] - t0) / 1e3 for r in rows]))
    counts = [r[COUNT] for r in rows]
    print("  tiles per CTA:                    ", spread(counts))
    mainloops, epilogues, gaps = [], [], []
    for r in rows:
        prev_end = r[CLOCK + FIRST_FULL]
        for i in range(min(r[COUNT], MAX_TILES)):
            main_end = r[CLOCK + TILE + 2 * i]
            epi_end = r[CLOCK + TILE + 2 * i + 1]
            mainloops.append(us(main_end - prev_end))
            epilogues.append(us(epi_end - main_end))
            prev_end = epi_end
    print("  tile main loop (us, from the previous epilogue's end):", spread(mainloops))
    print("  tile epilogue (us):               ", spread(epilogues))
    if CLOCK > P_FIRST_COPY:
        # Producer, tile i: group known -> first copy issued (waiting for a free stage: the ring
        # is full, the producer ahead); first copy of tile i -> group of tile i + 1 known (tile
        # i's copies, then the ticket's round trip); first copy issued -> consumer 0's main loop
        # of the tile ended.
        to_copy, to_next, latency = [], [], []
        for r in rows:
            n = min(r[COUNT], MAX_TILES)
            for i in range(n):
                g, c = r[CLOCK + P_GROUP + i], r[CLOCK + P_FIRST_COPY + i]
                if not (g and c):
                    continue
                to_copy.append(us(c - g))
                latency.append(us(r[CLOCK + TILE + 2 * i] - c))
                if i + 1 < n and r[CLOCK + P_GROUP + i + 1]:
                    to_next.append(us(r[CLOCK + P_GROUP + i + 1] - c))
        print("  producer: group known -> first copy (us):", spread(to_copy))
        print("  producer: first copy -> next group known (us):", spread(to_next))
        print("  first copy issued -> the tile's main loop ended (us):", spread(latency))
    # The timeline by tile wave: when consumer 0 of each CTA ended its i-th tile.
    for i in range(min(max(counts), MAX_TILES)):
        ends = [(r[TILE + 2 * i + 1] - t0) / 1e3 for r in rows if r[COUNT] > i]
        if not ends:
            continue
        print(f"  tile {i} epilogue end (us from t0, {len(ends):3d} CTAs):", spread(ends))
    span = (max(r[EXIT] for r in rows) - t0) / 1e3
    print(f"  span, first entry -> last exit: {span:.2f} us")
    print()


def main():
    global CLOCK
    header, rows = None, []
    with open(sys.argv[1]) as f:
        for line in f:
            if line.startswith("#"):
                if header and rows:
                    summarize(header, rows)
                header, rows = line.strip(), []
            elif line.strip():
                rows.append([int(x) for x in line.split()])
                CLOCK = len(rows[-1]) // 2
    if header and rows:
        summarize(header, rows)


if __name__ == "__main__":
    main()
