#!/usr/bin/env bash
# Benchmark of `gpuhook prestart` as a runc prestart hook (a benchmark, not a test: it prints
# numbers and asserts nothing).
#
# What it measures: the wall time of `runc run` of a busybox container (`sh -c true`) on a
# simulated dgx-h100 node (8 GPUs), in four variants, interleaved so drift hits all alike:
#   gpu+hook    NVIDIA_VISIBLE_DEVICES=all, compute,utility, hook installed (mknod, 30+ bind
#               mounts, symlinks, sandboxed host ldconfig, device cgroup)
#   gpu-nohook  same config.json without the hook
#   plain+hook  no GPU request, hook installed (the fast path: exits before any discovery)
#   plain-nohook
#   plain+true  no GPU request, hook = /bin/true: the fixed cost of *any* runc hook (runc's hook
#               machinery + one fork/exec), the floor under the plain+hook number
# and prints p50/p95 per variant plus the hook's added cost (p50/p95 difference, ratio).
# Targets: <= 15 ms added p50 for the GPU container (ldconfig included), <= 2 ms for the plain one.
#
# Usage: sudo scripts/bench-prestart.sh [RUNS]      (RUNS >= 30, default 40)
# Env:   CARGO_TARGET_DIR (default: target), KEEP=1 keeps the work dir,
#        GPUHOOK_BIN=/path/to/gpuhook benchmarks another build of the hook (e.g. a static one:
#        RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" cargo build --release
#        -p gpuhook --target x86_64-unknown-linux-gnu).
set -euo pipefail

RUNS=${1:-40}
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/scripts/bench-lib.sh"
bench_preflight "$RUNS" 30 "runc, mknod, mounts" runc python3 busybox

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
echo "building release binaries in $CARGO_TARGET_DIR ..." >&2
(cd "$REPO" && cargo build --release -q -p gpuhook -p gpuhook-sim -p gpuhook-mock-nvml)
BIN=$CARGO_TARGET_DIR/release
HOOK=${GPUHOOK_BIN:-$BIN/gpuhook}
echo "hook binary: $HOOK" >&2

bench_work_dir gpuhook-bench

"$BIN/gpuhook-sim" build dgx-h100 "$WORK/node" >/dev/null
cat >"$WORK/config.toml" <<EOF
driver-root = "$WORK/node"
inventory-cache = "$WORK/inventory.json"
log-file = "$WORK/hook.log"
EOF

# Busybox rootfs (Debian-like), one per variant so no run sees another's files.
make_bundle() { # name gpu(0|1) hook(0|1|true)
  local b=$WORK/$1
  bench_busybox_rootfs "$b/rootfs"
  cp -a "$b/rootfs" "$b/rootfs.template"
  (cd "$b" && runc spec)
  python3 - "$b/config.json" "$2" "$3" "$HOOK" "$WORK/config.toml" <<'PY'
import json, sys
path, gpu, hook, gpuhook, cfg = sys.argv[1:]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["sh", "-c", "true"]
c["root"] = {"path": "rootfs", "readonly": False}
if gpu == "1":
    c["process"]["env"] += ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
if hook == "1":
    c["hooks"] = {"prestart": [{"path": gpuhook, "args": ["gpuhook", "prestart", "--config", cfg],
                                "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}]}
elif hook == "true":
    c["hooks"] = {"prestart": [{"path": "/bin/true", "args": ["true"], "env": ["PATH=/bin"]}]}
json.dump(c, open(path, "w"), indent=1)
PY
}
make_bundle gpu-hook 1 1
make_bundle gpu-nohook 1 0
make_bundle plain-hook 0 1
make_bundle plain-nohook 0 0
make_bundle plain-true 0 true

run_once() { # bundle -> prints elapsed ns
  local id="bench-$1-$$-$RANDOM$RANDOM" t0 t1
  # A fresh rootfs per start (untimed), as in production: mountpoints, the ld.so.conf drop-in and
  # the cache are created every time, not found from the previous run.
  rm -rf "$WORK/$1/rootfs" && cp -a "$WORK/$1/rootfs.template" "$WORK/$1/rootfs"
  t0=$(date +%s%N)
  if ! runc run --bundle "$WORK/$1" "$id" </dev/null >/dev/null 2>"$WORK/err"; then
    echo "runc run failed for $1:" >&2; cat "$WORK/err" >&2; runc delete -f "$id" 2>/dev/null; exit 1
  fi
  t1=$(date +%s%N)
  runc delete -f "$id" 2>/dev/null || true
  echo $(( t1 - t0 ))
}

VARIANTS=(gpu-hook gpu-nohook plain-hook plain-nohook plain-true)
# Warm-up: fills the inventory cache (first GPU start discovers and writes it) and page cache.
for v in "${VARIANTS[@]}"; do run_once "$v" >/dev/null; run_once "$v" >/dev/null; done
[[ -f $WORK/inventory.json ]] || { echo "inventory cache was not written" >&2; exit 1; }

for v in "${VARIANTS[@]}"; do : >"$WORK/$v.times"; done
for ((i = 0; i < RUNS; i++)); do
  for v in "${VARIANTS[@]}"; do run_once "$v" >>"$WORK/$v.times"; done
done

{ echo "$BENCH_PY_STATS"; cat <<'PY'
t = {v: load(v) for v in ["gpu-hook", "gpu-nohook", "plain-hook", "plain-nohook", "plain-true"]}
print(f"runc run of busybox `sh -c true` on simulated dgx-h100, {runs} runs per variant (ms)")
print(f"{'variant':<14}{'p50':>9}{'p95':>9}{'mean':>9}")
for v, xs in t.items():
    print(f"{v:<14}{pct(xs,50):>9.2f}{pct(xs,95):>9.2f}{statistics.mean(xs):>9.2f}")
for name, a, b, target in [("GPU container (all 8 GPUs, compute,utility)", "gpu-hook", "gpu-nohook", 15),
                           ("non-GPU container", "plain-hook", "plain-nohook", 2),
                           ("any hook (/bin/true), for reference", "plain-true", "plain-nohook", 2)]:
    d50 = pct(t[a], 50) - pct(t[b], 50); d95 = pct(t[a], 95) - pct(t[b], 95)
    ratio = pct(t[a], 50) / pct(t[b], 50)
    verdict = "within" if d50 <= target else "OVER"
    print(f"{name}: hook adds {d50:.2f} ms p50 ({d95:.2f} ms p95), ratio {ratio:.2f}x "
          f"[target <= {target} ms p50: {verdict}]; paired median {paired(a, b):.2f} ms")
PY
} | python3 - "$WORK" "$RUNS"
