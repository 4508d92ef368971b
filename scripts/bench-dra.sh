#!/bin/sh
# The DRA plugin's benchmark (issue #25): NodePrepareResources p50/p99 over dra.sock for a 1-GPU,
# a MIG and an MPS claim (MPS daemon start included, MPS control simulator), and ResourceSlice
# publication for 8 GPUs x 7 MIG devices. Usage: scripts/bench-dra.sh [iterations] (default 200).
set -eu
cd "$(dirname "$0")/.."
profile="${BENCH_PROFILE:-release}"
cargo build --profile "$profile" -p gpuhook-sim-mps-control --bins
cargo build --profile "$profile" -p gpuhook-dra --example dra-bench
dir=target/$profile
[ "$profile" = dev ] && dir=target/debug
GPUHOOK_SIM_MPS_CONTROL="$PWD/$dir/sim-nvidia-cuda-mps-control" "$dir/examples/dra-bench" "${1:-200}"
