#!/usr/bin/env bash
# Side by side with NVIDIA: generates the CDI spec of every reference node profile with gpuhook
# AND with an nvidia-ctk you built yourself from NVIDIA's public source, normalises both (jq) and
# prints what differs: device names, device nodes with their modes, mounts, symlinks, ldcache
# folders, hook actions and env. docs/nvidia-differences.md explains every difference.
#
#   sudo scripts/compare-nvidia-ctk.sh /path/to/nvidia-ctk [--profile NAME]... [--out DIR]
#                                      [--mode MODE] [--write-expectations [--label TEXT]]
#
# --out DIR               keep the raw and normalised specs there (default: a temp dir, removed)
# --mode MODE             pass `--mode MODE` to both generators (e.g. management); expectations then
#                         go to tests/expectations/nvidia-ctk/<MODE>/<profile>.json
# --write-expectations    write NVIDIA's normalised output to tests/expectations/nvidia-ctk/<profile>.json
# --label TEXT            what built nvidia-ctk, recorded as "source" (default: `nvidia-ctk --version`)
#
# Run as root (materialising a node makes device nodes) after `cargo build --workspace`.
# nvidia-ctk reads the MIG minors from the absolute path /proc/driver/nvidia-caps/mig-minors
# (internal/nvcaps/nvcaps.go, NewMigCaps), not from its --driver-root, so each run of it is done
# in a private mount namespace with the simulated node's /proc/driver bound over the host's. It
# loads NVML with dlopen("libnvidia-ml.so.1"): LD_LIBRARY_PATH points it at the node's mock NVML.
# Environment: GPUHOOK_BIN_DIR (default: $CARGO_TARGET_DIR/debug or target/debug).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '6,13p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
NVIDIA_CTK=$(realpath "$1"); shift
PROFILES=() OUT="" WRITE_EXPECT=0 LABEL="" MODE_ARGS=() EXPECT_DIR=tests/expectations/nvidia-ctk
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) PROFILES+=("$2"); shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --write-expectations) WRITE_EXPECT=1; shift ;;
        --label) LABEL="$2"; shift 2 ;;
        --mode) MODE_ARGS=(--mode "$2"); EXPECT_DIR="tests/expectations/nvidia-ctk/$2"; shift 2 ;;
        *) usage ;;
    esac
done
BIN_DIR=${GPUHOOK_BIN_DIR:-${CARGO_TARGET_DIR:-target}/debug}

