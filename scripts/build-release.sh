#!/usr/bin/env bash
# Builds the release binaries that nodes run, linked against glibc 2.17 so that they start on
# RHEL 7/8, Ubuntu 18.04/20.04 and Amazon Linux 2 hosts as well as on new ones, then checks the
# floor with scripts/check-glibc.sh. One build serves everything: the binaries in $DIST, the
# container image (deploy/image) and, with --deb, the Debian packages (scripts/build-deb.py, from
# the crates' [package.metadata.deb]).
#
#   scripts/build-release.sh [--deb] [--image TAG]
#
# Needs cargo-zigbuild and zig (`pip install ziglang cargo-zigbuild`; installed when missing) and,
# for --deb, python3 (3.11+) and dpkg-deb; not cargo-deb, whose build from source cost every
# cold CI run minutes (`cargo deb --no-build --no-strip` makes the same packages). The binaries
# stay dynamically linked against glibc: gpuhook dlopens NVML at run time, which a static (musl)
# binary cannot do.
# CARGO_TARGET_DIR is honoured (default: target/); the binaries land in
# $CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release and are copied to $DIST (default
# $CARGO_TARGET_DIR/dist).
set -euo pipefail
cd "$(dirname "$0")/.."

deb=false
image=""
while [ $# -gt 0 ]; do
    case "$1" in
        --deb) deb=true ;;
        --image) image="${2:?--image needs a tag, e.g. gpuhook-installer:dev}"; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-release: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

glibc="${GPUHOOK_GLIBC:-2.17}"
triple="x86_64-unknown-linux-gnu"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
dist="${DIST:-$target_dir/dist}"
bins=(gpuhook gpuhook-runtime gpu-mps-daemon gpuhook-installer gpuhook-device-plugin gpuhook-mig-parted gpuhook-exporter gpuhook-dra-plugin gpuhook-mig-manager)

if ! command -v cargo-zigbuild >/dev/null 2>&1 || ! python3 -m ziglang version >/dev/null 2>&1; then
    echo "build-release: installing ziglang and cargo-zigbuild from PyPI" >&2
    python3 -m pip install --quiet ziglang cargo-zigbuild 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages ziglang cargo-zigbuild
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
    scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    case ":$PATH:" in *":$scripts:"*) ;; *) export PATH="$PATH:$scripts" ;; esac
fi

start=$(date +%s)
CARGO_TARGET_DIR="$target_dir" cargo zigbuild --release --locked --target "$triple.$glibc" \
    -p gpuhook -p gpuhook-wrapper -p gpu-mps-daemon -p gpuhook-installer -p gpuhook-device-plugin -p gpuhook-exporter -p gpuhook-dra -p gpuhook-mig-manager --bins
echo "build-release: cargo zigbuild took $(( $(date +%s) - start ))s" >&2

mkdir -p "$dist"
for b in "${bins[@]}"; do
    install -m 0755 "$target_dir/$triple/release/$b" "$dist/$b"
done
GPUHOOK_GLIBC="$glibc" scripts/check-glibc.sh "$dist"

if [ -n "$image" ]; then
    deploy/image/build.sh "$dist" "$image"
fi

if $deb; then
    scripts/build-deb.py --release-dir "$target_dir/$triple/release" --output "$dist" \
        hook/Cargo.toml mps-daemon/Cargo.toml
    ls -l "$dist"/*.deb
fi
