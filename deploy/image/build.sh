#!/usr/bin/env bash
# Builds the gpuhook-installer image with podman from a directory of built binaries, with no
# base image (FROM scratch): the build context is a root filesystem assembled here, holding the
# four binaries in /opt/gpuhook/bin and the glibc loader and shared libraries the installer and
# the MPS daemon need (copied from this build machine; the binaries need glibc >= 2.17, see
# scripts/check-glibc.sh).
# The installed binaries run on the host with the host's glibc, not with these.
#
#   deploy/image/build.sh BIN_DIR TAG      e.g. deploy/image/build.sh target/dist gpuhook-installer:0.1.0
set -euo pipefail

bin_dir="${1:?usage: build.sh BIN_DIR TAG}"
tag="${2:?usage: build.sh BIN_DIR TAG}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v podman >/dev/null 2>&1 || { echo "image: podman missing (apt-get install podman)" >&2; exit 2; }

ctx="$(mktemp -d "${TMPDIR:-/tmp}/gpuhook-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/opt/gpuhook/bin" "$ctx/rootfs/tmp"
for b in gpuhook gpuhook-runtime gpu-mps-daemon gpuhook-installer gpuhook-device-plugin gpuhook-exporter gpuhook-dra-plugin gpuhook-mig-manager; do
    [ -x "$bin_dir/$b" ] || { echo "image: $bin_dir/$b missing: build it first (scripts/build-release.sh)" >&2; exit 2; }
    install -m 0755 "$bin_dir/$b" "$ctx/rootfs/opt/gpuhook/bin/$b"
done
# The loader and libraries of the binaries that run in the image (the installer, and the MPS
# daemon, the device plugin, the exporter, the DRA plugin and the MIG manager of deploy/kubernetes), at the paths the binaries name (ldd resolves them).
for b in gpuhook-installer gpu-mps-daemon gpuhook-device-plugin gpuhook-exporter gpuhook-dra-plugin gpuhook-mig-manager; do ldd "$bin_dir/$b"; done | sort -u |
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' |
    while read -r lib; do
        mkdir -p "$ctx/rootfs$(dirname "$lib")"
        cp -L "$lib" "$ctx/rootfs$lib"
    done
cp "$here/Containerfile" "$ctx/Containerfile"
podman build --quiet --no-cache --tag "$tag" --file "$ctx/Containerfile" "$ctx"