die() { echo "compare-nvidia-ctk: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (materialising a simulated node needs mknod; nvidia-ctk runs in a mount namespace)"
[ -x "$NVIDIA_CTK" ] || die "$NVIDIA_CTK is not an executable nvidia-ctk"
for tool in jq unshare; do command -v "$tool" >/dev/null || die "$tool is missing"; done
for f in gpuhook gpuhook-sim sim-nvidia-smi libgpuhook_mock_nvml.so; do
    [ -e "$BIN_DIR/$f" ] || die "$BIN_DIR/$f is missing: run \`cargo build --workspace\` first (or set GPUHOOK_BIN_DIR)"
done
[ ${#PROFILES[@]} -gt 0 ] || mapfile -t PROFILES < <("$BIN_DIR/gpuhook-sim" list | awk '{print $1}')

WORK=$(mktemp -d /var/tmp/gpuhook-compare.XXXXXX)
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
[ -n "$OUT" ] && mkdir -p "$OUT"

# The normalised comparison form. $root is stripped from hostPaths; links get absolute targets;
# hooks become actions (NVIDIA: one hook per action; gpuhook: flags of its single setup hook).
read -r -d '' NORMALISE <<'JQ' || true
def strip: if startswith($root) then .[($root | length):] else . end;
def octal: if . == null then "-" else [recurse(if . >= 8 then ./8 | floor else empty end) % 8] | reverse | map(tostring) | join("") | "0" + . end;
def node: "\(.path) \(.major // 0):\(.minor // 0) mode=\(.fileMode | octal) host=\((.hostPath // .path) | strip)";
def nodes: [(.deviceNodes // [])[] | node] | sort;
def abs($link): if startswith("/") then . else ($link | sub("/[^/]*$"; "")) + "/" + . end;
def norm_path: [splits("/")] | reduce .[] as $c ([]; if $c == ".." then .[:-1] elif $c == "." or $c == "" then . else . + [$c] end) | "/" + join("/");
def link: split("::") as [$t, $l] | "\($l) -> \($t | abs($l) | norm_path)";
def hook_args: .args[1:] | if .[0] == "hook" then .[1:] else . end;
def actions: if .[0] == "setup" then
      [.[1:][] | select(startswith("--")) | {"--link": "create-symlinks", "--folder": "update-ldcache",
        "--disable-device-node-modification": "disable-device-node-modification"}[.] // "setup:\(.)"] | unique
    else [.[0]] end;
def flag_values($f): [range(0; length) as $i | select(.[$i] == $f) | .[$i + 1]];
{
  cdiVersion, kind,
  devices: ([.devices[] | {key: .name, value: (.containerEdits | nodes)}] | from_entries),
  common_nodes: (.containerEdits | nodes),
  node_permissions: ([.devices[].containerEdits, .containerEdits | (.deviceNodes // [])[] | .permissions // "rwm"] | unique),
  mounts: [(.containerEdits.mounts // [])[] | "\(.containerPath) <- \(.hostPath | strip) [\(.options | sort | join(","))]"] | sort,
  links: [(.containerEdits.hooks // [])[] | hook_args | flag_values("--link")[] | link] | sort,
  ldcache_folders: [(.containerEdits.hooks // [])[] | hook_args | flag_values("--folder")[]] | unique,
  hook_actions: [(.containerEdits.hooks // [])[] | hook_args | actions[]] | unique,
  hooks_without_env: [(.containerEdits.hooks // [])[] | select((.env // []) | length == 0) | .path] | unique,
  env: (.containerEdits.env // []) | sort
}
JQ

# Prints one side's extra entries of a set-valued section.
# Prints one side's extra entries of each section. Device nodes are compared without their modes
# first (which devices get which nodes), then modes separately (path mode=... over all devices).
read -r -d '' DIFF <<'JQ' || true
def sets: ["common_nodes", "node_permissions", "mounts", "links", "ldcache_folders", "hook_actions", "env"];
def nomode: map(sub(" mode=[^ ]*"; ""));
def modes: [(.devices[], .common_nodes)[] | split(" ") | "\(.[0]) \(.[2])"] | unique;
. as [$nv, $ours] |
(if $nv.cdiVersion != $ours.cdiVersion then "  cdiVersion: nvidia \($nv.cdiVersion), gpuhook \($ours.cdiVersion)" else empty end),
(($nv.devices | keys) - ($ours.devices | keys) | select(length > 0) | "  devices only nvidia-ctk: \(join(" "))"),
(($ours.devices | keys) - ($nv.devices | keys) | select(length > 0) | "  devices only gpuhook:    \(join(" "))"),
(($nv.devices | keys)[] as $d | select($ours.devices[$d] != null and ($ours.devices[$d] | nomode) != ($nv.devices[$d] | nomode)) |
  "  device \($d) nodes: nvidia-ctk \($nv.devices[$d] | nomode | join("; "))\n  device \($d) nodes: gpuhook    \($ours.devices[$d] | nomode | join("; "))"),
(($nv | modes) - ($ours | modes) | select(length > 0) | "  node modes only nvidia-ctk: \(join(", "))"),
(($ours | modes) - ($nv | modes) | select(length > 0) | "  node modes only gpuhook:    \(join(", "))"),
def section($s): .[$s] | if $s == "common_nodes" then nomode else . end;
(sets[] as $s | ($nv | section($s)) - ($ours | section($s)) | .[] | "  \($s) only nvidia-ctk: \(.)"),
(sets[] as $s | ($ours | section($s)) - ($nv | section($s)) | .[] | "  \($s) only gpuhook:    \(.)"),
(if ($nv.hooks_without_env + $ours.hooks_without_env) | length > 0 then "  hooks without env: nvidia \($nv.hooks_without_env), gpuhook \($ours.hooks_without_env)" else empty end)
JQ

differing=0
for profile in "${PROFILES[@]}"; do
    root="$WORK/$profile"
    "$BIN_DIR/gpuhook-sim" build "$profile" "$root" --mock-nvml "$BIN_DIR/libgpuhook_mock_nvml.so" \
        --bin-dir "$BIN_DIR" >/dev/null
    lib_dir=$("$BIN_DIR/gpuhook-sim" show "$profile" | awk -F'"' '/^lib_dir/ {print $2}')
    ours_ok=1 nv_ok=1
    "$BIN_DIR/gpuhook" --log-level error cdi generate "${MODE_ARGS[@]}" --driver-root "$root" --gpuhook-path /usr/bin/gpuhook \
        --output "$WORK/$profile.gpuhook.json" --no-inventory-cache 2>"$WORK/$profile.gpuhook.log" || ours_ok=0
    nv_log="$WORK/$profile.nvidia-ctk.log"
    unshare --mount --propagation private sh -c 'mount --bind "$1/proc/driver" /proc/driver && shift && exec "$@"' \
        sh "$root" env LD_LIBRARY_PATH="$root$lib_dir" "$NVIDIA_CTK" cdi generate "${MODE_ARGS[@]}" \
        --driver-root "$root" --dev-root "$root" --nvidia-cdi-hook-path /usr/bin/nvidia-cdi-hook \
        --format json --output "$WORK/$profile.nvidia.json" >"$nv_log" 2>&1 || nv_ok=0
    nv_error=$(grep -m1 'level=error' "$nv_log" | sed -e 's/.*msg="\(.*\)"$/\1/' -e 's/\\"/"/g' || true)
    if [ "$WRITE_EXPECT" = 1 ]; then
        mkdir -p "$EXPECT_DIR"
        expect="$EXPECT_DIR/$profile.json"
        version=${LABEL:-$("$NVIDIA_CTK" --version | head -1)}
        if [ "$nv_ok" = 1 ]; then
            jq -S --arg root "$root" --arg p "$profile" --arg v "$version" \
                "$NORMALISE | {profile: \$p, source: \$v} + ." "$WORK/$profile.nvidia.json" >"$expect"
        else
            jq -nS --arg p "$profile" --arg v "$version" --arg e "${nv_error:-$(tail -1 "$nv_log")}" \
                '{profile: $p, source: $v, error: $e}' >"$expect"
        fi
    fi
    if [ "$ours_ok" = 0 ] || [ "$nv_ok" = 0 ]; then
        echo "== $profile: a tool failed"
        [ "$nv_ok" = 1 ] || echo "  nvidia-ctk: ${nv_error:-$(tail -1 "$nv_log")}"
        [ "$ours_ok" = 1 ] || echo "  gpuhook:    $(tail -1 "$WORK/$profile.gpuhook.log")"
        differing=$((differing + 1))
        continue
    fi
    for side in nvidia gpuhook; do
        jq -S --arg root "$root" "$NORMALISE" "$WORK/$profile.$side.json" >"$WORK/$profile.$side.norm.json"
    done
    report=$(jq -rn --slurpfile nv "$WORK/$profile.nvidia.norm.json" --slurpfile ours "$WORK/$profile.gpuhook.norm.json" \
        "[\$nv[0], \$ours[0]] | $DIFF")
    if [ -z "$report" ]; then
        echo "== $profile: same"
    else
        echo "== $profile: $(grep -c . <<<"$report") difference(s)"
        echo "$report"
        differing=$((differing + 1))
    fi
done
[ -n "$OUT" ] && cp "$WORK"/*.json "$WORK"/*.log "$OUT"/ 2>/dev/null || true
echo "compare-nvidia-ctk: ${#PROFILES[@]} profile(s), $differing with differences"
