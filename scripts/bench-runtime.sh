#!/usr/bin/env bash
# Benchmark of the containerd runtime wrapper `gpuhook-runtime`, beside NVIDIA's
# nvidia-container-runtime when given (a benchmark, not a test: it prints numbers, asserts nothing).
#
# Usage: sudo scripts/bench-runtime.sh [RUNS] [--nvidia-runtime PATH --nvidia-ctk PATH
#                                      [--nvidia-cdi-hook PATH]] [--mounts]
#   RUNS              rounds per variant (>= 10, default 40)
#   --nvidia-runtime  an nvidia-container-runtime you built yourself from NVIDIA's public source
#   --nvidia-ctk      the nvidia-ctk of the same build: generates NVIDIA's spec of the same node
#   --nvidia-cdi-hook the hook its spec names (default: nvidia-cdi-hook next to nvidia-ctk)
#   --mounts          also measure cheaper ways to give the same files (see gpu8-floor-* below)
# Without the NVIDIA paths the NVIDIA variants are skipped (the script never needs them).
# Env: CARGO_TARGET_DIR (default: target), GPUHOOK_BIN_DIR (binaries already built: no build),
#      KEEP=1 keeps the work dirs, TMPDIR (root filesystems and the rest, default /tmp),
#      BUNDLE_TMPDIR (bundles, default /dev/shm), BENCH_TIMEOUT (seconds, default 1800).
#
# What it measures: the wall time of `create` + `start` + `delete -f` of a busybox container
# (`sh -c true`) on a simulated dgx-h100 node (8 GPUs), as containerd's shim runs them, with the
# runtime binary being runc itself, gpuhook-runtime (default config: cdi mode, early setup) or
# NVIDIA's runtime (cdi mode, on the spec its nvidia-ctk generated for the same node), all
# variants interleaved round by round so drift hits all alike:
#   plain-runc / plain-wrapper   no GPU request: runc directly / through gpuhook-runtime
#   gpuN-runc      N = 1 (NVIDIA_VISIBLE_DEVICES=0) or 8 (=all), runc directly (runc ignores it)
#   gpuN-wrapper   the same through gpuhook-runtime: ours
#   gpuN-nvidia    the same through nvidia-container-runtime (cdi mode): NVIDIA's
#   gpuN-floor     runc directly on the config.json gpuhook-runtime writes, hooks removed: runc's
#                  own cost of our device nodes and mounts, the floor under any tool giving them
#   gpuN-nvfloor   the same on the config.json NVIDIA's runtime writes, hooks removed
#   gpu8-nvpreinjected runc on that config.json with its hooks: splits NVIDIA's cost into its
#                  runtime's own and its hooks'
#   gpu8-wrapper-hook  gpuhook-runtime with `early-setup = false`: runc runs our `setup` hook
#   gpu8-preinjected   runc on the config.json of gpu8-wrapper-hook (same mounts and hook, no
#                  wrapper): what a CDI-aware containerd would hand runc
#   gpu8-threehooks    that config.json with our one setup hook split into NVIDIA's three
#                  one-step hooks (create-symlinks, update-ldcache, disable-device-node-modification)
#   gpu8-floor-dir     (--mounts) gpu8-floor with every read-only file mount (libraries,
#                  binaries, firmware, ICD) replaced by ONE bind of a directory holding the same
#                  files (hard links, staged untimed): what one mount per file costs
#   gpu8-floor-lean    (--mounts) gpu8-floor with `bind` instead of `rbind,rprivate` (one mount
#                  call per file fewer: runc applies propagation with a second mount(2))
# config.json is restored before every run, outside the timed region. As on a containerd node,
# bundles are on a tmpfs and root filesystems on disk. Targets: <= 3 ms added p50 without GPUs,
# <= 10 ms with 8 GPUs (wrapper vs runc), and near zero above the floor.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/scripts/bench-lib.sh"

