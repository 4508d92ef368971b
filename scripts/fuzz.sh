#!/usr/bin/env bash
# Builds every libFuzzer target of fuzz/libfuzzer and runs each for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     SECONDS per target (default 60); default: all targets
#
# Stable Rust only: the targets are built with the same coverage instrumentation cargo-fuzz uses
# without a sanitizer (`-Cpasses=sancov-module` and LLVM's sanitizer-coverage options, all stable
# flags), so neither nightly nor cargo-fuzz is needed. Each run starts from the checked-in seed
# corpus (fuzz/corpus/<target>, never modified) plus what earlier runs on this machine found
# (target/fuzz/corpus/<target>). A crash, a failed property (a panic), a hang (-timeout) or a
# memory blow-up (-rss_limit_mb) stops that target: the reproducer is left in
# fuzz/artifacts/<target>/ and the script exits 1 once every target has run.
# Env: FUZZ_JOBS (default 1) parallel workers per target; FUZZ_PARALLEL (default 1) targets run
#      at once (each is one single-threaded process, so CI runs `nproc` of them: the same inputs,
#      in half the time on 2 cores); FUZZ_NICE (default 10);
#      FUZZ_SEED and FUZZ_RUNS make a run repeatable: with a fixed seed and a run count that ends
#      before SECONDS, libFuzzer (one process) tries the same inputs on every machine, so CI
#      (which sets both) fails only on an input a developer's run of the same command also finds,
#      never on the luck of the day. Fuzz without them to explore.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-60}
shift || true
# (0 would mean "forever" to libFuzzer's -max_total_time.)
case $seconds in '' | *[!0-9]* | 0) echo "fuzz.sh: SECONDS must be a positive number, got '$seconds'" >&2; exit 2 ;; esac

# libfuzzer-sys compiles libFuzzer (C++): g++ is not among .ci/run's packages.
if ! command -v g++ >/dev/null 2>&1; then
    echo "fuzz.sh: installing g++ (needed to build libFuzzer)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends g++ >/dev/null
fi

host=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=$root/target/fuzz
# Instrument our code and its dependencies, not build scripts or proc macros: with an explicit
# --target, RUSTFLAGS apply to the target's crates only (what cargo-fuzz does).
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions=off -Coverflow-checks=on"
export RUST_BACKTRACE=1

manifest=fuzz/libfuzzer/Cargo.toml
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | grep -v '^gpuhook-fuzz-targets$')
targets=${*:-$all}
for t in $targets; do
    grep -qx "$t" <<<"$all" || { echo "fuzz.sh: unknown target '$t' (known: $(echo $all))" >&2; exit 2; }
done

start=$(date +%s)
echo "fuzz.sh: building $(wc -w <<<"$targets") targets"
nice -n "${FUZZ_NICE:-10}" cargo build --locked --release --manifest-path "$manifest" --target "$host" \
    $(printf -- '--bin %s ' $targets)
echo "fuzz.sh: built in $(($(date +%s) - start)) s"

# One job is one in-process fuzzer (with -jobs, even =1, libFuzzer forks workers that log to ./fuzz-N.log).
jobs=
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then jobs="-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS"; fi
repeat=
if [ -n "${FUZZ_SEED:-}" ]; then repeat="-seed=$FUZZ_SEED"; fi
if [ -n "${FUZZ_RUNS:-}" ]; then repeat="$repeat -runs=$FUZZ_RUNS"; fi

# Runs target $1; its report goes to $work.report, printed once it is over (runs may overlap).
fuzz_one() {
    local t=$1 seeds=fuzz/corpus/$1 work=$CARGO_TARGET_DIR/corpus/$1 artifacts=fuzz/artifacts/$1
    mkdir -p "$work" "$artifacts"
    # -max_total_time stops libFuzzer by itself; `timeout` is the backstop should it not.
    # New inputs go to $work (first corpus dir); the seeds are only read.
    if ! timeout --kill-after=30 $((seconds + 120)) nice -n "${FUZZ_NICE:-10}" \
        "$CARGO_TARGET_DIR/$host/release/$t" "$work" "$seeds" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        $jobs $repeat -print_final_stats=1 \
        -artifact_prefix="$artifacts/" >"$work.log" 2>&1; then
        {
            echo "fuzz.sh: $t FAILED; reproducer(s):"
            ls -1 "$artifacts" || true
            grep -E -m 10 -A2 'panicked at|ERROR: libFuzzer' "$work.log" | grep -v '^stack backtrace' || true
            echo "fuzz.sh: full log: $work.log; replay: $CARGO_TARGET_DIR/$host/release/$t <file>"
        } >"$work.report" 2>&1
        return 1
    fi
    {
        echo -n "fuzz.sh: $t: "
        grep -E '^stat::(number_of_executed_units|new_units_added)' "$work.log" | tr '\n' ' '  || true
        echo
        # FUZZ_RUNS cut short by the time limit: not the inputs a developer's run tries.
        local ran
        ran=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log")
        if [ -n "${FUZZ_RUNS:-}" ] && [ "${ran:-0}" -lt "$FUZZ_RUNS" ]; then
            echo "fuzz.sh: warning: $t ran ${ran:-0} of $FUZZ_RUNS inputs in ${seconds} s (a slow machine?)"
        fi
    } >"$work.report"
}

parallel=${FUZZ_PARALLEL:-1}
case $parallel in '' | *[!0-9]* | 0) echo "fuzz.sh: FUZZ_PARALLEL must be a positive number, got '$parallel'" >&2; exit 2 ;; esac
echo "fuzz.sh: each target for at most ${seconds} s, $parallel at a time"
failed=()
declare -A running=()
# Waits for one run to end; reports it.
reap() {
    local pid rc=0 t
    wait -n -p pid "${!running[@]}" || rc=$?
    t=${running[$pid]}
    unset "running[$pid]"
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        cat "$CARGO_TARGET_DIR/corpus/$t.report" >&2 || echo "fuzz.sh: $t failed (exit $rc)" >&2
    else
        cat "$CARGO_TARGET_DIR/corpus/$t.report"
    fi
}
for t in $targets; do
    while [ ${#running[@]} -ge "$parallel" ]; do reap; done
    fuzz_one "$t" &
    running[$!]=$t
done
while [ ${#running[@]} -gt 0 ]; do reap; done
echo "fuzz.sh: done in $(($(date +%s) - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
    exit 1
fi
