#!/usr/bin/env bash
# The produce stall of a planned restart (issue 38): a steady producer
# (RATE records/s, 1 KiB, acks=quorum) writes to a one-partition topic with
# replication factor 3 on a local three-broker cluster; after WARMUP
# seconds the partition leader's broker gets SIGTERM (scripts/cluster.sh
# stop). Reported per round: the longest time between two acknowledgements
# (corelog-bench's max_ack_gap_ms, the stall), the records that failed,
# and p99. One partition, so that other partitions' acknowledgements do
# not hide the stall.
#
#   scripts/bench-planned-restart.sh NAME=BUILD_DIR [NAME=BUILD_DIR ...]
#
# Each BUILD_DIR holds corelogd and corelog; the load generator is this
# tree's release corelog-bench (it knows max_ack_gap_ms) for every build,
# so that rounds compare brokers. Builds alternate within each round.
# Environment: ROUNDS (3), RATE (20000), DURATION (20), WARMUP (8),
# BASE_PORT (17800), BENCH (the load generator; default this tree's).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
rate=${RATE:-20000}
duration=${DURATION:-20}
warmup=${WARMUP:-8}
bench=${BENCH:-./target/release/corelog-bench}
[ $# -gt 0 ] || { echo "usage: $0 NAME=BUILD_DIR ..." >&2; exit 2; }
[ -x "$bench" ] || { echo "build $bench first (cargo build --release --workspace)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-planned-restart.XXXXXX")
export CLUSTER_DIR="$work/cluster" BASE_PORT=${BASE_PORT:-17800} NO_BUILD=1
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
    scripts/cluster.sh down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

bootstrap="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
printf '%-10s %5s %14s %8s %10s %8s\n' build round "max gap ms" failed "p99 ms" acked
for round in $(seq 1 "$rounds"); do
    for spec in "$@"; do
        name=${spec%%=*}
        dir=${spec#*=}
        export CORELOGD="$dir/corelogd" CORELOG="$dir/corelog"
        rm -rf "$CLUSTER_DIR"
        scripts/cluster.sh up 3 >/dev/null
        "$CORELOG" --bootstrap "$bootstrap" topic create stall --partitions 1 \
            --replication-factor 3 >/dev/null
        "$bench" produce --json --bootstrap "$bootstrap" --topic stall --partitions 1 \
            --replication-factor 3 --rate "$rate" --duration "$duration" \
            > "$work/report.json" 2>"$work/bench.err" &
        load=$!
        sleep "$warmup"
        leader=$("$CORELOG" --json --bootstrap "$bootstrap" topic describe stall \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["partition_details"][0]["leader"])')
        scripts/cluster.sh stop "$leader" >/dev/null
        wait "$load"
        python3 - "$work/report.json" "$name" "$round" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<10} {sys.argv[3]:>5} {report['max_ack_gap_ms']:>14.1f} {report['errors']:>8} "
      f"{report['append_latency']['p99_us'] / 1000:>10.1f} {report['acknowledged']:>8}")
EOF
        scripts/cluster.sh down >/dev/null
    done
done
