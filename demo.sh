#!/usr/bin/env bash
# The main job on a built-in simulated node: build gpuhook, materialise a simulated GPU node,
# discover it, write its CDI spec, list the devices, and (when podman or runc is installed) start a
# busybox container that gets one GPU through that spec. Then the point of it, seed 002's cluster
# (one L20 node, one T4 node, every GPU taken, pods pending for 28 days): what the device plugin
# advertises to the scheduler on those two nodes without sharing, and with the seed's time-slicing
# ConfigMap (L20 x 8, T4 x 3): 2 -> 11 schedulable nvidia.com/gpu slots.
#
#   ./demo.sh [PROFILE]        as root; PROFILE: see `gpuhook-sim list` (default a100-mig-mixed)
set -euo pipefail
cd "$(dirname "$0")"
profile=${1:-a100-mig-mixed}
work=${GPUHOOK_DEMO_DIR:-/tmp/gpuhook-demo}

if [ "$(id -u)" -ne 0 ]; then
    echo "demo.sh: a simulated node has real device nodes (mknod needs CAP_MKNOD): run it as root (a root shell: su -, or sudo ./demo.sh)" >&2
    exit 1
fi

# Bold headings on a terminal only: no escape codes in a log file or a CI transcript.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }

step "building gpuhook (cargo build --workspace)"
cargo build --workspace --bins --lib --quiet
bin=$PWD/target/debug

step "materialising simulated node '$profile' in $work/node"
mkdir -p "$work"
"$bin/gpuhook-sim" build "$profile" "$work/node"
"$work/node/usr/bin/nvidia-smi" -L

step "generating its CDI spec (what the node's runtime would read from /var/run/cdi)"
"$bin/gpuhook" cdi generate --driver-root "$work/node" --output "$work/cdi/nvidia.com-gpu.json" \
    --inventory-cache "$work/inventory.json"
"$bin/gpuhook" cdi validate "$work/cdi/nvidia.com-gpu.json"

step "devices it defines"
"$bin/gpuhook" cdi list --spec-dir "$work/cdi"

# The first device named by index: `0` on a node of whole GPUs, `0:0` when GPU 0 is in MIG mode.
dev=$("$bin/gpuhook" cdi list --spec-dir "$work/cdi" | sed -n 's|^nvidia.com/gpu=\([0-9][0-9:]*\)$|\1|p' | sort -V | head -n1)
step "what device nvidia.com/gpu=$dev injects"
if command -v jq >/dev/null; then
    jq -c --arg dev "$dev" '.devices[] | select(.name == $dev) | .containerEdits.deviceNodes[]' "$work/cdi/nvidia.com-gpu.json"
    echo "plus $(jq '.containerEdits.mounts | length' "$work/cdi/nvidia.com-gpu.json") read-only driver mounts and the createContainer hook $(jq -r '.containerEdits.hooks[0].args[0:3] | join(" ")' "$work/cdi/nvidia.com-gpu.json") (links, params, ld.so.cache) for every device"
fi

if command -v podman >/dev/null && command -v busybox >/dev/null; then
    step "podman run --device demo.gpuhook.dev/gpu=$dev (a busybox container)"
    vendor=demo.gpuhook.dev
    spec=/var/run/cdi/$vendor-gpu.json
    rootfs=$work/rootfs
    mkdir -p /var/run/cdi "$rootfs/bin" "$rootfs/etc" "$rootfs/proc" "$rootfs/dev" "$rootfs/sys" "$rootfs/tmp"
    cp "$(command -v busybox)" "$rootfs/bin/busybox"
    ln -sf busybox "$rootfs/bin/sh"; ln -sf busybox "$rootfs/bin/ls"
    trap 'rm -f "$spec"' EXIT
    "$bin/gpuhook" cdi generate --driver-root "$work/node" --vendor "$vendor" --output "$spec" \
        --inventory-cache "$work/inventory.json"
    podman run --rm --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
        --device "$vendor/gpu=$dev" --rootfs "$rootfs" /bin/sh -c 'ls -l /dev/nvidia* 2>/dev/null; ls /usr/lib/x86_64-linux-gnu /usr/lib64 2>/dev/null | grep -E "libcuda|libnvidia-ml" | head -4'
else
    echo "(install podman and busybox-static to also start a container: apt-get install podman busybox-static)"
fi

# Seed 002: the ConfigMap of time-slicing configs, one file per key (as kubelet mounts it), and
# the plugin's answer on each node without a config and with the node's key.
step "seed 002: what gpuhook-device-plugin advertises on an L20 node and a T4 node (dry-run)"
cfg=$work/time-slicing-config
mkdir -p "$cfg"
for key in any:2 l20:8 t4:3; do
    cat > "$cfg/${key%%:*}" <<YAML
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: ${key##*:}
YAML
done
printf 'version: v1\n' > "$work/no-sharing.yaml"
slots() { # CONFIG NODE [KEY]: the nvidia.com/gpu device IDs the plugin would advertise
    "$bin/gpuhook-device-plugin" dry-run --config "$1" --driver-root "$work/$2" ${3:+--config-name "$3"} 2>/dev/null |
        grep -c '"id": "GPU-'
}
before=0 after=0
for node in l20 t4; do
    "$bin/gpuhook-sim" build "$node" "$work/$node" >/dev/null
    b=$(slots "$work/no-sharing.yaml" "$node")
    a=$(slots "$cfg" "$node" "$node")
    printf '%-4s node (%s): nvidia.com/gpu %s -> %s   (node label nvidia.com/device-plugin.config=%s)\n' \
        "$node" "$("$work/$node/usr/bin/nvidia-smi" -L | sed 's/ (UUID.*//')" "$b" "$a" "$node"
    before=$((before + b)) after=$((after + a))
done
echo "schedulable GPU slots in the cluster: $before -> $after (pending pods can schedule; memory is not isolated under time-slicing)"
echo "the devices and labels: $bin/gpuhook-device-plugin dry-run --config $cfg --config-name l20 --driver-root $work/l20"

step "done: see README.md for the prestart hook, gpuhook-runtime, gpu-mps-daemon and gpuhook-device-plugin"