usage() { sed -n '5,15p' "$0" >&2; exit 2; }
RUNS=40 NV_RUNTIME="" NV_CTK="" NV_HOOK="" MOUNT_VARIANTS=0
while (( $# )); do
  case $1 in
    --nvidia-runtime) NV_RUNTIME=$(realpath "${2:?}"); shift 2 ;;
    --nvidia-ctk) NV_CTK=$(realpath "${2:?}"); shift 2 ;;
    --nvidia-cdi-hook) NV_HOOK=$(realpath "${2:?}"); shift 2 ;;
    --mounts) MOUNT_VARIANTS=1; shift ;;
    [0-9]*) RUNS=$1; shift ;;
    *) usage ;;
  esac
done
if [[ -n $NV_RUNTIME || -n $NV_CTK ]]; then
  [[ -n $NV_RUNTIME && -n $NV_CTK ]] || { echo "give both --nvidia-runtime and --nvidia-ctk" >&2; exit 2; }
  NV_HOOK=${NV_HOOK:-$(dirname "$NV_CTK")/nvidia-cdi-hook}
  for f in "$NV_RUNTIME" "$NV_CTK" "$NV_HOOK"; do
    [[ -x $f ]] || { echo "$f is not executable (NVIDIA's spec hooks need nvidia-cdi-hook: --nvidia-cdi-hook)" >&2; exit 2; }
  done
fi
bench_preflight "$RUNS" 10 "runc, mknod, mounts" runc python3 busybox unshare
RUNC=$(command -v runc)

if [[ -n ${GPUHOOK_BIN_DIR:-} ]]; then
  BIN=$GPUHOOK_BIN_DIR
else
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
  echo "building release binaries in $CARGO_TARGET_DIR ..." >&2
  (cd "$REPO" && cargo build --release -q -p gpuhook -p gpuhook-wrapper -p gpuhook-sim -p gpuhook-mock-nvml)
  BIN=$CARGO_TARGET_DIR/release
fi

BENCH_ID_PREFIX="gpuhook-bench-$$-"
bench_work_dir gpuhook-bench-rt
BUNDLES=$(mktemp -d "${BUNDLE_TMPDIR:-/dev/shm}/gpuhook-bench-bundles.XXXXXX")
BENCH_EXTRA_DIRS+=("$BUNDLES")
bench_watchdog "${BENCH_TIMEOUT:-1800}"

"$BIN/gpuhook-sim" build dgx-h100 "$WORK/node" >/dev/null
LIB_DIR=$("$BIN/gpuhook-sim" show dgx-h100 | awk -F'"' '/^lib_dir/ {print $2}')
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
if [[ -n $NV_RUNTIME ]]; then
  bench_nvidia_ctk_generate "$NV_CTK" "$WORK/node" "$LIB_DIR" "$WORK/nvcdi/nvidia.yaml" \
    --nvidia-cdi-hook-path "$NV_HOOK"
  # NVIDIA's runtime in cdi mode (its documented config keys), logging to a file as ours does.
  cat >"$WORK/nvidia-config.toml" <<EOF
[nvidia-container-runtime]
mode = "cdi"
runtimes = ["$RUNC"]
log-level = "info"
debug = "$WORK/nvidia-runtime.log"

[nvidia-container-runtime.modes.cdi]
spec-dirs = ["$WORK/nvcdi"]
EOF
fi
# Each runtime reads only its own variable; both are set once, outside the timed region.
export GPUHOOK_CONFIG=$WORK/config-early-true.toml NVIDIA_CTK_CONFIG_FILE_PATH=$WORK/nvidia-config.toml

make_bundle() { # name -> a bundle with its own rootfs; the GPU request follows the name
  local b=$BUNDLES/$1 visible=""
  case $1 in gpu1-*) visible=0 ;; gpu8-*) visible=all ;; esac
  mkdir -p "$b"
  bench_busybox_rootfs "$WORK/rootfs-$1"
  (cd "$b" && runc spec)
  python3 - "$b/config.json" "$visible" "$WORK/rootfs-$1" <<'PY'
import json, sys
path, visible, rootfs = sys.argv[1:]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["sh", "-c", "true"]
c["root"] = {"path": rootfs, "readonly": False}
if visible:
    c["process"]["env"] += [f"NVIDIA_VISIBLE_DEVICES={visible}"]
