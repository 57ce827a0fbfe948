#!/usr/bin/env bash
# A rolling restart under load (issue 38): a steady producer (RATE
# records/s, 1 KiB, acks=quorum) writes to a topic of PARTITIONS partitions
# with replication factor 3 on a local three-broker cluster; after WARMUP
# seconds scripts/rolling-restart.sh restarts every broker, one at a time.
# The load runs in three steps of the same rate (corelog-bench --schedule):
# WARMUP seconds, then the WINDOW seconds the restart starts in, then the
# rest. Reported per round: how long the restart took (it must fit in the
# window for the window's p99 to be the restart's), the records that
# failed, the longest time between two acknowledgements, the window's p99,
# the worst one-second p99 in it, and the whole run's p99.
#
#   scripts/bench-rolling-restart.sh NAME=BUILD_DIR[:plain] ...
#
# Each BUILD_DIR holds corelogd and corelog; ":plain" restarts without
# maintenance mode (MAINTENANCE=0 of rolling-restart.sh), for builds
# without it. The load generator is this tree's release corelog-bench for
# every build. Builds alternate within each round. Environment: ROUNDS (3),
# RATE (20000), PARTITIONS (3), WARMUP (8), WINDOW (20), REST (10),
# BASE_PORT (17900), BENCH (the load generator; default this tree's).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
rate=${RATE:-20000}
partitions=${PARTITIONS:-3}
warmup=${WARMUP:-8}
window=${WINDOW:-20}
rest=${REST:-10}
bench=${BENCH:-./target/release/corelog-bench}
[ $# -gt 0 ] || { echo "usage: $0 NAME=BUILD_DIR[:plain] ..." >&2; exit 2; }
[ -x "$bench" ] || { echo "build $bench first (cargo build --release --workspace)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-rolling-restart.XXXXXX")
export CLUSTER_DIR="$work/cluster" BASE_PORT=${BASE_PORT:-17900} NO_BUILD=1
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
    scripts/cluster.sh down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

bootstrap="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
printf '%-10s %5s %10s %8s %12s %15s %16s %10s %8s\n' build round "restart s" failed \
    "max gap ms" "window p99 ms" "worst 1s p99 ms" "p99 ms" acked
for round in $(seq 1 "$rounds"); do
    for spec in "$@"; do
        name=${spec%%=*}
        dir=${spec#*=}
        plain=0
        if [[ $dir == *:plain ]]; then
            plain=1
            dir=${dir%:plain}
        fi
        export CORELOGD="$dir/corelogd" CORELOG="$dir/corelog"
        rm -rf "$CLUSTER_DIR"
        scripts/cluster.sh up 3 >/dev/null
        "$CORELOG" --bootstrap "$bootstrap" topic create rolling --partitions "$partitions" \
            --replication-factor 3 >/dev/null
        "$bench" produce --json --bootstrap "$bootstrap" --topic rolling \
            --partitions "$partitions" --replication-factor 3 \
            --schedule "$rate:$warmup,$rate:$window,$rate:$rest" \
            > "$work/report.json" 2>"$work/bench.err" &
        load=$!
        sleep "$warmup"
        from=$SECONDS
        MAINTENANCE=$((1 - plain)) scripts/rolling-restart.sh > "$work/restart.log" 2>&1 \
            || { echo "$name round $round: the rolling restart failed:" >&2; cat "$work/restart.log" >&2; }
        took=$((SECONDS - from))
        wait "$load"
        python3 - "$work/report.json" "$name" "$round" "$warmup" "$took" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
name, round_, warmup, took = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
seconds = report["p99_us_per_second"][warmup:warmup + took + 1]
worst = max(seconds) / 1000 if seconds else float("nan")
window = report["steps"][1]["append_latency"]["p99_us"] / 1000
print(f"{name:<10} {round_:>5} {took:>10} {report['errors']:>8} {report['max_ack_gap_ms']:>12.1f} "
      f"{window:>15.1f} {worst:>16.1f} {report['append_latency']['p99_us'] / 1000:>10.1f} "
      f"{report['acknowledged']:>8}")
PY
        scripts/cluster.sh down >/dev/null
    done
done
