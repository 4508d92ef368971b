# shellcheck shell=bash
# Shell helpers shared by the benchmark scripts (scripts/bench-*.sh); sourced, not run:
#   source "$(dirname "$0")/bench-lib.sh"
# One definition of the percentile and of the work-dir / rootfs set-up, so the numbers of the
# different benchmarks are computed the same way.

# bench_preflight RUNS MIN_RUNS WHY_ROOT [TOOL...]: exits 2 unless RUNS >= MIN_RUNS, we are root
# (WHY_ROOT says what needs it) and every TOOL is on PATH.
bench_preflight() {
  local runs=$1 min=$2 why=$3 t
  shift 3
  if (( runs < min )); then echo "RUNS must be >= $min" >&2; exit 2; fi
  [[ $(id -u) == 0 ]] || { echo "run as root ($why)" >&2; exit 2; }
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }
  done
}

# bench_work_dir PREFIX: sets WORK to a new directory under ${TMPDIR:-/tmp}; it is removed on exit
# unless KEEP=1.
bench_work_dir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  trap bench_cleanup EXIT
}
bench_cleanup() {
  local id
  [[ -n ${BENCH_WATCHDOG:-} ]] && kill "$BENCH_WATCHDOG" 2>/dev/null
  if [[ -n ${BENCH_ID_PREFIX:-} ]] && command -v runc >/dev/null; then
    for id in $(runc list -q 2>/dev/null | grep "^$BENCH_ID_PREFIX" || true); do
      runc delete -f "$id" 2>/dev/null || true
    done
  fi
  if [[ ${KEEP:-0} == 1 ]]; then echo "kept $WORK ${BENCH_EXTRA_DIRS[*]:-}" >&2; return; fi
  rm -rf "$WORK" "${BENCH_EXTRA_DIRS[@]}"
}
BENCH_EXTRA_DIRS=()

# bench_watchdog SECONDS: ends this script (and the command it waits for) after SECONDS, so a
# runtime that hangs cannot keep the benchmark running; bench_cleanup still runs (containers
# whose id starts with BENCH_ID_PREFIX are deleted). Only this script's own children are killed.
# The watchdog's sleep holds none of the script's output open (a reader of the script's output
# sees its end when the script ends) and is ended with the watchdog by bench_cleanup.
bench_watchdog() {
  local main=$$
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    sleep "$1" >/dev/null 2>&1 &
    nap=$!
    wait "$nap" || exit 0
    echo "benchmark: over its ${1}s limit, stopping" >&2
    pkill -TERM -P "$main"; kill -TERM "$main"
  ) &
  BENCH_WATCHDOG=$!
  trap 'exit 124' TERM
}

# bench_in_node_ns ROOT LIB_DIR CMD...: runs CMD as NVIDIA's tools see a simulated node at ROOT:
# nvidia-ctk reads /proc/driver/nvidia-caps/mig-minors at that absolute path, whatever its
# --driver-root (internal/nvcaps/nvcaps.go, NewMigCaps), so CMD runs in a private mount namespace
# with ROOT/proc/driver bound over /proc/driver (gone with the namespace: nothing to unmount);
# NVML is loaded with dlopen("libnvidia-ml.so.1"), found through LD_LIBRARY_PATH=ROOT/LIB_DIR.
bench_in_node_ns() {
  local root=$1 lib_dir=$2
  shift 2
  # shellcheck disable=SC2016 # $1 and $@ are the inner sh's
  unshare --mount --propagation private sh -c 'mount --bind "$1/proc/driver" /proc/driver && shift && exec "$@"' \
    sh "$root" env LD_LIBRARY_PATH="$root$lib_dir" "$@"
}

# bench_nvidia_ctk_generate NVIDIA_CTK ROOT LIB_DIR OUT [ARGS...]: NVIDIA's spec of the simulated
# node ROOT (device names by index and UUID, plus `all`), written to OUT; its log beside OUT.
bench_nvidia_ctk_generate() {
  local ctk=$1 root=$2 lib_dir=$3 out=$4
  shift 4
  mkdir -p "$(dirname "$out")"
  if ! bench_in_node_ns "$root" "$lib_dir" "$ctk" cdi generate --driver-root "$root" --dev-root "$root" \
      --output "$out" "$@" >"$out.log" 2>&1; then
    echo "nvidia-ctk cdi generate failed on $root:" >&2; tail -5 "$out.log" >&2; return 1
  fi
}

