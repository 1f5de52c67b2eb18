#!/usr/bin/env python3
"""Checks bindings/julia/src/MoEGemm.jl against include/moegemm/moegemm.h without Julia:

- every `MOEGEMM_API ... moegemm_xxx(...)` of the header is called by exactly one `ccall`
  whose argument-type tuple has the header's parameter count, and which passes that many
  arguments;
- no `ccall` names a function the header does not declare;
- every status/enum constant and integer `#define MOEGEMM_*` of the header that MoEGemm.jl
  defines has the header's value, and every enumerator is defined;
- every struct of the header (`typedef struct ... { ... } moegemm_xxx_t;`) has its mirror
  (`mutable struct Xxx`: moegemm_moe_problem_t -> MoeProblem) with the same fields in the same
  order, each of the Julia type of its C type (enums Cint, pointers Ptr{...}).

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


# C scalar types of the structs' fields -> the Julia type of their mirror fields
C_SCALARS = {"size_t": "Csize_t", "int32_t": "Int32", "int64_t": "Int64", "uint32_t": "UInt32",
             "float": "Cfloat", "int": "Cint"}
# pointee C types -> Julia (Ptr{...})
C_POINTEES = {"void": "Cvoid", "char": "Cchar", "float": "Cfloat", "int32_t": "Int32",
              "int64_t": "Int64", "uint32_t": "UInt32"}


def header_enum_types(h):
    return set(re.findall(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;", h))


def header_structs(h):
    """{typedef name: [(field, julia type or None when unknown)]}, in field order."""
    enums = header_enum_types(h)
    out = {}
    for m in re.finditer(r"typedef\s+struct\s+\w+\s*\{([^}]*)\}\s*(\w+)\s*;", h):
        fields = []
        for decl in m.group(1).split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            name = re.findall(r"\w+", decl)[-1]
            shown = decl[:decl.rfind(name)].strip()
            ctype = shown.replace("const ", "").strip()
            if ctype.endswith("*"):
                base = ctype.rstrip("* ").strip()
                jtype = "Ptr{%s}" % C_POINTEES[base] if base in C_POINTEES else None
            elif ctype in enums:
                jtype = "Cint"
            else:
                jtype = C_SCALARS.get(ctype)
            fields.append((name, jtype, shown))
        out[m.group(2)] = fields
    return out


def julia_struct_name(c_name):
    """moegemm_moe_problem_t -> MoeProblem."""
    core = c_name[len("moegemm_"):-len("_t")]
    return "".join(part.capitalize() for part in core.split("_"))


def julia_structs(j):
    """{name: [(field, type)]} of every `mutable struct` / `struct`, in field order."""
    out = {}
    for m in re.finditer(r"^(?:mutable\s+)?struct\s+(\w+)\s*$(.*?)^end\b", j, flags=re.M | re.S):
        out[m.group(1)] = re.findall(r"^\s*(\w+)::(\S+)\s*$", m.group(2), flags=re.M)
    return out


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
    hs = header_structs(h)
    js = julia_structs(j)
    if len(hs) < 4:
        errors.append(f"parsed only {len(hs)} header structs: {sorted(hs)}")
    for cname, fields in sorted(hs.items()):
        jname = julia_struct_name(cname)
        if jname not in js:
            errors.append(f"{cname} has no mirror `mutable struct {jname}` in MoEGemm.jl")
            continue
        want = [(f, t) for f, t, _ in fields]
        got = js[jname]
        if [f for f, _ in want] != [f for f, _ in got]:
            errors.append(f"{jname} fields {[f for f, _ in got]} differ from {cname}'s "
                          f"{[f for f, _ in want]} (name or order)")
            continue
        for (field, jtype, ctype), (_, gtype) in zip(fields, got):
            if jtype is None:
                errors.append(f"{cname}.{field}: no Julia type known for C type {ctype!r}")
            elif gtype != jtype:
                errors.append(f"{jname}.{field}::{gtype}, but the header's {ctype} is {jtype}")
    return hf, calls, hs, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", default=os.path.join(ROOT, "include", "moegemm", "moegemm.h"))
    ap.add_argument("--julia", default=os.path.join(HERE, "src", "MoEGemm.jl"))
    args = ap.parse_args()
    with open(args.header) as f:
        header_text = f.read()
    with open(args.julia) as f:
        julia_text = f.read()
    hf, calls, hs, errors = check(header_text, julia_text)
    if errors:
        print(f"FAIL: {args.julia} is out of sync with {args.header}:")
        for e in errors:
            print("  " + e)
        return 1
    print(f"OK: {len(calls)} ccalls cover the header's {len(hf)} functions with matching argument "
          f"counts; {len(hs)} structs mirrored field by field")
    return 0


if __name__ == "__main__":
    sys.exit(main())