json.dump(c, open(path, "w"), indent=1)
PY
  cp "$b/config.json" "$b/config.json.orig"
}

runtime_of() { # variant -> the runtime binary containerd's shim would run
  case $1 in
    *-wrapper | *-wrapper-hook) echo "$BIN/gpuhook-runtime" ;;
    *-nvidia) echo "$NV_RUNTIME" ;;
    *) echo "$RUNC" ;;
  esac
}

set_config_for() { # variant: our config for it (early setup unless *-wrapper-hook)
  if [[ $1 == *-wrapper-hook ]]; then GPUHOOK_CONFIG=$WORK/config-early-false.toml
  else GPUHOOK_CONFIG=$WORK/config-early-true.toml; fi
}

run_once() { # variant -> prints elapsed ns (create + start + delete)
  local b=$BUNDLES/$1 rt=${RT[$1]} id="$BENCH_ID_PREFIX$1-$RANDOM$RANDOM" t0 t1
  set_config_for "$1"
  cp "$b/config.json.orig" "$b/config.json"
  t0=$(date +%s%N)
  # Output goes to files, never a pipe (a pipe makes NVIDIA's `create` wait for its reader).
  if ! { "$rt" create --bundle "$b" "$id" && "$rt" start "$id" && "$rt" delete -f "$id"; } \
      </dev/null >/dev/null 2>"$WORK/err"; then
    echo "$rt create/start/delete failed for $1:" >&2; cat "$WORK/err" >&2
    "$RUNC" delete -f "$id" 2>/dev/null; exit 1
  fi
  t1=$(date +%s%N)
  echo $(( t1 - t0 ))
}

# capture SRC_VARIANT DEST OP...: DEST's config.json is the one SRC_VARIANT's runtime writes into
# the bundle at `create` (the container is deleted at once), rewritten by OP (see edit_config).
capture() {
  local src=$1 dest=$2 rt id="${BENCH_ID_PREFIX}capture-$2"
  shift 2
  rt=$(runtime_of "$src")
  set_config_for "$src"
  make_bundle "$dest"
  if ! "$rt" create --bundle "$BUNDLES/$dest" "$id" </dev/null >/dev/null 2>"$WORK/err"; then
    echo "capturing $src's edits failed:" >&2; cat "$WORK/err" >&2; exit 1
  fi
  "$RUNC" delete -f "$id"
  edit_config "$BUNDLES/$dest/config.json" "$BUNDLES/$dest/config.json.orig" "$dest" "$@"
}

