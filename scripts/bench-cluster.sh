#!/usr/bin/env bash
# The seed's sustained workload against a local three-broker cluster
# (make bench-cluster): 1 KiB records at 100,000/s for 60 s over 16
# partitions with replication factor 3 and acks=quorum. Prints throughput,
# append latency p50/p95/p99 and the replica lag the brokers report.
#
# The cluster runs from scripts/cluster.sh in a fresh temporary directory
# with its own ports, and is stopped and removed on exit (the logs stay if
# the run fails). Replica lag: every SAMPLE_SECONDS each broker's /metrics
# is read; corelog_replica_lag_records (per shard, summed over the
# partitions it leads: leader log end minus each follower's acknowledged
# durable end) is summed per broker and over the cluster, next to
# corelog_replica_leader_partitions. Without that metric the lag is "n/a".
#
# Then the failover phase (corelog-bench failover), with the brokers'
# default timeouts (heartbeat 250 ms, session 2 s): FAILOVER_ROUNDS times,
# the leader of a one-partition topic with replication factor 3 is killed
# with SIGKILL (scripts/cluster.sh kill), appends are retried until the new
# leader acknowledges one (acks=quorum), the record acknowledged before the
# kill is read back, and the broker is restarted (scripts/cluster.sh start).
# The summary gives each round's time from the kill to that first
# acknowledged append, and the max; a round over 30 s fails the run.
#
# Environment: RATE (100000), DURATION (60), PARTITIONS (16),
# RECORD_BYTES (1024), ACKS (quorum), PRODUCERS (1), SHARDS per broker (1),
# BASE_PORT (17500), SAMPLE_SECONDS (5), FAILOVER_ROUNDS (3; 0 skips the
# failover phase), JSON=1 for corelog-bench's JSON reports.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=${RATE:-100000}
duration=${DURATION:-60}
partitions=${PARTITIONS:-16}
record_bytes=${RECORD_BYTES:-1024}
acks=${ACKS:-quorum}
producers=${PRODUCERS:-1}
sample_seconds=${SAMPLE_SECONDS:-5}
base_port=${BASE_PORT:-17500}
failover_rounds=${FAILOVER_ROUNDS:-3}
[[ $failover_rounds =~ ^[0-9]+$ ]] || { echo "FAILOVER_ROUNDS must be a number" >&2; exit 2; }
brokers=3
topic="bench-rf3"
json=()
[ -z "${JSON:-}" ] || json=(--json)

# The Makefile's one release build (RELEASE_BUILD): another package
# selection would recompile with another feature set.
cargo build --release --workspace
corelog=./target/release/corelog
bench=./target/release/corelog-bench

work=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-bench-cluster.XXXXXX")
samples="$work/lag-samples"
bench_out="$work/bench-output"
failover_out="$work/failover-output"
export CLUSTER_DIR="$work/cluster" BASE_PORT=$base_port NO_BUILD=1
sampler=""
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
    local status=$?
    if [ -n "$sampler" ]; then
        kill "$sampler" 2>/dev/null || true
        wait "$sampler" 2>/dev/null || true
    fi
    scripts/cluster.sh down >/dev/null || true
    if [ "$status" -eq 0 ]; then
        rm -rf "$work"
    else
        rm -rf "$CLUSTER_DIR"/node-*/data
        echo "bench-cluster failed; broker logs kept in $CLUSTER_DIR/node-*/log" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bootstrap="127.0.0.1:$((base_port + 1))"
scripts/cluster.sh up "$brokers"
"$corelog" --bootstrap "$bootstrap" topic create "$topic" \
    --partitions "$partitions" --replication-factor "$brokers"

# One line per broker and sample: seconds, broker, lag records, led partitions
# ("n/a" where the metric is absent or the broker does not answer).
metric_sum() {
    awk -v name="$1" '
        $1 == name || index($1, name "{") == 1 { sum += $2; found = 1 }
        END { if (found) printf "%.0f\n", sum; else print "n/a" }'
}
sample_once() {
    local elapsed=$1 i page
    for i in $(seq 1 "$brokers"); do
        page=$(curl -sf --max-time 2 "http://127.0.0.1:$((base_port + 100 + i))/metrics" || true)
        echo "$elapsed $i $(metric_sum corelog_replica_lag_records <<< "$page")" \
            "$(metric_sum corelog_replica_leader_partitions <<< "$page")"
    done
}
sample_loop() {
    local start=$SECONDS
    while :; do
        sleep "$sample_seconds"
        sample_once $((SECONDS - start)) >> "$samples"
    done
}

