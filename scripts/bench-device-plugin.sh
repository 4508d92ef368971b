#!/usr/bin/env bash
# Benchmark of gpuhook-device-plugin (a benchmark, not a test: it prints numbers and asserts
# nothing), on a simulated dgx-h100 node (8x H100, mock NVML) time-sliced 48 ways: 384 device
# IDs `<uuid>::0..47` under nvidia.com/gpu.
#
# Each run starts the release plugin under device-plugin/examples/bench_client.rs, which plays
# the kubelet (registration server, ListAndWatch, Allocate over the real unix socket) and prints:
#   start_to_registration_ms   spawn -> the plugin's Register call
#   alloc_p50_ms / p99 / mean  Allocate round trips (ALLOCS per run, one replica each)
#   xid_to_unhealthy_ms        critical Xid appended to the mock NVML's events file -> the
#                              ListAndWatch update showing that GPU Unhealthy
#   vm_hwm_kb                  the plugin's peak RSS (/proc/<pid>/status VmHWM)
# The script prints the median over RUNS runs of each figure and its ratio to NVIDIA's
# k8s-device-plugin as measured in issue 16 (RSS 24.5-26.9 MB, start to registration
# 4.5-12.5 ms, Allocate ~2 ms).
#
# Usage: scripts/bench-device-plugin.sh [RUNS] [ALLOCS]    (RUNS >= 3, default 5; ALLOCS 2000)
# Env:   CARGO_TARGET_DIR (default: target), KEEP=1 keeps the work dir, PROFILE=debug smoke-tests
#        the script on the debug build (its figures are not comparable).
set -euo pipefail

RUNS=${1:-5}
ALLOCS=${2:-2000}
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/scripts/bench-lib.sh"
bench_preflight "$RUNS" 3 "the simulated node's device files" python3

bench_dp_setup "$REPO" gpuhook-bench-dp 600

for i in $(seq 1 "$RUNS"); do
  rm -rf "$WORK/plugins" && mkdir "$WORK/plugins"
  : >"$EVENTS"
  "$BIN/examples/bench_client" "$WORK/plugins" "$EVENTS" "$ALLOCS" -- \
    "$BIN/gpuhook-device-plugin" serve --config "$WORK/config.yaml" --driver-root "$WORK/node" \
    --plugin-dir "$WORK/plugins" >"$WORK/run-$i.txt" 2>"$WORK/plugin-$i.log"
  echo "run $i: $(tr '\n' ' ' <"$WORK/run-$i.txt")" >&2
done

python3 - "$WORK" "$RUNS" "$PROFILE" <<'PY'
import statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
vals = {}
for i in range(1, runs + 1):
    for line in open(f"{work}/run-{i}.txt"):
        for kv in line.split():
            k, _, v = kv.partition("=")
            try:
                x = float(v)
            except ValueError:
                continue
            vals.setdefault(k, []).append(x)
med = {k: statistics.median(v) for k, v in vals.items()}
print(f"gpuhook-device-plugin ({sys.argv[3]} build) on dgx-h100, time-slicing x48 ({int(med['devices'])} device IDs), "
      f"median of {runs} runs, {int(med['allocs'])} Allocates each")
rows = [
    ("start to registration", med["start_to_registration_ms"], "ms", (4.5, 12.5)),
    ("Allocate p50", med["alloc_p50_ms"], "ms", (2.0, 2.0)),
    ("Allocate p99", med["alloc_p99_ms"], "ms", (2.0, 2.0)),
    ("Allocate mean", med["alloc_mean_ms"], "ms", (2.0, 2.0)),
    ("Xid -> ListAndWatch Unhealthy", med["xid_to_unhealthy_ms"], "ms", None),
    ("RSS (VmHWM)", med["vm_hwm_kb"] / 1000.0, "MB", (24.5, 26.9)),
]
print(f"{'figure':32} {'gpuhook':>10}   {'NVIDIA':>11}   ratio (gpuhook/NVIDIA)")
for name, v, unit, ref in rows:
    if ref is None:
        print(f"{name:32} {v:8.3f} {unit}   {'-':>11}   (NVIDIA: no figure; issue target < 1000 ms)")
        continue
    lo, hi = ref
    nv = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
    ratio = f"{v / lo:.2f}" if lo == hi else f"{v / hi:.2f}-{v / lo:.2f}"
    print(f"{name:32} {v:8.3f} {unit}   {nv:>8} {unit}   {ratio}")
PY