# edit_config IN OUT NAME OP [ARG...]: OP is none, strip-hooks, three-hooks, or a floor without
# hooks: floor-lean (bind, no rprivate) or floor-dir STAGE_DIR NODE_ROOT (the node's read-only
# files hard-linked into STAGE_DIR, one mount);
# prints what the resulting container gets.
edit_config() {
  python3 - "$@" <<'PY'
import json, os, shutil, stat, sys
src, out, name, op, *args = sys.argv[1:]
c = json.load(open(src))
hooks = c.get("hooks", {})
if op == "none":
    pass
elif op == "strip-hooks":
    c.pop("hooks", None)
elif op == "three-hooks":
    setup = hooks["createContainer"][0]
    rest, links, folders = setup["args"][3:], [], []
    for flag, value in zip(rest, rest[1:]):
        if flag == "--link": links += [flag, value]
        if flag == "--folder": folders += [flag, value]
    one = lambda a: dict(setup, args=["gpuhook", "hook"] + a)
    hooks["createContainer"] = [one(["create-symlinks"] + links), one(["update-ldcache"] + folders),
                                one(["disable-device-node-modification"])]
elif op == "floor-dir":
    c.pop("hooks", None)
    (stage, node), kept, files = args, [], 0
    os.makedirs(stage, exist_ok=True)
    for m in c["mounts"]:
        host = m.get("source", "")
        if "ro" in m.get("options", []) and os.path.isfile(host) and host.startswith(node + "/"):
            dst = os.path.join(stage, os.path.basename(host))
            try: os.link(host, dst)
            except OSError: shutil.copy2(host, dst)
            files += 1
        else:
            kept.append(m)
    kept.append({"destination": "/opt/nvidia-driver", "type": "bind", "source": stage,
                 "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]})
    c["mounts"] = kept
    print(f"{name}: {files} read-only file mounts replaced by one directory mount", file=sys.stderr)
elif op == "floor-lean":
    c.pop("hooks", None)
    for m in c["mounts"]:
        if "rbind" in m.get("options", []):
            m["options"] = [o for o in m["options"] if o not in ("rbind", "rprivate")] + ["bind"]
else:
    sys.exit(f"edit_config: unknown operation {op}")
nodes = len(c.get("linux", {}).get("devices", []))
binds = sum(1 for m in c["mounts"] if m.get("type") == "bind" or "bind" in m.get("options", [])
            or "rbind" in m.get("options", []))
print(f"{name}: {nodes} device nodes, {binds} bind mounts, "
      f"{sum(len(v) for v in c.get('hooks', {}).values())} hooks", file=sys.stderr)
json.dump(c, open(out, "w"), indent=1)
PY
}

VARIANTS=(plain-runc plain-wrapper gpu1-runc gpu1-wrapper gpu1-floor)
[[ -n $NV_RUNTIME ]] && VARIANTS+=(gpu1-nvidia gpu1-nvfloor)
VARIANTS+=(gpu8-runc gpu8-wrapper gpu8-wrapper-hook gpu8-preinjected gpu8-threehooks gpu8-floor)
[[ -n $NV_RUNTIME ]] && VARIANTS+=(gpu8-nvidia gpu8-nvfloor gpu8-nvpreinjected)
(( MOUNT_VARIANTS )) && VARIANTS+=(gpu8-floor-dir gpu8-floor-lean)
[[ -n $NV_RUNTIME ]] || echo "no --nvidia-runtime/--nvidia-ctk: NVIDIA's columns are skipped" >&2

declare -A RT
for v in "${VARIANTS[@]}"; do
  RT[$v]=$(runtime_of "$v")
  case $v in
    gpu1-floor) capture gpu1-wrapper-hook "$v" strip-hooks ;;
    gpu8-preinjected) capture gpu8-wrapper-hook "$v" none ;;
    gpu8-threehooks) capture gpu8-wrapper-hook "$v" three-hooks ;;
    gpu8-floor) capture gpu8-wrapper-hook "$v" strip-hooks ;;
    gpu?-nvfloor) capture "${v%-nvfloor}-nvidia" "$v" strip-hooks ;;
    gpu8-nvpreinjected) capture gpu8-nvidia "$v" none ;;
    gpu8-floor-dir) capture gpu8-wrapper-hook "$v" floor-dir "$WORK/stage" "$WORK/node" ;;
    gpu8-floor-lean) capture gpu8-wrapper-hook "$v" floor-lean ;;
    *) make_bundle "$v" ;;
  esac
done

for v in "${VARIANTS[@]}"; do run_once "$v" >/dev/null; run_once "$v" >/dev/null; done
for v in "${VARIANTS[@]}"; do : >"$WORK/$v.times"; done
for ((i = 0; i < RUNS; i++)); do
  for v in "${VARIANTS[@]}"; do run_once "$v" >>"$WORK/$v.times"; done
done

