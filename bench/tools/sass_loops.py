#!/usr/bin/env python3
"""Summarizes the loops of one kernel in `cuobjdump -sass` output that contain warpgroup MMAs
(HGMMA/QGMMA): instruction count per opcode, and with --control the sm_90 control bits of the
interesting instructions (loads, MMAs, barriers, FMULs and any instruction that waits).

    cuobjdump -sass libmoegemm.so > lib.sass
    python3 bench/tools/sass_loops.py lib.sass KERNEL_NAME_SUBSTRING [--control]

Control bits are read from the upper 64-bit word of each 128-bit instruction (bits 41-61 of
it): stall count (4 bits), yield (1), write scoreboard (3; 7 = none), read scoreboard (3),
wait mask (6 bits, one per scoreboard). Two instructions that write the same scoreboard make
any later wait on it wait for both (bench/NOTES.md §21a).
"""
import collections
import re
import sys

INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/")
SECOND_WORD = re.compile(r"/\* (0x[0-9a-f]+) \*/")
BRANCH = re.compile(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?(0x[0-9a-f]+)")
SHOWN = re.compile(r"LDG|LDS|FMUL|DEPBAR|GMMA|SYNCS|ARRIVE|BRA|CCTL")


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def read_function(path, name):
    functions = open(path).read().split("Function : ")
    matches = [f for f in functions[1:] if name in f.split("\n", 1)[0]]
    if len(matches) != 1:
        sys.exit(f"sass_loops.py: {len(matches)} functions match {name!r}; give a longer name")
    lines = matches[0].split("\n")
    instructions = []  # (address, text, upper word)
    for i, line in enumerate(lines):
        m = INSTRUCTION.match(line)
        if m and i + 1 < len(lines):
            upper = SECOND_WORD.search(lines[i + 1])
            instructions.append((int(m.group(1), 16), m.group(2).strip(),
                                 int(upper.group(1), 16) if upper else 0))
    return instructions


def control(upper):
    bits = upper >> 41
    scoreboard = lambda v: "-" if v == 7 else str(v)
    return (f"stall={bits & 0xf:2d} write_sb={scoreboard((bits >> 5) & 7)} "
            f"read_sb={scoreboard((bits >> 8) & 7)} wait={(bits >> 11) & 0x3f:06b}")


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(argv) >= 2 else 2)
    instructions = read_function(argv[1], argv[2])
    index = {address: i for i, (address, _, _) in enumerate(instructions)}
    for i, (address, text, _) in enumerate(instructions):
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) >= address or int(m.group(1), 16) not in index:
            continue
        body = instructions[index[int(m.group(1), 16)]:i + 1]
        mmas = sum("GMMA" in t for _, t, _ in body)
        if mmas == 0:
            continue
        counts = collections.Counter(opcode(t) for _, t, _ in body)
        print(f"loop {body[0][0]:#x}..{address:#x}: {len(body)} instructions, {mmas} MMAs: "
              + ", ".join(f"{k} {v}" for k, v in counts.most_common(20)))
        if "--control" in argv:
            for a, t, upper in body:
                if SHOWN.search(t) or (upper >> 52) & 0x3f:
                    print(f"  {a:#07x} {control(upper)}  {t[:72]}")


if __name__ == "__main__":
    main(sys.argv)
