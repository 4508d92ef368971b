#!/usr/bin/env bash
# Benchmark of `gpuhook cdi generate` (a benchmark that prints numbers, not a timed test).
#
# For the dgx-h100 and a100-mig-mixed reference nodes it runs the release binary RUNS times (default
# 30) in two situations and prints p50/p95/max of the wall-clock time of the whole process:
#   - refresh: the spec on disk is already up to date (what a boot-time / udev refresh does);
#   - fresh:   no spec on disk (full write: temp file, fsync, rename, directory fsync).
# It also prints the median of gpuhook's own phase timings (debug log `cdi generate timings`:
# discovery incl. NVML, spec generation + validation, write, inventory cache) to show what
# dominates. Target: p50 <= 5 ms.
#
# Run as root (materialising a node needs mknod):
#   sudo scripts/bench-cdi-generate.sh [RUNS]
# Builds the release binaries first unless GPUHOOK_BIN_DIR points at already built ones. KEEP=1
# keeps the work dir.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

RUNS=${1:-30}
bench_preflight "$RUNS" 20 "materialising a simulated node needs mknod" perl
if [ -z "${GPUHOOK_BIN_DIR:-}" ]; then
    cargo build --release -p gpuhook --bin gpuhook >&2
    cargo build --release -p gpuhook-sim -p gpuhook-mock-nvml -p gpuhook-sim-mps-control >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
else
    BIN_DIR=$GPUHOOK_BIN_DIR
fi
GPUHOOK=$BIN_DIR/gpuhook

bench_work_dir gpuhook-bench-cdi

printf '%-16s %-8s %5s %9s %9s %9s   %s\n' node mode runs p50_ms p95_ms max_ms \
    'median phases (us): discover generate write cache'
for profile in dgx-h100 a100-mig-mixed; do
    root=$WORK/$profile
    "$BIN_DIR/gpuhook-sim" build "$profile" "$root" \
        --mock-nvml "$BIN_DIR/libgpuhook_mock_nvml.so" --bin-dir "$BIN_DIR" >/dev/null
    out=$WORK/out-$profile/nvidia.com-gpu.json
    args=(--log-level debug --log-format json cdi generate --driver-root "$root" --output "$out"
          --inventory-cache "$WORK/inventory-$profile.json")
    "$GPUHOOK" "${args[@]}" 2>/dev/null # warm the page cache
    for mode in refresh fresh; do
        # perl times each run (fork+exec+wait) without the noise of extra `date` processes.
        FRESH=$([ "$mode" = fresh ] && echo "$out" || true) perl -MTime::HiRes=time -e '
            open(my $log, ">", shift) or die; my $runs = shift;
            open(STDERR, ">&", $log) or die;
            for (1 .. $runs) {
                unlink $ENV{FRESH} if $ENV{FRESH};
                my $t = time; system(@ARGV) == 0 or die "@ARGV failed";
                printf "%.3f\n", (time - $t) * 1000;
            }' "$WORK/log" "$RUNS" "$GPUHOOK" "${args[@]}" >"$WORK/times"
        phase() { grep -o "\"$1\":[0-9]*" "$WORK/log" | cut -d: -f2 | pct 50; }
        printf '%-16s %-8s %5s %9.2f %9.2f %9.2f   %s %s %s %s\n' "$profile" "$mode" "$RUNS" \
            "$(pct 50 <"$WORK/times")" "$(pct 95 <"$WORK/times")" "$(pct 100 <"$WORK/times")" \
            "$(phase discover_us)" "$(phase generate_us)" "$(phase write_us)" "$(phase cache_us)"
    done
done
# Process baselines on this machine, for comparison: spawning anything, and gpuhook doing nothing.
for base in /bin/true "$GPUHOOK --version"; do
    perl -MTime::HiRes=time -e '
        my $runs = shift; open(STDOUT, ">", "/dev/null") or die;
        for (1 .. $runs) { my $t = time; system(@ARGV) == 0 or die; printf STDERR "%.3f\n", (time - $t) * 1000 }
        ' "$RUNS" $base 2>"$WORK/times"
    printf '%-25s %5s %9.2f %9.2f %9.2f   (baseline)\n' "$(basename "${base%% *}")${base#"${base%% *}"}" "$RUNS" \
        "$(pct 50 <"$WORK/times")" "$(pct 95 <"$WORK/times")" "$(pct 100 <"$WORK/times")"
done
echo "devices: $(grep -c '"name"' "$WORK/out-dgx-h100/nvidia.com-gpu.json") (dgx-h100), $(grep -c '"name"' "$WORK/out-a100-mig-mixed/nvidia.com-gpu.json") (a100-mig-mixed); target p50 <= 5 ms"
