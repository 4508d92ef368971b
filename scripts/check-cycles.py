#!/usr/bin/env python3
"""Lists import circles between the modules of each workspace crate (issue #15: no import circles).

A module is a file under a crate's src/ (src/a/b.rs and src/a/b/mod.rs are `a::b`). Module A uses
module B when A's code names `crate::B…`, `super::…` resolving to B, or imports them in a
`use crate::{…}` group. A parent and its own submodules may name each other (that is how Rust
modules nest); any other strongly connected set of two or more modules is a circle. Unit-test files
(`*_tests.rs`, `tests.rs`, `tests/` dirs, `test_support.rs`, `testutil.rs`) are left out: tests
may reach anything. Exit status 1 when a circle exists. Usage: scripts/check-cycles.py [ROOT]
"""
import os
import re
import sys

SKIP_DIRS = {"target", "libfuzzer", ".git", "corpus", "artifacts", "tests", "benches"}
TEST_FILE = re.compile(r"(_tests|^tests|^test_support|^testutil)\.rs$")


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strip(code):
    code = re.sub(r"//[^\n]*", "", code)
    code = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
    return re.sub(r'"(\\.|[^"\\])*"', '""', code)


def expand_group(body):
    """`a::{b, c::d}` -> [a::b, a::c::d] (one level of nesting is enough here)."""
    out, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    paths = []
    for item in out:
        m = re.match(r"([\w:]*)::\{(.*)\}$", item, re.S)
        if m:
            paths += [m.group(1) + "::" + p for p in expand_group(m.group(2))]
        else:
            paths.append(item)
    return paths


def referenced(code, me):
    refs = []
    for m in re.finditer(r"\bcrate::\{([^;]*?)\}\s*;", code, re.S):
        refs += [tuple(p.split("::")) for p in expand_group(m.group(1))]
    for m in re.finditer(r"\bcrate((?:::\w+)+)", code):
        refs.append(tuple(m.group(1).strip(":").split("::")))
    for m in re.finditer(r"\b((?:super::)+)(\w+(?:::\w+)*)", code):
        ups = m.group(1).count("super")
        base = me[: len(me) - ups] if ups <= len(me) else ()
        refs.append(base + tuple(m.group(2).split("::")))
    return refs


def circles(src):
    files = {}
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            if name.endswith(".rs") and not TEST_FILE.search(name):
                path = os.path.join(dirpath, name)
                files[module_of(src, path)] = path
    mods = set(files)
    graph = {m: set() for m in mods}
    for me, path in files.items():
        with open(path, encoding="utf-8", errors="replace") as f:
            code = strip(f.read())
        for ref in referenced(code, me):
            target = max((ref[:k] for k in range(1, len(ref) + 1) if ref[:k] in mods), key=len, default=None)
            if target is None or target == me:
                continue
            if target[: len(me)] == me or me[: len(target)] == target:
                continue  # parent and child
            graph[me].add(target)
    return [c for c in tarjan(graph) if len(c) > 1]


def tarjan(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    found = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in {"target", ".git", "libfuzzer"}]
        if "Cargo.toml" in filenames and os.path.isdir(os.path.join(dirpath, "src")):
            for comp in circles(os.path.join(dirpath, "src")):
                found += 1
                names = " <-> ".join("::".join(m) or "(crate root)" for m in comp)
                print(f"{os.path.relpath(dirpath, root)}: {names}")
    print(f"{found} import circles", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
