#!/usr/bin/env python3
"""Lists Rust functions over 80 lines and files over 400 lines (issue #15: one sitting per read).

A function may exceed the limit when the line before its signature (or its doc comment block) holds
`// long: <reason>`; a file when one of its first 5 lines holds `// long-file: <reason>`.
Exit status 1 when anything is over without a reason. Usage: scripts/check-size.py [ROOT]
"""
import os
import re
import sys

FN_LIMIT = 80
FILE_LIMIT = 400
SKIP_DIRS = {"target", "libfuzzer", ".git", "corpus", "artifacts"}
FN_RE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")


def strip_strings(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def functions(lines):
    i = 0
    while i < len(lines):
        m = FN_RE.match(lines[i])
        if not m:
            i += 1
            continue
        start, depth, opened, j = i, 0, False, i
        while j < len(lines):
            code = strip_strings(lines[j])
            if not opened and ";" in code and "{" not in code:
                break  # a declaration without a body
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0:
                yield m.group(7), start, j - start + 1
                break
            j += 1
        i = start + 1


def has_reason(lines, start, tag):
    k = start - 1
    while k >= 0 and (lines[k].strip().startswith("///") or lines[k].strip().startswith("#[")):
        k -= 1
    window = lines[max(k, 0):start]
    return any(tag in line for line in window)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().split("\n")
            if len(lines) > FILE_LIMIT and not any("// long-file:" in l for l in lines[:5]):
                problems.append(f"{path}: file has {len(lines)} lines (limit {FILE_LIMIT})")
            for fn, start, length in functions(lines):
                if length > FN_LIMIT and not has_reason(lines, start, "// long:"):
                    problems.append(f"{path}:{start + 1}: fn {fn} has {length} lines (limit {FN_LIMIT})")
    for p in sorted(problems):
        print(p)
    print(f"{len(problems)} over the limits", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
