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
# With --nvidia-ctk PATH (an nvidia-ctk you built yourself from NVIDIA's public source; never
# needed) it also times `nvidia-ctk cdi generate` on the same nodes in the same run, as NVIDIA
# documents it (`--output nvidia.yaml`; it always writes), and prints the ratio of our times to
# NVIDIA's (target: ours < 1/10). nvidia-ctk is timed inside one private mount namespace per node
# (see bench_in_node_ns), so the namespace set-up is not in its times.
#
# Run as root (materialising a node needs mknod):
#   sudo scripts/bench-cdi-generate.sh [RUNS] [--nvidia-ctk PATH]
# Builds the release binaries first unless GPUHOOK_BIN_DIR points at already built ones. KEEP=1
# keeps the work dir.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

RUNS=30 NV_CTK=""
while [ $# -gt 0 ]; do
    case $1 in
        --nvidia-ctk) NV_CTK=$(realpath "${2:?}"); shift 2 ;;
        [0-9]*) RUNS=$1; shift ;;
        *) sed -n '18,19p' "$0" >&2; exit 2 ;;
    esac
done
bench_preflight "$RUNS" 10 "materialising a simulated node needs mknod" perl unshare
[ -z "$NV_CTK" ] || [ -x "$NV_CTK" ] || { echo "$NV_CTK is not an executable nvidia-ctk" >&2; exit 2; }
if [ -z "${GPUHOOK_BIN_DIR:-}" ]; then
    cargo build --release -p gpuhook --bin gpuhook >&2
    cargo build --release -p gpuhook-sim -p gpuhook-mock-nvml -p gpuhook-sim-mps-control >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
else
    BIN_DIR=$GPUHOOK_BIN_DIR
fi
GPUHOOK=$BIN_DIR/gpuhook

bench_work_dir gpuhook-bench-cdi
bench_watchdog "${BENCH_TIMEOUT:-1200}"

# `perl -MTime::HiRes=time -e "$TIME_RUNS" LOG RUNS CMD...` prints the wall time (ms) of RUNS
# runs of CMD, whose stderr goes to LOG. perl times each run (fork+exec+wait) without the noise of extra `date` processes; FRESH, when
# set, is removed before each run.
# shellcheck disable=SC2016 # perl's variables
TIME_RUNS='
    open(my $log, ">", shift) or die; my $runs = shift;
    open(STDERR, ">&", $log) or die;
    for (1 .. $runs) {
        unlink $ENV{FRESH} if $ENV{FRESH};
        my $t = time; system(@ARGV) == 0 or die "@ARGV failed";
        printf "%.3f\n", (time - $t) * 1000;
    }'
declare -A P50

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
        FRESH=$([ "$mode" = fresh ] && echo "$out" || true) perl -MTime::HiRes=time -e "$TIME_RUNS" \
            "$WORK/log" "$RUNS" "$GPUHOOK" "${args[@]}" >"$WORK/times"
        phase() { grep -o "\"$1\":[0-9]*" "$WORK/log" | cut -d: -f2 | pct 50; }
        P50[$profile-$mode]=$(pct 50 <"$WORK/times")
        printf '%-16s %-8s %5s %9.2f %9.2f %9.2f   %s %s %s %s\n' "$profile" "$mode" "$RUNS" \
            "$(pct 50 <"$WORK/times")" "$(pct 95 <"$WORK/times")" "$(pct 100 <"$WORK/times")" \
            "$(phase discover_us)" "$(phase generate_us)" "$(phase write_us)" "$(phase cache_us)"
    done
    [ -n "$NV_CTK" ] || continue
    lib_dir=$("$BIN_DIR/gpuhook-sim" show "$profile" | awk -F'"' '/^lib_dir/ {print $2}')
    nv_out=$WORK/nv-$profile/nvidia.yaml
    nv_args=(cdi generate --driver-root "$root" --dev-root "$root" --output "$nv_out"
             --nvidia-cdi-hook-path /usr/bin/nvidia-cdi-hook)
    bench_nvidia_ctk_generate "$NV_CTK" "$root" "$lib_dir" "$nv_out" "${nv_args[@]:2}" # warm-up
    bench_in_node_ns "$root" "$lib_dir" perl -MTime::HiRes=time -e "$TIME_RUNS" \
        "$WORK/nv-log" "$RUNS" "$NV_CTK" "${nv_args[@]}" >"$WORK/times"
    P50[$profile-nvidia]=$(pct 50 <"$WORK/times")
    printf '%-16s %-8s %5s %9.2f %9.2f %9.2f   (nvidia-ctk, %s devices)\n' "$profile" nvidia "$RUNS" \
        "$(pct 50 <"$WORK/times")" "$(pct 95 <"$WORK/times")" "$(pct 100 <"$WORK/times")" \
        "$(grep -c '^    - name:' "$nv_out")"
done
# Process baselines on this machine, for comparison: spawning anything, and gpuhook doing nothing.
for base in /bin/true "$GPUHOOK --version"; do
    # shellcheck disable=SC2086 # $base is a command and its arguments
    perl -MTime::HiRes=time -e '
        my $runs = shift; open(STDOUT, ">", "/dev/null") or die;
        for (1 .. $runs) { my $t = time; system(@ARGV) == 0 or die; printf STDERR "%.3f\n", (time - $t) * 1000 }
        ' "$RUNS" $base 2>"$WORK/times"
    printf '%-25s %5s %9.2f %9.2f %9.2f   (baseline)\n' "$(basename "${base%% *}")${base#"${base%% *}"}" "$RUNS" \
        "$(pct 50 <"$WORK/times")" "$(pct 95 <"$WORK/times")" "$(pct 100 <"$WORK/times")"
done
if [ -n "$NV_CTK" ]; then
    for profile in dgx-h100 a100-mig-mixed; do
        awk -v p="$profile" -v f="${P50[$profile-fresh]}" -v r="${P50[$profile-refresh]}" -v n="${P50[$profile-nvidia]}" \
            'BEGIN { printf "%-16s ours/nvidia-ctk p50: fresh %.3f (1/%.1f), refresh %.3f (1/%.1f) [target < 0.1: %s]\n",
                     p, f / n, n / f, r / n, n / r, (f / n < 0.1 ? "met" : "MISSED") }'
    done
else
    echo "(no --nvidia-ctk PATH: nvidia-ctk not timed)"
fi
echo "devices: $(grep -c '"name"' "$WORK/out-dgx-h100/nvidia.com-gpu.json") (dgx-h100), $(grep -c '"name"' "$WORK/out-a100-mig-mixed/nvidia.com-gpu.json") (a100-mig-mixed); target p50 <= 5 ms"
