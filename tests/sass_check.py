#!/usr/bin/env python3
"""SASS check of the native kernels, without a GPU: every instance of sm90_grouped_gemm_kernel
in the built library runs on the tensor cores' warpgroup MMAs (HGMMA for 16-bit inputs, QGMMA
for E4M3), does not have them serialized, and never touches local memory (no LDL/STL: nothing
spilled, no stack arrays).

Serialized: ptxas (C7511, "insufficient register resources for the wgmma pipeline") waits for
each MMA before issuing the next, which shows as one WARPGROUP.ARRIVE and one WARPGROUP.DEPBAR
per MMA (2 per MMA; a pipelined instance has at most 0.75). A change anywhere in the kernel
can move ptxas's register allocation enough for this (the prologue's code included).

    sass_check.py CUOBJDUMP LIBRARY
    sass_check.py --self-test     # the checks on synthetic SASS: each must catch its case

Exit 0 when every instance passes, 1 when one does not (each failure listed), 77 (CTest's
skip) when CUOBJDUMP is empty or missing: the CUDA toolkit ships it in bin/, and
cmake/bootstrap.sh fetches NVIDIA's cuobjdump wheel from PyPI where the toolkit lacks it.
"""
import os
import re
import subprocess
import sys

SKIP = 77
KERNEL = "sm90_grouped_gemm_kernel"
FUNCTION = re.compile(r"^\s*Function : (\S+)")
# An instruction line: /*0a40*/  [@P0 ]OPCODE.modifiers operands ;
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def functions(sass_text):
    """{mangled name: [opcodes]} for every function in cuobjdump -sass output."""
    out, current = {}, None
    for line in sass_text.splitlines():
        m = FUNCTION.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = INSTRUCTION.match(line)
        if m and current is not None:
            current.append(m.group(1))
    return out


def check(name, opcodes):
    """Why instance `name` fails, or None."""
    fp8 = "fp8_e4m3" in name
    mma = "QGMMA" if fp8 else "HGMMA"
    problems = []
    mmas = opcodes.count(mma)
    if mmas == 0:
        problems.append(f"no {mma}")
    warpgroup_syncs = opcodes.count("WARPGROUP")
    if mmas and warpgroup_syncs >= 1.5 * mmas:
        problems.append(f"{mma}s serialized ({warpgroup_syncs} WARPGROUP syncs for {mmas} MMAs)")
    local = sum(op in ("LDL", "STL") for op in opcodes)
    if local:
        problems.append(f"{local} local-memory instructions (LDL/STL)")
    return ", ".join(problems) or None


def self_test():
    """check() on hand-written SASS: a clean instance passes, each defect is reported."""
    def sass(name, body):
        lines = [f"        Function : {name}"]
        lines += [f"        /*{16 * i:04x}*/                   {op} ;" for i, op in enumerate(body)]
        return "\n".join(lines)
    name16 = ("_ZN7moegemm6native24sm90_grouped_gemm_kernelINS0_12KernelTraitsI13__nv_bfloat16S3_"
              "Li128ELi256ELNS0_12EpilogueKindE1E")
    name8 = ("_ZN7moegemm6native24sm90_grouped_gemm_kernelINS0_12KernelTraitsI13__nv_fp8_e4m3"
             "13__nv_bfloat16Li64ELi256ELNS0_12EpilogueKindE0ELi1ELb0ELb1EEEEEv")
    pipelined = ["WARPGROUP.ARRIVE"] + ["HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24"] * 4 + [
        "WARPGROUP.DEPBAR.LE gsb0, 0x1", "@!P0 BRA 0x40"]
    serialized = ["WARPGROUP.ARRIVE", "HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24",
                  "WARPGROUP.DEPBAR.LE gsb0, 0x0"] * 4
    cases = [
        ("pipelined", sass(name16, pipelined), None),
        ("serialized", sass(name16, serialized), "serialized"),
        ("fp8 serialized", sass(name8, [op.replace("HGMMA", "QGMMA") for op in serialized]),
         "QGMMAs serialized"),
        ("spill", sass(name16, pipelined + ["STL [R1], R2"]), "local-memory"),
        ("no MMA", sass(name16, ["WARPGROUP.ARRIVE", "FFMA R1, R2, R3, R4"]), "no HGMMA"),
    ]
    failed = 0
    for label, text, expected in cases:
        (name, opcodes), = functions(text).items()
        why = check(name, opcodes)
        ok = why is None if expected is None else (why is not None and expected in why)
        print(f"  {label}: {why or 'passes'}{'' if ok else '  <- WRONG'}")
        failed += not ok
    print(f"sass_check self-test: {len(cases) - failed} of {len(cases)} cases right")
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cuobjdump, library = argv[1], argv[2]
    if not cuobjdump or not os.access(cuobjdump, os.X_OK):
        print(f"sass_check: no cuobjdump ({cuobjdump!r}): skipped")
        return SKIP
    # cuobjdump runs nvdisasm: look for it beside cuobjdump too (NVIDIA's wheels put both in
    # one bin/ that is not on PATH).
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(cuobjdump))
    if os.access(os.path.join(here, "nvdisasm"), os.X_OK):
        env["PATH"] = here + os.pathsep + env.get("PATH", "")
    result = subprocess.run([cuobjdump, "-sass", library], capture_output=True, text=True,
                            env=env)
    if result.returncode != 0:
        print(f"sass_check: {cuobjdump} -sass {library} failed:\n{result.stderr}")
        return 1
    kernels = {n: ops for n, ops in functions(result.stdout).items() if KERNEL in n}
    if not kernels:
        print(f"sass_check: no {KERNEL} instance in {library}")
        return 1
    failures = [(n, why) for n, ops in kernels.items() if (why := check(n, ops))]
    mma = sum(ops.count("HGMMA") + ops.count("QGMMA") for ops in kernels.values())
    print(f"sass_check: {len(kernels)} native kernel instances, {mma} warpgroup MMAs, "
          f"{len(failures)} failing")
    for name, why in failures:
        print(f"  {name}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
