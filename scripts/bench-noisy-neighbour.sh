#!/usr/bin/env bash
# The noisy neighbour, as a benchmark: tenant B's append latency alone and
# beside tenant A, who produces at ten times its quota, in alternating
# rounds on one broker.
#
#   scripts/bench-noisy-neighbour.sh [ROUNDS]
#
# Tenants log in with SCRAM over TLS; A has a produce quota of QUOTA bytes
# per second (512 KiB by default) and offers ten times that; B produces
# B_RATE (1000) records of 1 KiB per second on a topic of its own. Prints
# B's p50/p95/p99 per round alone and loaded, A's throughput against its
# quota, and the medians. Environment: BIN (target/release), SHARDS (2),
# PORT (17600), DURATION (30), QUOTA (524288), B_RATE (1000), OUT
# (target/bench-noisy-neighbour).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=${BIN:-target/release}
shards=${SHARDS:-2}
port=${PORT:-17600}
duration=${DURATION:-30}
quota=${QUOTA:-524288}
b_rate=${B_RATE:-1000}
out=${OUT:-target/bench-noisy-neighbour}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-noisy.XXXXXX")
scripts/dev-certs.sh "$work/certs" > /dev/null

broker= noisy=
cleanup() {
    for pid in $noisy $broker; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT

# The administrator logs in with its client certificate (CN "client").
admin=(--bootstrap "127.0.0.1:$port" --tls-ca "$work/certs/ca.pem"
    --tls-cert "$work/certs/client.pem" --tls-key "$work/certs/client.key")
"$bin/corelogd" --data-dir "$work/data" --shards "$shards" \
    --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 80))" \
    --disk-reserve-bytes $((1 << 30)) \
    --tls-cert "$work/certs/broker.pem" --tls-key "$work/certs/broker.key" \
    --tls-client-ca "$work/certs/ca.pem" --tls-client-auth optional \
    --authentication required 2> "$out/broker.log" &
broker=$!
for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.1
done
for tenant in tenant-a tenant-b; do
    echo "$tenant-password" > "$work/$tenant.password"
    "$bin/corelog" "${admin[@]}" user create "$tenant" --password-stdin < "$work/$tenant.password" > /dev/null
done
"$bin/corelog" "${admin[@]}" quota set user:tenant-a --produce-rate "$quota" > /dev/null

tenant() { # name: the load generator's connection flags
    echo "--bootstrap 127.0.0.1:$port --tls-ca $work/certs/ca.pem --sasl-user $1 --sasl-password-file $work/$1.password"
}

b_round() { # label round
    local report=$out/b-$1-$2.json
    # shellcheck disable=SC2046 # the flags are words
    "$bin/corelog-bench" produce --json $(tenant tenant-b) --topic quiet --partitions 4 \
        --record-bytes 1024 --rate "$b_rate" --duration "$duration" > "$report" 2> "$report.err" || true
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1])); l = r["append_latency"]
print(json.dumps({"tenant_b": sys.argv[2], "round": int(sys.argv[3]), "records_per_second": round(r["records_per_second"]),
    "p50_ms": l["p50_us"] / 1000, "p95_ms": l["p95_us"] / 1000, "p99_ms": l["p99_us"] / 1000}))' "$report" "$1" "$2"
}

loaded_round() { # round
    local report=$out/a-$1.json
    # A offers ten times its quota (1 KiB records); it is stopped when B is done.
    # shellcheck disable=SC2046
    "$bin/corelog-bench" produce --json $(tenant tenant-a) --topic noisy --partitions 4 \
        --record-bytes 1024 --rate $((10 * quota / 1024)) --duration $((duration + 5)) \
        > "$report" 2> "$report.err" &
    noisy=$!
    sleep 3
    local before after
    before=$(curl -s "127.0.0.1:$((port + 80))/metrics" | awk '/^corelog_bytes_in_total/ { sum += $2 } END { print sum + 0 }')
    b_round loaded "$1"
    after=$(curl -s "127.0.0.1:$((port + 80))/metrics" | awk '/^corelog_bytes_in_total/ { sum += $2 } END { print sum + 0 }')
    kill "$noisy" 2>/dev/null && wait "$noisy" 2>/dev/null || true
    noisy=
    echo "{\"tenant_a_round\": $1, \"broker_bytes_in_per_second_with_b\": $(( (after - before) / duration )), \"quota\": $quota, \"b_bytes_per_second\": $((b_rate * 1024))}"
}

for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) = 1 ]; then
        b_round alone "$round"
        loaded_round "$round"
    else
        loaded_round "$round"
        b_round alone "$round"
    fi
done | tee "$out/rows.jsonl"

python3 - "$out/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("\nmedians over rounds: tenant B")
for label in ["alone", "loaded"]:
    mine = [row for row in rows if row.get("tenant_b") == label]
    if mine:
        median = lambda key: statistics.median(row[key] for row in mine)
        print(f"  {label:<7} {median('records_per_second'):>6.0f} rec/s  p50 {median('p50_ms'):.2f} ms  p95 {median('p95_ms'):.2f} ms  p99 {median('p99_ms'):.2f} ms")
a = [row for row in rows if "tenant_a_round" in row]
if a:
    inflow = statistics.median(row["broker_bytes_in_per_second_with_b"] - row["b_bytes_per_second"] for row in a)
    quota = a[0]["quota"]
    print(f"tenant A (broker bytes in less B's): {inflow:.0f} B/s against a quota of {quota} ({inflow / quota - 1:+.1%})")
PY