{ echo "$BENCH_PY_STATS"; cat <<'PY'
t = {v: load(v) for v in sys.argv[3:]}
print(f"create+start+delete of busybox `sh -c true`, simulated dgx-h100, {runs} rounds per variant (ms)")
print(f"{'variant':<18}{'p50':>9}{'p95':>9}{'mean':>9}")
for v, xs in t.items():
    print(f"{v:<18}{pct(xs,50):>9.2f}{pct(xs,95):>9.2f}{statistics.mean(xs):>9.2f}")
d50 = lambda a, b: pct(t[a], 50) - pct(t[b], 50)
def ratio(a, b):
    return f"{a / b:.2f}" if b > 0 else "n/a"

print("\nGPU containers side by side: added = p50 minus plain runc's (gpuN-runc); paired = median of the"
      "\nper-round differences; above floor = paired vs runc on the same tool's edits without hooks")
print(f"{'GPUs':<5}{'runtime':<30}{'p50':>8}{'added p50':>11}{'paired':>8}{'above floor':>13}")
for n in (1, 8):
    base, ours, nv = f"gpu{n}-runc", f"gpu{n}-wrapper", f"gpu{n}-nvidia"
    for label, v, floor in [("ours: gpuhook-runtime", ours, f"gpu{n}-floor"),
                            ("NVIDIA: cdi mode", nv, f"gpu{n}-nvfloor"),
                            ("floor: runc on our edits", f"gpu{n}-floor", None),
                            ("floor: runc on NVIDIA's edits", f"gpu{n}-nvfloor", None)]:
        if v not in t:
            continue
        above = f"{paired(v, floor):>13.2f}" if floor in t else ""
        print(f"{n:<5}{label:<30}{pct(t[v],50):>8.2f}{d50(v, base):>11.2f}{paired(v, base):>8.2f}{above}")
    if nv in t:
        po, pn = paired(ours, base), paired(nv, base)
        fo, fn = paired(ours, f"gpu{n}-floor"), paired(nv, f"gpu{n}-nvfloor")
        print(f"     ratio ours/NVIDIA: added p50 {ratio(d50(ours, base), d50(nv, base))}, paired "
              f"{ratio(po, pn)}; above floor: ours {fo:.2f} ms vs NVIDIA {fn:.2f} ms (ratio {ratio(fo, fn)}); "
              f"ours paired vs NVIDIA {paired(ours, nv):.2f} ms")
    else:
        print(f"     (NVIDIA's runtime not given: --nvidia-runtime PATH --nvidia-ctk PATH)")

print(f"\n{'comparison':<44}{'base p50':>9}{'p50':>9}{'added p50':>11}{'added p95':>11}{'paired':>8}  target")
for name, a, b, target in [
        ("no GPU: wrapper vs runc", "plain-wrapper", "plain-runc", 3),
        ("1 GPU: wrapper vs runc", "gpu1-wrapper", "gpu1-runc", 10),
        ("8 GPUs: wrapper (CDI + early setup) vs runc", "gpu8-wrapper", "gpu8-runc", 10),
        ("8 GPUs: early setup vs the setup hook", "gpu8-wrapper", "gpu8-wrapper-hook",
         "(negative: what early setup saves)"),
        ("8 GPUs: wrapper vs runc on the same edits", "gpu8-wrapper", "gpu8-preinjected",
         "(vs CDI in containerd)"),
        ("8 GPUs: one setup hook vs NVIDIA's three", "gpu8-preinjected", "gpu8-threehooks",
         "(negative: what one hook saves)"),
        ("8 GPUs: our hook vs NVIDIA's hooks", "gpu8-preinjected", "gpu8-nvpreinjected",
         "(runc on each tool's edits)"),
        ("8 GPUs: NVIDIA's hooks (runc on its edits)", "gpu8-nvpreinjected", "gpu8-nvfloor",
         "(vs the same without hooks)"),
        ("8 GPUs: NVIDIA's runtime vs runc, its edits", "gpu8-nvidia", "gpu8-nvpreinjected",
         "(its runtime's own cost)"),
        ("8 GPUs floor: one dir mount vs per file", "gpu8-floor-dir", "gpu8-floor",
         "(negative: what per-file mounts cost)"),
        ("8 GPUs floor: bind vs rbind,rprivate", "gpu8-floor-lean", "gpu8-floor",
         "(negative: what propagation costs)")]:
    if a not in t or b not in t:
        continue
    tgt = (f"<= {target} ms: {'within' if d50(a, b) <= target else 'OVER'}" if isinstance(target, int)
           else target)
    print(f"{name:<44}{pct(t[b],50):>9.2f}{pct(t[a],50):>9.2f}{d50(a, b):>11.2f}"
          f"{pct(t[a],95) - pct(t[b],95):>11.2f}{paired(a, b):>8.2f}  {tgt}")
PY
} | python3 - "$WORK" "$RUNS" "${VARIANTS[@]}"
