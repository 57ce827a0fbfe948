#!/usr/bin/env bash
# What the trust boundary costs: one broker, the seed's workload (16
# partitions, 1 KiB records at 100,000/s for 60 s, acks=quorum) in three
# set-ups side by side, alternating their order each round:
#
#   plaintext  no TLS, no login, no ACLs
#   tls        TLS 1.3 between client and broker
#   secured    TLS, a SCRAM-SHA-512 login, --authorization on with the
#              producer's ACLs (an administrator, a super user by its
#              client certificate, creates the user and grants it)
#
#   scripts/bench-security.sh [ROUNDS]
#
# Prints one line per set-up and round (throughput, latencies, the broker's
# CPU seconds and per record, the load generator's CPU seconds), then the
# medians; raw reports go to $OUT (default target/bench-security).
# Environment: BIN (target/release), SHARDS (2), PORT (17500), RATE
# (100000), DURATION (60).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=${BIN:-target/release}
shards=${SHARDS:-2}
port=${PORT:-17500}
rate=${RATE:-100000}
duration=${DURATION:-60}
out=${OUT:-target/bench-security}
mkdir -p "$out"
ticks=$(getconf CLK_TCK)
certs=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-bench-certs.XXXXXX")
scripts/dev-certs.sh "$certs" > /dev/null
echo "bench-password" > "$certs/bench.password"

broker=
data=
cleanup() {
    if [ -n "$broker" ]; then kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null; fi
    rm -rf "$certs" "${TMPDIR:-/var/tmp}"/corelog-bench-security.*
}
trap cleanup EXIT

cpu_seconds() { # utime + stime of a process, in seconds
    awk -v t="$ticks" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"
}

start_broker() { # setup
    local setup=$1 security=()
    case $setup in
        tls) security=(--tls-cert "$certs/broker.pem" --tls-key "$certs/broker.key") ;;
        secured) security=(--tls-cert "$certs/broker.pem" --tls-key "$certs/broker.key"
            --tls-client-ca "$certs/ca.pem" --tls-client-auth optional
            --authentication required --authorization on --super-users client) ;;
    esac
    data=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-bench-security.XXXXXX")
    # Write-back of an earlier run stalls every fdatasync: start quiet.
    sync
    sleep 5
    "$bin/corelogd" --data-dir "$data" --shards "$shards" \
        --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 80))" \
        --disk-reserve-bytes $((1 << 30)) "${security[@]}" 2> "$out/broker-$setup.log" &
    broker=$!
    for _ in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        sleep 0.1
    done
}

client_flags() { # setup: the load generator's connection flags
    case $1 in
        plaintext) ;;
        tls) echo "--tls-ca $certs/ca.pem" ;;
        secured) echo "--tls-ca $certs/ca.pem --sasl-user bench --sasl-password-file $certs/bench.password --sasl-mechanism SCRAM-SHA-512" ;;
    esac
}

enrol() { # the secured set-up's user and ACLs, made by the certified administrator
    local admin=(--bootstrap "127.0.0.1:$port" --tls-ca "$certs/ca.pem"
        --tls-cert "$certs/client.pem" --tls-key "$certs/client.key")
    "$bin/corelog" "${admin[@]}" user create bench --password-stdin \
        --mechanism SCRAM-SHA-512 < "$certs/bench.password" > /dev/null
    for operation in create produce; do
        "$bin/corelog" "${admin[@]}" acl add --allow bench --operation "$operation" \
            --topic bench-security > /dev/null
    done
}

run() { # setup round
    local setup=$1 round=$2 report=$out/$1-$2.json
    start_broker "$setup"
    [ "$setup" != secured ] || enrol
    local before after flags
    before=$(cpu_seconds "$broker")
    # shellcheck disable=SC2046 # the flags are words
    { TIMEFORMAT='%U %S'; time "$bin/corelog-bench" produce --json \
        --bootstrap "127.0.0.1:$port" --topic bench-security --partitions 16 \
        --record-bytes 1024 --rate "$rate" --duration "$duration" \
        $(client_flags "$setup") > "$report" 2> "$report.err" || true; } 2> "$report.time"
    after=$(cpu_seconds "$broker")
    kill "$broker" && wait "$broker" 2>/dev/null || true
    broker=
    rm -rf "$data"
    python3 - "$setup" "$round" "$report" "$before" "$after" "$report.time" <<'PY'
import json, sys
setup, round_, report, before, after, timing = sys.argv[1:]
try:
    r = json.load(open(report))
except Exception as error:
    print(f"{setup:<9} round {round_}: no report ({error})")
    sys.exit(0)
p = r.get("produce", r)
lat = p["append_latency"]
acked = p["acknowledged"]
broker_cpu = float(after) - float(before)
user, system = map(float, open(timing).read().split())
row = {
    "setup": setup, "round": int(round_), "records_per_second": p["records_per_second"],
    "p50_ms": lat["p50_us"] / 1000, "p95_ms": lat["p95_us"] / 1000, "p99_ms": lat["p99_us"] / 1000,
    "broker_cpu_s": broker_cpu, "broker_cpu_us_per_record": broker_cpu * 1e6 / max(acked, 1),
    "loadgen_cpu_s": user + system, "errors": p["errors"],
}
print(json.dumps(row))
PY
}

setups=(plaintext tls secured)
for round in $(seq 1 "$rounds"); do
    # Rotate the order each round, so that no set-up always runs first
    # (on a quieter disk) or last.
    shift_by=$(( (round - 1) % 3 ))
    order=("${setups[@]:shift_by}" "${setups[@]:0:shift_by}")
    for setup in "${order[@]}"; do
        run "$setup" "$round"
    done
done | tee "$out/rows.jsonl"

python3 - "$out/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("\nmedians over rounds")
print(f"{'setup':<10}{'rec/s':>10}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'broker µs/rec':>15}{'loadgen cpu s':>15}")
base = None
for setup in ["plaintext", "tls", "secured"]:
    mine = [row for row in rows if row["setup"] == setup]
    if not mine:
        continue
    median = lambda key: statistics.median(row[key] for row in mine)
    per_record = median("broker_cpu_us_per_record")
    base = base or per_record
    print(f"{setup:<10}{median('records_per_second'):>10.0f}{median('p50_ms'):>9.2f}{median('p95_ms'):>9.2f}"
          f"{median('p99_ms'):>9.2f}{per_record:>10.2f} ({per_record / base - 1:+.0%}){median('loadgen_cpu_s'):>11.1f}")
PY
