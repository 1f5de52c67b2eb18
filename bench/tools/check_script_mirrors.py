#!/usr/bin/env python3
"""The constants that bench/compare_torch.py and bench/compare_deepgemm.py mirror from
include/moegemm/moegemm.h (they load the library through ctypes, without the header) must be
the header's: a stale mirror passes a wrong length or enum value to the library. Exits 1 and
names each mismatch; run by CTest (cpu.bench_script_mirrors), no GPU or PyTorch needed.

    python3 bench/tools/check_script_mirrors.py [HEADER]
"""
import os
import re
import sys

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)

import compare_deepgemm  # noqa: E402
import compare_torch  # noqa: E402


def header_values(path):
    """{NAME: int} of the header's #defines with integer values and its enumerators."""
    text = open(path).read()
    values = {name: int(value) for name, value in
              re.findall(r"^#define (MOEGEMM_\w+) (\d+)\s*$", text, re.MULTILINE)}
    values.update({name: int(value) for name, value in
                   re.findall(r"^\s*(MOEGEMM_\w+) = (\d+),?", text, re.MULTILINE)})
    return values


def main():
    header = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        REPO_ROOT, "include", "moegemm", "moegemm.h")
    values = header_values(header)
    mirrors = [(module.__name__, name, getattr(module, name))
               for module in (compare_torch, compare_deepgemm)
               for name in dir(module) if name.startswith("MOEGEMM_")
               and isinstance(getattr(module, name), int)]
    mirrors += [("compare_torch", f"BACKENDS[{key!r}]", value)
                for key, value in compare_torch.BACKENDS.items()]
    header_backends = {"auto": "MOEGEMM_BACKEND_AUTO", "native": "MOEGEMM_BACKEND_NATIVE",
                       "cublaslt": "MOEGEMM_BACKEND_CUBLASLT"}
    failures = []
    checked = 0
    for module, name, value in mirrors:
        key = name
        if name.startswith("BACKENDS["):
            key = header_backends[name[len("BACKENDS['"):-2]]
        if key not in values:
            failures.append(f"{module}.{name}: no such constant in {header}")
        elif values[key] != value:
            failures.append(f"{module}.{name} = {value}, the header says {values[key]}")
        checked += 1
    for failure in failures:
        print(failure)
    print(f"check_script_mirrors: {checked} mirrored constants, {len(failures)} wrong")
    return 1 if failures or checked < 8 else 0


if __name__ == "__main__":
    sys.exit(main())