: > "$samples"
sample_loop &
sampler=$!

echo "== $brokers brokers, topic $topic: $partitions partitions, replication factor $brokers," \
    "acks=$acks, $record_bytes B records at $rate/s for $duration s"
set +e
"$bench" produce --bootstrap "$bootstrap" --topic "$topic" --partitions "$partitions" \
    --replication-factor "$brokers" --record-bytes "$record_bytes" --acks "$acks" \
    --rate "$rate" --duration "$duration" --producers "$producers" "${json[@]}" | tee "$bench_out"
bench_status=${PIPESTATUS[0]}
set -e
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""
sleep 1
after=$(sample_once after)

failover_status=0
if [ "$failover_rounds" -gt 0 ]; then
    echo
    echo "== failover: $failover_rounds leader kills (SIGKILL) of a 1-partition topic," \
        "replication factor $brokers, default broker timeouts"
    set +e
    "$bench" failover --topic failover --replication-factor "$brokers" \
        --bootstrap "$(seq -s , -f "127.0.0.1:%g" $((base_port + 1)) $((base_port + brokers)))" \
        --rounds "$failover_rounds" \
        --kill-command "scripts/cluster.sh kill {leader}" \
        --restart-command "scripts/cluster.sh start {leader}" \
        "${json[@]}" | tee "$failover_out"
    failover_status=${PIPESTATUS[0]}
    set -e
fi

# Cluster-wide lag per sample time, then max and last over the run.
summary() {
    awk -v brokers="$brokers" '
        $3 != "n/a" { lag[$1] += $3; seen[$1] = 1; any = 1 }
        $3 != "n/a" && (!($2 in broker_max) || $3 + 0 > broker_max[$2]) { broker_max[$2] = $3 + 0 }
        $3 != "n/a" { broker_last[$2] = $3 }
        $4 != "n/a" { leads[$2] = $4 }
        END {
            if (!any) { print "replica lag: n/a (the brokers export no corelog_replica_lag_records)"; exit }
            max = 0; n = 0
            for (t in seen) { n++; if (lag[t] > max) max = lag[t] }
            last = -1
            for (t in seen) if (t + 0 > last) last = t + 0
            printf "replica lag (records, %d samples): cluster max %d, last %d\n", n, max, lag[last]
            for (b = 1; b <= brokers; b++) if (b in broker_max)
                printf "  broker %s: max %d, last %d, leads %s partitions\n", b, broker_max[b], broker_last[b], (b in leads ? leads[b] : "n/a")
        }' "$samples"
}

echo
echo "== summary"
if [ ${#json[@]} -eq 0 ]; then
    grep -E '^  (throughput|append latency|first error)' "$bench_out" || true
elif command -v jq >/dev/null; then
    jq -r '"  throughput \(.records_per_second | floor) records/s, \(.megabytes_per_second * 10 | floor / 10) MB/s",
        "  append latency: p50 \(.append_latency.p50_us / 1000) ms, p95 \(.append_latency.p95_us / 1000) ms, p99 \(.append_latency.p99_us / 1000) ms"' \
        "$bench_out" || true
fi
summary
awk '{ printf "  after the run: broker %s lag %s\n", $2, $3 }' <<< "$after"
if [ "$failover_rounds" -gt 0 ]; then
    if [ ${#json[@]} -eq 0 ]; then
        awk '/^  failover/ { sub(/^  failover:? /, "  failover: "); print; next }
            /^  (per round|FAILED)/ { sub(/^  /, "  failover: "); print }' "$failover_out" || true
    elif command -v jq >/dev/null; then
        jq -r '"  failover: per round: \([.rounds[] | if .failover_ms then "\(.failover_ms / 10 | floor / 100) s" else "-" end] | join(", "))",
            "  failover: max \(if .max_failover_ms then "\(.max_failover_ms / 10 | floor / 100) s" else "n/a" end)\(if .ok then "" else " FAILED" end)"' \
            "$failover_out" || true
    fi
fi
[ "$bench_status" -eq 0 ] || exit "$bench_status"
exit "$failover_status"