# bench_busybox_rootfs DIR: a Debian-like busybox rootfs (sh, true, /etc/debian_version).
bench_busybox_rootfs() {
  mkdir -p "$1"/{bin,etc,proc,dev,sys,tmp,usr/lib}
  cp "$(command -v busybox)" "$1/bin/busybox"
  ln -s busybox "$1/bin/sh"; ln -s busybox "$1/bin/true"
  echo 12.0 >"$1/etc/debian_version"
}

# pct P: percentile P (0-100) of the numbers on stdin, interpolated between the closest ranks
# (the same definition as pct() in BENCH_PY_STATS).
pct() {
  sort -g | awk -v p="$1" '{ v[NR] = $1 }
    END {
      if (NR == 0) exit 1
      k = (NR - 1) * p / 100; lo = int(k); hi = lo + 1 < NR - 1 ? lo + 1 : NR - 1
      print v[lo + 1] + (v[hi + 1] - v[lo + 1]) * (k - lo)
    }'
}

# Python prelude for the report of a script that left one file "$WORK/<variant>.times" of
# nanosecond timings per variant; run as `python3 - "$WORK" "$RUNS"` with this prepended:
#   { echo "$BENCH_PY_STATS"; cat <<'PY'
#   ...report using load(variant) -> sorted ms, pct(xs, p), paired(a, b), statistics...
#   PY
#   } | python3 - "$WORK" "$RUNS"
# shellcheck disable=SC2034 # used by the scripts that source this file
BENCH_PY_STATS=$(cat <<'PY'
import sys, statistics
work, runs = sys.argv[1], int(sys.argv[2])
def load(v):
    return sorted(int(l) / 1e6 for l in open(f"{work}/{v}.times"))
def paired(a, b):
    # Median of the per-round differences a[i] - b[i] (the variants run interleaved, one round
    # after another): less sensitive to the machine's drift than p50(a) - p50(b).
    xs = [int(l) / 1e6 for l in open(f"{work}/{a}.times")]
    ys = [int(l) / 1e6 for l in open(f"{work}/{b}.times")]
    return statistics.median(x - y for x, y in zip(xs, ys))
def pct(xs, p):
    k = (len(xs) - 1) * p / 100
    lo = int(k); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
PY
)

# bench_dp_setup REPO WORK_PREFIX WATCHDOG_S: the device-plugin benchmarks' common part. Builds
# the simulator, the mock NVML, the plugin and its bench_client (PROFILE=release, or debug to
# smoke-test a script), sets BIN, WORK (bench_work_dir), the watchdog, EVENTS (the mock NVML's
# event file) and $WORK/config.yaml (dgx-h100 time-sliced 48 ways: 384 IDs), and builds the node
# at $WORK/node.
bench_dp_setup() {
  local repo=$1 flags
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
  PROFILE=${PROFILE:-release}
  case $PROFILE in
    release) flags=(--release) ;;
    debug) flags=() ;;
    *) echo "PROFILE must be release or debug" >&2; exit 2 ;;
  esac
  echo "building $PROFILE binaries in $CARGO_TARGET_DIR ..." >&2
  (cd "$repo" && cargo build "${flags[@]}" -q -p gpuhook-sim -p gpuhook-mock-nvml \
    && cargo build "${flags[@]}" -q -p gpuhook-device-plugin --bin gpuhook-device-plugin --example bench_client)
  BIN=$CARGO_TARGET_DIR/$PROFILE
  bench_work_dir "$2"
  bench_watchdog "$3"
  "$BIN/gpuhook-sim" build dgx-h100 "$WORK/node" >/dev/null
  EVENTS=$WORK/node/usr/lib/x86_64-linux-gnu/gpuhook-sim-state/events
  mkdir -p "$(dirname "$EVENTS")"
  cat >"$WORK/config.yaml" <<'YAML'
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 48
YAML
}
