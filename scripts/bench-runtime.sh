#!/usr/bin/env bash
# Benchmark of the containerd runtime wrapper `gpuhook-runtime` (a benchmark, not a test: it
# prints numbers and asserts nothing).
#
# What it measures: the wall time of `runc create` + `runc start` + `runc delete -f` of a busybox
# container (`sh -c true`) on a simulated dgx-h100 node (8 GPUs), as containerd's shim runs them,
# with the runtime binary being either runc itself or gpuhook-runtime (which execs runc, or runs
# it as a child beside its early setup), in seven variants, interleaved so drift hits all alike:
#   plain-runc      no GPU request, runc directly
#   plain-wrapper   no GPU request, through gpuhook-runtime (fast path: no CDI, no discovery)
#   gpu8-runc       NVIDIA_VISIBLE_DEVICES=all, runc directly (runc ignores it: no GPU)
#   gpu8-wrapper    NVIDIA_VISIBLE_DEVICES=all through gpuhook-runtime in cdi mode (the default
#                   config): the spec is loaded and applied (8 GPU nodes, control nodes, ~30
#                   driver mounts); the `gpuhook hook setup` hook's links and ldconfig are done by
#                   the wrapper (`early-setup`), ldconfig running while runc creates the container
#   gpu8-wrapper-hook  the same with `early-setup = false`: runc runs the setup hook
#   gpu8-preinjected  runc directly on the config.json gpuhook-runtime writes with
#                   `early-setup = false` (same mounts and hook, no wrapper): what a CDI-aware
#                   containerd would hand runc; splits the wrapper's own cost from the cost of
#                   the injected content
#   gpu8-threehooks runc directly on that config.json with our one `gpuhook hook setup` split
#                   into the three one-step hooks of NVIDIA's layout: what one hook saves
# config.json is restored before every run, outside the timed region. As on a containerd node,
# the bundles (config.json) are on a tmpfs (containerd's /run/containerd/...; here
# BUNDLE_TMPDIR, default /dev/shm) and the root filesystems on disk (the snapshotter's
# /var/lib/containerd/...; here TMPDIR, default /tmp).
# Targets: <= 3 ms added p50 without GPUs, <= 10 ms with 8 GPUs (wrapper vs runc directly).
#
# Usage: sudo scripts/bench-runtime.sh [RUNS]      (RUNS >= 30, default 40)
# Env:   CARGO_TARGET_DIR (default: target), KEEP=1 keeps the work dirs, TMPDIR (rootfs and
#        the rest, default /tmp), BUNDLE_TMPDIR (bundles, default /dev/shm).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/scripts/bench-lib.sh"

RUNS=${1:-40}
bench_preflight "$RUNS" 30 "runc, mknod, mounts" runc python3 busybox
RUNC=$(command -v runc)

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
echo "building release binaries in $CARGO_TARGET_DIR ..." >&2
(cd "$REPO" && cargo build --release -q -p gpuhook -p gpuhook-sim -p gpuhook-mock-nvml)
BIN=$CARGO_TARGET_DIR/release

bench_work_dir gpuhook-bench-rt

"$BIN/gpuhook-sim" build dgx-h100 "$WORK/node" >/dev/null
"$BIN/gpuhook" cdi generate --driver-root "$WORK/node" --output "$WORK/cdi/nvidia.com-gpu.json" \
  --inventory-cache "$WORK/inventory.json" 2>/dev/null
for early in true false; do
  cat >"$WORK/config-early-$early.toml" <<EOF
driver-root = "$WORK/node"
inventory-cache = "$WORK/inventory.json"
cdi-spec-dirs = ["$WORK/cdi"]
log-file = "$WORK/gpuhook.log"

[runtime]
runtimes = ["$RUNC"]
early-setup = $early
EOF
done

BUNDLES=$(mktemp -d "${BUNDLE_TMPDIR:-/dev/shm}/gpuhook-bench-bundles.XXXXXX")
trap 'bench_cleanup; [[ ${KEEP:-0} == 1 ]] || rm -rf "$BUNDLES"' EXIT

make_bundle() { # name gpu(0|1)
  local b=$BUNDLES/$1
  mkdir -p "$b"
  bench_busybox_rootfs "$WORK/rootfs-$1"
  (cd "$b" && runc spec)
  python3 - "$b/config.json" "$2" "$WORK/rootfs-$1" <<'PY'
import json, sys
path, gpu, rootfs = sys.argv[1:]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["sh", "-c", "true"]
c["root"] = {"path": rootfs, "readonly": False}
if gpu == "1":
    c["process"]["env"] += ["NVIDIA_VISIBLE_DEVICES=all"]
json.dump(c, open(path, "w"), indent=1)
PY
  cp "$b/config.json" "$b/config.json.orig"
}
for v in plain-runc plain-wrapper gpu8-runc gpu8-wrapper gpu8-wrapper-hook; do
  make_bundle "$v" "$([[ $v == gpu8* ]] && echo 1 || echo 0)"
done

run_once() { # bundle runtime -> prints elapsed ns (create + start + delete)
  local b=$BUNDLES/$1 rt=$2 id="bench-$1-$$-$RANDOM$RANDOM" t0 t1 early=true
  [[ $1 == gpu8-wrapper-hook ]] && early=false
  export GPUHOOK_CONFIG=$WORK/config-early-$early.toml
  cp "$b/config.json.orig" "$b/config.json"
  t0=$(date +%s%N)
  if ! { "$rt" create --bundle "$b" "$id" && "$rt" start "$id" && "$rt" delete -f "$id"; } \
      </dev/null >/dev/null 2>"$WORK/err"; then
    echo "$rt create/start/delete failed for $1:" >&2; cat "$WORK/err" >&2
    "$RUNC" delete -f "$id" 2>/dev/null; exit 1
  fi
  t1=$(date +%s%N)
  echo $(( t1 - t0 ))
}

