#!/usr/bin/env bash
# Runs every test of the workspace: unit tests, simulator tests and the end-to-end tests with real
# runc, podman and containerd. End-to-end tests need root; without it they skip with a message,
# unless GPUHOOK_REQUIRE_E2E=1 (set by .ci/run), which turns every skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# The e2e tests run the workspace's binaries and the mock NVML cdylib, so build them all first.
cargo build --workspace --bins --lib
cargo test --workspace --no-fail-fast "$@"
