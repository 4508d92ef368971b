#!/usr/bin/env bash
# Regenerates cdi-specs/<profile>.json, the CDI spec gpuhook generates for every reference node
# profile, and checks each one with `gpuhook cdi validate`.
#
# Run as root (materialising a node makes device nodes) from anywhere, after building the
# workspace (`cargo build --workspace`):
#   sudo scripts/regen-cdi-specs.sh
# Each profile is materialised at the FIXED path /var/lib/gpuhook-sim/<profile> so that the
# hostPaths in the specs are stable, and the hooks name /usr/bin/gpuhook (the installed path) rather
# than the build directory. tests/tests/cdi_specs.rs regenerates the same way and fails when a
# checked-in file drifts from the generator.
#
# Environment: GPUHOOK_BIN_DIR (default: $CARGO_TARGET_DIR/debug or target/debug).
set -euo pipefail
cd "$(dirname "$0")/.."

SIM_ROOT=/var/lib/gpuhook-sim
BIN_DIR=${GPUHOOK_BIN_DIR:-${CARGO_TARGET_DIR:-target}/debug}

if [ "$(id -u)" != 0 ]; then
    echo "regen-cdi-specs: run as root (materialising a simulated node needs mknod)" >&2
    exit 1
fi
for f in gpuhook gpuhook-sim sim-nvidia-smi sim-nvidia-cuda-mps-control libgpuhook_mock_nvml.so; do
    if [ ! -e "$BIN_DIR/$f" ]; then
        echo "regen-cdi-specs: $BIN_DIR/$f is missing: run \`cargo build --workspace\` first (or set GPUHOOK_BIN_DIR)" >&2
        exit 1
    fi
done

mkdir -p cdi-specs
for profile in $("$BIN_DIR/gpuhook-sim" list | awk '{print $1}'); do
    root="$SIM_ROOT/$profile"
    build_log=$("$BIN_DIR/gpuhook-sim" build "$profile" "$root" \
        --mock-nvml "$BIN_DIR/libgpuhook_mock_nvml.so" --bin-dir "$BIN_DIR")
    if grep -q '^note:' <<<"$build_log"; then
        echo "regen-cdi-specs: $profile was not fully materialised:" >&2
        echo "$build_log" >&2
        exit 1
    fi
    # A node with no device to describe (MIG on without MIG devices; nvidia-ctk fails there)
    # gets no spec: gpuhook exits 0 with a warning, kept in cdi-specs/<profile>.empty.
    rm -f "cdi-specs/$profile.json" "cdi-specs/$profile.empty" "cdi-specs/$profile.error"
    if ! err=$("$BIN_DIR/gpuhook" --log-level error cdi generate \
        --driver-root "$root" \
        --output "cdi-specs/$profile.json" \
        --gpuhook-path /usr/bin/gpuhook \
        --no-inventory-cache 2>&1); then
        echo "regen-cdi-specs: $profile: $err" >&2
        exit 1
    fi
    if [ ! -e "cdi-specs/$profile.json" ]; then
        printf '%s\n' "$err" | tail -n 1 >"cdi-specs/$profile.empty"
        echo "cdi-specs/$profile.empty: $(cat "cdi-specs/$profile.empty")"
        continue
    fi
    "$BIN_DIR/gpuhook" cdi validate "cdi-specs/$profile.json"
done
