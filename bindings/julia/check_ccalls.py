#!/usr/bin/env python3
"""Checks bindings/julia/src/MoEGemm.jl against include/moegemm/moegemm.h without Julia:

- every `MOEGEMM_API ... moegemm_xxx(...)` of the header is called by exactly one `ccall`
  whose argument-type tuple has the header's parameter count, and which passes that many
  arguments;
- no `ccall` names a function the header does not declare;
- every status/enum constant and integer `#define MOEGEMM_*` of the header that MoEGemm.jl
  defines has the header's value, and every enumerator is defined.

usage: check_ccalls.py [--header H] [--julia J]     exit 0 ok, 1 drift
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def strip_c_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", "", s)


def strip_julia_comments(s):
    s = re.sub(r"#=.*?=#", " ", s, flags=re.S)
    s = re.sub(r'"""(.*?)"""', '""', s, flags=re.S)  # docstrings
    return re.sub(r"#[^\n]*", "", s)


def matching(s, open_idx):
    """Index of the bracket closing s[open_idx]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for i in range(open_idx, len(s)):
        c = s[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                raise ValueError(f"unbalanced bracket at {i}")
            if not stack:
                return i
    raise ValueError(f"unclosed bracket at {open_idx}")


def split_top(s):
    """Top-level comma-separated pieces, empty pieces (trailing comma) dropped."""
    out, depth, cur = [], 0, ""
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
    out.append(cur)
    return [p.strip() for p in out if p.strip()]


def header_functions(h):
    fns = {}
    for m in re.finditer(r"^\s*MOEGEMM_API\b([^(;]*?)\b(moegemm_\w+)\s*\(", h, flags=re.M):
        name = m.group(2)
        open_idx = m.end() - 1
        params = split_top(h[open_idx + 1:matching(h, open_idx)])
        if params == ["void"]:
            params = []
        if name in fns:
            raise SystemExit(f"{name} declared twice in the header")
        fns[name] = len(params)
    return fns


def header_constants(h):
    out = {}
    for m in re.finditer(r"^\s*#define\s+(MOEGEMM_\w+)\s+(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*$", h, flags=re.M):
        out[m.group(1)] = int(m.group(2), 0)
    for m in re.finditer(r"^\s*(MOEGEMM_\w+)\s*=\s*(0[xX][0-9a-fA-F]+|-?\d+)\s*,?\s*$", h, flags=re.M):
        out[m.group(1)] = int(m.group(2), 0)
    return out


def julia_ccalls(j):
    """[(name, n_types, n_args, line)] for every ccall((:name, lib), ret, (types...), args...)."""
    calls = []
    for m in re.finditer(r"\bccall\s*\(", j):
        open_idx = m.end() - 1
        parts = split_top(j[open_idx + 1:matching(j, open_idx)])
        line = j.count("\n", 0, m.start()) + 1
        if len(parts) < 3:
            raise SystemExit(f"line {line}: cannot parse ccall")
        fm = re.match(r"^\(\s*:(\w+)\s*,", parts[0])
        if not fm:
            raise SystemExit(f"line {line}: ccall target {parts[0]!r} is not (:name, lib)")
        types = parts[2]
        if not (types.startswith("(") and types.endswith(")")):
            raise SystemExit(f"line {line}: argument types {types!r} are not a tuple literal")
        calls.append((fm.group(1), len(split_top(types[1:-1])), len(parts) - 3, line))
    return calls


def julia_constants(j):
    out = {}
    for m in re.finditer(r"^const\s+(MOEGEMM_\w+)\s*=\s*(?:\w+\()?\s*(0[xX][0-9a-fA-F]+|-?\d+)\s*\)?\s*$", j, flags=re.M):
        out[m.group(1)] = int(m.group(2), 0)
    return out


def check(header_text, julia_text):
    h = strip_c_comments(header_text)
    j = strip_julia_comments(julia_text)
    errors = []
    hf = header_functions(h)
    if len(hf) < 10:
        errors.append(f"parsed only {len(hf)} header functions: {sorted(hf)}")
    calls = julia_ccalls(j)
    seen = {}
    for name, ntypes, nargs, line in calls:
        if name not in hf:
            errors.append(f"line {line}: ccall to {name}, which the header does not declare")
            continue
        if ntypes != hf[name]:
            errors.append(f"line {line}: {name} has {hf[name]} parameters in the header, "
                          f"{ntypes} argument types in the ccall")
        if nargs != ntypes:
            errors.append(f"line {line}: {name} ccall passes {nargs} arguments for {ntypes} types")
        seen.setdefault(name, []).append(line)
    for name in sorted(hf):
        if name not in seen:
            errors.append(f"{name} ({hf[name]} params) is declared in the header but not wrapped")
        elif len(seen[name]) > 1:
            errors.append(f"{name} is wrapped by several ccalls (lines {seen[name]})")
    hc = header_constants(h)
    jc = julia_constants(j)
    for name, v in sorted(hc.items()):
        if name in jc and jc[name] != v:
            errors.append(f"{name}: header {v}, MoEGemm.jl {jc[name]}")
        elif name not in jc and not name.startswith("MOEGEMM_VERSION"):
            errors.append(f"{name} = {v} is not defined in MoEGemm.jl")
    return hf, calls, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", default=os.path.join(ROOT, "include", "moegemm", "moegemm.h"))
    ap.add_argument("--julia", default=os.path.join(HERE, "src", "MoEGemm.jl"))
    args = ap.parse_args()
    with open(args.header) as f:
        header_text = f.read()
    with open(args.julia) as f:
        julia_text = f.read()
    hf, calls, errors = check(header_text, julia_text)
    if errors:
        print(f"FAIL: {args.julia} is out of sync with {args.header}:")
        for e in errors:
            print("  " + e)
        return 1
    print(f"OK: {len(calls)} ccalls cover the header's {len(hf)} functions with matching argument counts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
