#!/usr/bin/env bash
# Benchmark of `gpuhook-mig-parted apply` on a simulated A100-SXM4-80GB (a benchmark that prints
# numbers, not a timed test).
#
# GPU 0 of the a100-mig-mixed reference node is first emptied (config `all-enabled`: MIG on, no
# instances); then, RUNS times (default 20):
#   - full:  apply 7x 1g.10gb to the empty GPU (timed), then
#   - no-op: apply the same config again (timed; target p50 < 50 ms and zero NVML writes),
#   - reset: back to empty (not timed).
# The mock NVML counts the MIG calls it serves (`count-calls` switch, gpuhook_sim::mig_state):
# the report gives NVML reads and writes per apply, and the ratio no-op / full.
#
# Run as root (materialising a node needs mknod):
#   sudo scripts/bench-mig.sh [RUNS]
# Builds the release binaries first unless GPUHOOK_BIN_DIR points at built ones. KEEP=1 keeps
# the work dir.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

RUNS=${1:-20}
bench_preflight "$RUNS" 5 "materialising a simulated node needs mknod"
if [ -z "${GPUHOOK_BIN_DIR:-}" ]; then
    cargo build --release -p gpuhook-mig-manager --bin gpuhook-mig-parted >&2
    cargo build --release -p gpuhook-sim -p gpuhook-mock-nvml >&2
    BIN_DIR=${CARGO_TARGET_DIR:-target}/release
else
    BIN_DIR=$GPUHOOK_BIN_DIR
fi
BIN_DIR=$(realpath "$BIN_DIR")
bench_work_dir gpuhook-bench-mig
root=$WORK/root
"$BIN_DIR/gpuhook-sim" build a100-mig-mixed "$root" \
    --mock-nvml "$BIN_DIR/libgpuhook_mock_nvml.so" --bin-dir "$BIN_DIR" >/dev/null
lib_dir=$("$BIN_DIR/gpuhook-sim" show a100-mig-mixed | awk -F'"' '/^lib_dir/ {print $2}')
state=$root$lib_dir/gpuhook-sim-state
mkdir -p "$state"
cat >"$WORK/config.yaml" <<'YAML'
version: v1
mig-configs:
  all-enabled:
    - devices: [0]
      mig-enabled: true
      mig-devices: {}
  all-1g.10gb:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
YAML
apply() { "$BIN_DIR/gpuhook-mig-parted" --driver-root "$root" apply -f "$WORK/config.yaml" -c "$1" >/dev/null; }
apply all-enabled
touch "$state/count-calls"
: >"$WORK/full.times"
: >"$WORK/noop.times"
calls() { local kind=$1; grep -c "^$kind " "$state/calls.log" || true; }
for _ in $(seq "$RUNS"); do
    apply all-enabled
    : >"$state/calls.log"
    s=$(date +%s%N); apply all-1g.10gb; e=$(date +%s%N)
    echo $((e - s)) >>"$WORK/full.times"
    echo "$(calls R) $(calls W)" >"$WORK/full.calls"
    : >"$state/calls.log"
    s=$(date +%s%N); apply all-1g.10gb; e=$(date +%s%N)
    echo $((e - s)) >>"$WORK/noop.times"
    echo "$(calls R) $(calls W)" >"$WORK/noop.calls"
done
instances=$(grep -c '"uuid"' "$state/mig-$("$BIN_DIR/gpuhook-sim" show a100-mig-mixed | awk -F'"' '/^uuid/ {print $2; exit}').json")
{ echo "$BENCH_PY_STATS"; cat <<'PY'
full, noop = load("full"), load("noop")
fr, fw = open(f"{work}/full.calls").read().split()
nr, nw = open(f"{work}/noop.calls").read().split()
print(f"{'apply':<24} {'runs':>5} {'p50_ms':>8} {'p95_ms':>8} {'max_ms':>8} {'nvml_reads':>11} {'nvml_writes':>12}")
print(f"{'empty -> 7x 1g.10gb':<24} {runs:>5} {pct(full, 50):8.2f} {pct(full, 95):8.2f} {max(full):8.2f} {fr:>11} {fw:>12}")
print(f"{'no-op re-apply':<24} {runs:>5} {pct(noop, 50):8.2f} {pct(noop, 95):8.2f} {max(noop):8.2f} {nr:>11} {nw:>12}")
print(f"no-op / full (p50): {pct(noop, 50) / pct(full, 50):.2f}; target: no-op p50 < 50 ms with 0 writes: "
      + ("met" if pct(noop, 50) < 50 and nw == "0" else "NOT met"))
PY
} | python3 - "$WORK" "$RUNS"
echo "GPU 0 ends with $instances MIG devices (expected 7)"
