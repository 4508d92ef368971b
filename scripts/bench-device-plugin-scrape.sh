#!/usr/bin/env bash
# Benchmark (prints numbers, asserts nothing) of issue #22's "a scrape can stall allocation":
# Allocate round trips of the release gpuhook-device-plugin with and without 32 clients looping
# `GET /metrics` (a new connection each, as the issue's scrapers did), on a simulated dgx-h100
# (8x H100, mock NVML) time-sliced 48 ways (384 device IDs). Both are measured in the same run,
# alternating per run, and the script prints the medians and the ratio with/without scrapers
# (the issue measured ~3 ms -> ~600 ms p50, max 1.8 s, before the fix).
#
# Usage: scripts/bench-device-plugin-scrape.sh [RUNS] [ALLOCS] [SCRAPERS]
#        (RUNS >= 3, default 5; ALLOCS 1000; SCRAPERS 32)
# Env:   CARGO_TARGET_DIR (default: target), KEEP=1 keeps the work dir, PROFILE=debug smoke-tests
#        the script on the debug build (its figures are not comparable).
set -euo pipefail

RUNS=${1:-5}
ALLOCS=${2:-1000}
SCRAPERS=${3:-32}
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/scripts/bench-lib.sh"
bench_preflight "$RUNS" 3 "the simulated node's device files" python3

bench_dp_setup "$REPO" gpuhook-bench-dp-scrape 900

port=$((20000 + $$ % 20000))
for i in $(seq 1 "$RUNS"); do
  for n in 0 "$SCRAPERS"; do
    rm -rf "$WORK/plugins" && mkdir "$WORK/plugins"
    : >"$EVENTS"
    port=$((port + 1))
    SCRAPERS=$n SCRAPE_ADDR=127.0.0.1:$port "$BIN/examples/bench_client" "$WORK/plugins" "$EVENTS" "$ALLOCS" -- \
      "$BIN/gpuhook-device-plugin" serve --config "$WORK/config.yaml" --driver-root "$WORK/node" \
      --plugin-dir "$WORK/plugins" --metrics-listen "127.0.0.1:$port" \
      >"$WORK/run-$i-$n.txt" 2>"$WORK/plugin-$i-$n.log"
    echo "run $i, $n scrapers: $(tr '\n' ' ' <"$WORK/run-$i-$n.txt")" >&2
  done
done

python3 - "$WORK" "$RUNS" "$PROFILE" "$SCRAPERS" <<'PY'
import statistics, sys
work, runs, profile, scrapers = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(n):
    vals = {}
    for i in range(1, runs + 1):
        for line in open(f"{work}/run-{i}-{n}.txt"):
            for kv in line.split():
                k, _, v = kv.partition("=")
                try:
                    x = float(v)
                except ValueError:
                    continue
                vals.setdefault(k, []).append(x)
    return {k: statistics.median(v) for k, v in vals.items()}
base, load_ = load("0"), load(scrapers)
print(f"gpuhook-device-plugin ({profile} build) on dgx-h100, time-slicing x48, median of {runs} runs, "
      f"{int(base['allocs'])} Allocates each; {scrapers} scrapers served {int(load_.get('scrapes_ok', 0))} "
      f"scrapes per run ({int(load_.get('scrapes_failed', 0))} failed)")
print(f"{'figure':16} {'no scrapers':>12} {scrapers + ' scrapers':>12}   ratio")
for k in ("alloc_p50_ms", "alloc_p99_ms", "alloc_mean_ms"):
    print(f"{k:16} {base[k]:9.3f} ms {load_[k]:9.3f} ms   {load_[k] / base[k]:.2f}")
PY
