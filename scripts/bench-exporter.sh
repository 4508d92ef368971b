#!/usr/bin/env bash
# Benchmark of gpuhook-exporter (prints numbers, asserts nothing) on two simulated nodes:
#   - dgx-h100: 8x H100, each time-sliced by 48 pods (384 pods, one process each, named through
#     a CRI socket: examples/fake_cri.rs), -k (per-pod series);
#   - a100-mig-mixed: 2x A100 in MIG mode (10 GPU instances), 4 pods per instance, -k.
# For each: scrape latency p50/p99/max over SCRAPES (default 500) sequential GET /metrics with the
# page cache off (--scrape-cache 0: every scrape renders; the default 1 s cache only makes it
# cheaper), CPU per scrape (the exporter's utime+stime over the scrapes, less what it used over
# the same time without scrapes), page size and series count, RSS (VmRSS, VmHWM).
# Targets: p99 < 50 ms on dgx-h100 x 48, RSS < 20 MB.
#
# dcgm-exporter cannot be compared here: it needs DCGM (libdcgm + nv-hostengine, which talk to
# the real driver, not to NVML alone), and there is no GPU on this machine.
#
#   scripts/bench-exporter.sh [SCRAPES]
# Builds the release exporter and mock NVML first unless GPUHOOK_BIN_DIR points at built ones.
# KEEP=1 keeps the work dir.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRAPES=${1:-500}

bin_dir=${GPUHOOK_BIN_DIR:-target/release}
if [ -z "${GPUHOOK_BIN_DIR:-}" ]; then
    cargo build --release -q -p gpuhook-exporter --bins
    cargo build --release -q -p gpuhook-mock-nvml
fi
[ -x target/debug/examples/fake_cri ] || cargo build -q -p gpuhook-exporter --example fake_cri
fake_cri=target/debug/examples/fake_cri

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-exporter.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    [ -n "${KEEP:-}" ] && echo "work dir: $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

# node DIR PROFILE: the mock NVML beside the profile, empty state.
node() {
    mkdir -p "$1/gpuhook-sim-state" "$1/proc"
    cp "$bin_dir/libgpuhook_mock_nvml.so" "$1/libnvidia-ml.so.1"
    cp "sim/profiles/$2.toml" "$1/gpuhook-sim-profile.toml"
}

# pods DIR DEVICE-UUID COUNT FIRST-PID: COUNT pods with one process each on the device.
pods() {
    local dir=$1 uuid=$2 n=$3 pid=$4 i id
    for ((i = 0; i < n; i++, pid++)); do
        id=$(printf '%064x' "$pid")
        mkdir -p "$dir/proc/$pid"
        printf '0::/kubepods.slice/kubepods-pod%08d_0000_0000_0000_000000000000.slice/cri-containerd-%s.scope\n' "$pid" "$id" \
            > "$dir/proc/$pid/cgroup"
        echo "$pid compute $((500 + i)) 1" >> "$dir/gpuhook-sim-state/processes-$uuid"
        echo "$id bench pod-$pid main" >> "$dir/containers"
    done
}

# run NAME DIR EXPECTED-POD-SERIES
run() {
    local name=$1 dir=$2 want=$3 port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$fake_cri" "$dir/cri.sock" "$dir/containers" & pids+=($!)
    "$bin_dir/gpuhook-exporter" -a "127.0.0.1:$port" --nvml-lib "$dir/libnvidia-ml.so.1" -k -c 1000 \
        --scrape-cache 0 --proc-root "$dir/proc" --cri-socket "$dir/cri.sock" 2> "$dir/exporter.log" &
    local ex=$!
    pids+=($ex)
    python3 - "$name" "$port" "$ex" "$SCRAPES" "$want" <<'PY'
import http.client, sys, time
name, port, pid, n, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
hz = 100
def get():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics"); r = c.getresponse(); body = r.read(); c.close()
    return body.decode()
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / hz
def status(k):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith(k): return int(l.split()[1]) / 1024
deadline = time.time() + 60
while True:
    try:
        page = get()
        named = sum(1 for l in page.splitlines() if l.startswith("gpuhook_pod_fb_used{") and 'pod="pod-' in l)
        if named >= want: break
    except OSError:
        pass
    if time.time() > deadline: sys.exit(f"{name}: exporter not ready ({named} of {want} pods named)")
    time.sleep(0.2)
t0, c0 = time.time(), cpu()
time.sleep(2.0)
idle_rate = (cpu() - c0) / (time.time() - t0)
lat = []
t0, c0 = time.time(), cpu()
for _ in range(n):
    s = time.perf_counter(); get(); lat.append((time.perf_counter() - s) * 1000)
wall = time.time() - t0
busy = max(cpu() - c0 - idle_rate * wall, 0.0)
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))]
series = sum(1 for l in page.splitlines() if l and not l.startswith("#"))
print(f"{name}: {n} scrapes, page {len(page)/1024:.0f} KiB, {series} series, {named} named pod series")
print(f"  latency ms: p50 {pct(50):.2f}  p99 {pct(99):.2f}  max {lat[-1]:.2f}   (target p99 < 50 ms: {pct(99)/50:.2f} of it)")
print(f"  CPU per scrape: {busy / n * 1000:.2f} ms   (collector at -c 1000 alone: {idle_rate*100:.1f} % of a core)")
print(f"  RSS: {status('VmRSS:'):.1f} MiB, peak {status('VmHWM:'):.1f} MiB   (target < 20 MB: {status('VmHWM:')*1.048576/20:.2f} of it)")
PY
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    pids=()
}

h=$work/dgx-h100
node "$h" dgx-h100
pid=10000
for uuid in $(grep -o 'GPU-[0-9a-f-]*' sim/profiles/dgx-h100.toml); do
    pods "$h" "$uuid" 48 "$pid"
    echo "gpu_util 90" > "$h/gpuhook-sim-state/telemetry-$uuid"
    pid=$((pid + 100))
done
run "dgx-h100 8 GPUs x 48 time-sliced pods" "$h" 384

m=$work/a100-mig-mixed
node "$m" a100-mig-mixed
pid=20000
for uuid in $(grep -o 'MIG-[0-9a-f-]*' sim/profiles/a100-mig-mixed.toml); do
    pods "$m" "$uuid" 4 "$pid"
    pid=$((pid + 100))
done
run "a100-mig-mixed 10 GPU instances x 4 pods" "$m" 40
