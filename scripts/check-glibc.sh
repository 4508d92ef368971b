#!/usr/bin/env bash
# Fails when an ELF file in DIR needs a glibc newer than the floor (default 2.17, GPUHOOK_GLIBC):
# reads the GLIBC_x.y symbol versions each file references (its .gnu.version_r section, what the
# dynamic loader checks at start-up) and compares the highest one with the floor. A file that
# needs none (static) passes; a file that is not ELF is skipped.
#
#   scripts/check-glibc.sh DIR
set -euo pipefail

dir="${1:?usage: check-glibc.sh DIR (a directory of binaries)}"
floor="${GPUHOOK_GLIBC:-2.17}"
[ -d "$dir" ] || { echo "check-glibc: $dir is not a directory" >&2; exit 2; }
command -v readelf >/dev/null 2>&1 || { echo "check-glibc: readelf missing (apt-get install binutils)" >&2; exit 2; }

# Sorts versions numerically (2.9 < 2.17 < 2.28) and prints the highest.
highest() { sort -t. -k1,1n -k2,2n -k3,3n | tail -n1; }

status=0
checked=0
for f in "$dir"/*; do
    [ -f "$f" ] || continue
    head -c4 "$f" | grep -q $'\x7fELF' || continue
    checked=$((checked + 1))
    # Only version *needs* (what the file requires from libc), not the versions it defines.
    needs=$(readelf --version-info --wide "$f" |
        awk '/^Version needs section/ {n=1; next} /^Version (symbols|definition)/ {n=0} n' |
        grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -u || true)
    if [ -z "$needs" ]; then
        echo "check-glibc: $(basename "$f"): no glibc symbol versions (static or not linked to glibc)"
        continue
    fi
    top=$(printf '%s\n' "$needs" | highest)
    if [ "$(printf '%s\n%s\n' "$top" "$floor" | highest)" != "$floor" ]; then
        echo "check-glibc: $(basename "$f") needs GLIBC_$top, above the floor $floor: build it with scripts/build-release.sh" >&2
        status=1
    else
        echo "check-glibc: $(basename "$f"): highest GLIBC_$top <= $floor"
    fi
done
if [ "$checked" -eq 0 ]; then
    echo "check-glibc: no ELF files in $dir" >&2
    exit 2
fi
exit "$status"