# The config.json the wrapper makes for the 8-GPU container (with the hook), run by plain runc.
make_bundle gpu8-preinjected 1
id="bench-prep-$$"
GPUHOOK_CONFIG=$WORK/config-early-false.toml "$BIN/gpuhook-runtime" create --bundle "$BUNDLES/gpu8-preinjected" "$id" </dev/null >/dev/null
"$RUNC" delete -f "$id"
cp "$BUNDLES/gpu8-preinjected/config.json" "$BUNDLES/gpu8-preinjected/config.json.orig"
python3 - "$BUNDLES/gpu8-preinjected/config.json.orig" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
nodes = [d["path"] for d in c["linux"].get("devices", [])]
print(f"8-GPU container after gpuhook-runtime: {len(nodes)} device nodes, {len(c['mounts'])} mounts, "
      f"{sum(len(v) for v in c.get('hooks', {}).values())} hooks", file=sys.stderr)
PY

# The same, with our one `gpuhook hook setup` split into the three one-step hooks of NVIDIA's
# layout (create-symlinks, update-ldcache, disable-device-node-modification): what one hook saves.
make_bundle gpu8-threehooks 1
python3 - "$BUNDLES/gpu8-preinjected/config.json.orig" "$BUNDLES/gpu8-threehooks/config.json.orig" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
setup = c["hooks"]["createContainer"][0]
args, links, folders = setup["args"][3:], [], []
for flag, value in zip(args, args[1:]):
    if flag == "--link": links += [flag, value]
    if flag == "--folder": folders += [flag, value]
one = lambda rest: dict(setup, args=["gpuhook", "hook"] + rest)
c["hooks"]["createContainer"] = [one(["create-symlinks"] + links), one(["update-ldcache"] + folders),
                                 one(["disable-device-node-modification"])]
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY

declare -A RT=([plain-runc]=$RUNC [plain-wrapper]=$BIN/gpuhook-runtime [gpu8-runc]=$RUNC
               [gpu8-wrapper]=$BIN/gpuhook-runtime [gpu8-wrapper-hook]=$BIN/gpuhook-runtime
               [gpu8-preinjected]=$RUNC [gpu8-threehooks]=$RUNC)
VARIANTS=(plain-runc plain-wrapper gpu8-runc gpu8-wrapper gpu8-wrapper-hook gpu8-preinjected
          gpu8-threehooks)
for v in "${VARIANTS[@]}"; do run_once "$v" "${RT[$v]}" >/dev/null; run_once "$v" "${RT[$v]}" >/dev/null; done
for v in "${VARIANTS[@]}"; do : >"$WORK/$v.times"; done
for ((i = 0; i < RUNS; i++)); do
  for v in "${VARIANTS[@]}"; do run_once "$v" "${RT[$v]}" >>"$WORK/$v.times"; done
done

{ echo "$BENCH_PY_STATS"; cat <<'PY'
names = ["plain-runc", "plain-wrapper", "gpu8-runc", "gpu8-wrapper", "gpu8-wrapper-hook",
         "gpu8-preinjected", "gpu8-threehooks"]
t = {v: load(v) for v in names}
print(f"runc create+start+delete of busybox `sh -c true`, simulated dgx-h100, {runs} runs per variant (ms)")
print(f"{'variant':<18}{'p50':>9}{'p95':>9}{'mean':>9}")
for v in names:
    xs = t[v]
    print(f"{v:<18}{pct(xs,50):>9.2f}{pct(xs,95):>9.2f}{statistics.mean(xs):>9.2f}")
print()
print(f"{'comparison':<44}{'runc p50':>9}{'gpuhook p50':>12}{'added p50':>11}{'added p95':>11}"
      f"{'paired':>8}  target")
for name, a, b, target in [
        ("no GPU: wrapper vs runc", "plain-wrapper", "plain-runc", 3),
        ("8 GPUs: wrapper (CDI + early setup) vs runc", "gpu8-wrapper", "gpu8-runc", 10),
        ("8 GPUs: early setup vs the setup hook", "gpu8-wrapper", "gpu8-wrapper-hook",
         "(negative: what early setup saves)"),
        ("8 GPUs: wrapper vs runc on the same edits", "gpu8-wrapper", "gpu8-preinjected",
         "(vs CDI in containerd)"),
        ("8 GPUs: one setup hook vs NVIDIA's three", "gpu8-preinjected", "gpu8-threehooks",
         "(negative: what one hook saves)")]:
    d50 = pct(t[a], 50) - pct(t[b], 50); d95 = pct(t[a], 95) - pct(t[b], 95)
    tgt = (f"<= {target} ms: {'within' if d50 <= target else 'OVER'}" if isinstance(target, int)
           else target)
    print(f"{name:<44}{pct(t[b],50):>9.2f}{pct(t[a],50):>12.2f}{d50:>11.2f}{d95:>11.2f}"
          f"{paired(a, b):>8.2f}  {tgt}")
PY
} | python3 - "$WORK" "$RUNS"
