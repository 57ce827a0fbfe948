#!/usr/bin/env bash
# The seed's workload against one local broker (make bench-broker):
# 1 KiB records at 100,000/s for 60 s over 16 partitions, a 200,000/s peak
# for 10 s, then producer and consumer together (visibility latency).
#
# Environment: SHARDS (default 2), PORT (default 17400), DURATION (60),
# PEAK_DURATION (10), E2E_DURATION (30), JSON=1 for JSON reports.
set -euo pipefail
cd "$(dirname "$0")/.."

shards=${SHARDS:-2}
port=${PORT:-17400}
metrics_port=$((port + 80))
json=${JSON:+--json}

# The Makefile's one release build (RELEASE_BUILD): another package
# selection would recompile with another feature set.
cargo build --release --workspace
bench=./target/release/corelog-bench
data=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-bench.XXXXXX")
./target/release/corelogd --data-dir "$data" --shards "$shards" \
    --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics_port" \
    --disk-reserve-bytes $((1 << 30)) 2> "$data.log" &
broker=$!
cleanup() {
    kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null
    rm -rf "$data" "$data.log"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.1
done

common=(--bootstrap "127.0.0.1:$port" --partitions 16 --record-bytes 1024 $json)
echo "== sustained: 100,000 records/s for ${DURATION:-60} s"
"$bench" produce "${common[@]}" --topic seed --rate 100000 --duration "${DURATION:-60}"
echo "== peak: 200,000 records/s for ${PEAK_DURATION:-10} s"
"$bench" produce "${common[@]}" --topic seed --rate 200000 --duration "${PEAK_DURATION:-10}"
echo "== end to end: 100,000 records/s for ${E2E_DURATION:-30} s"
"$bench" e2e "${common[@]}" --topic seed-e2e --rate 100000 --duration "${E2E_DURATION:-30}"
echo "== broker-side append and fsync latency (from /metrics)"
exec 3<>"/dev/tcp/127.0.0.1/$metrics_port"
printf 'GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n' >&3
grep -E '^corelog_(append|fsync)_latency_seconds_(sum|count)|^corelog_errors_total' <&3 || true
