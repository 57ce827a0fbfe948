#!/usr/bin/env bash
# A throttled replica move beside a steady load (issue 38): on a local
# four-broker cluster, topic `moving` (one partition, replication factor 3)
# is filled for FILL seconds as fast as the cluster takes it; then a steady
# producer (RATE records/s, 1 KiB, acks=quorum) writes to topic `steady`
# (PARTITIONS partitions, replication factor 3) for BASE seconds, and then
# for MOVE seconds while `moving` is reassigned to the broker outside its
# set with --throttle THROTTLE bytes/s. The move's copy rate is sampled from
# `corelog partition reassignments --json` every second while its learner
# copies. Reported per round: the partition's size, the copy rate and its
# ratio to the throttle, how long the move took, the steady load's p99
# before and during the move and their ratio, failed records, and the CPU
# seconds of the brokers and of the load generator.
#
#   scripts/bench-reassign.sh [BUILD_DIR]
#
# BUILD_DIR holds corelogd and corelog (default target/release); the load
# generator is this tree's release corelog-bench. Environment: ROUNDS (3),
# THROTTLE (50000000), RATE (10000), PARTITIONS (3), FILL (10), BASE (15),
# MOVE (40), BASE_PORT (18100), BENCH.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
throttle=${THROTTLE:-50000000}
rate=${RATE:-10000}
partitions=${PARTITIONS:-3}
fill=${FILL:-10}
base=${BASE:-15}
move=${MOVE:-40}
dir=${1:-target/release}
bench=${BENCH:-./target/release/corelog-bench}
[ -x "$bench" ] && [ -x "$dir/corelogd" ] && [ -x "$dir/corelog" ] \
    || { echo "build first (cargo build --release --workspace)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-bench-reassign.XXXXXX")
export CLUSTER_DIR="$work/cluster" BASE_PORT=${BASE_PORT:-18100} NO_BUILD=1
export CORELOGD="$dir/corelogd" CORELOG="$dir/corelog"
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
    scripts/cluster.sh down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

bootstrap="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))"
corelog() { "$CORELOG" --bootstrap "$bootstrap" "$@"; }

# CPU seconds (user + system) of the processes $@ so far.
cpu_seconds() {
    local total=0 pid ticks
    for pid in "$@"; do
        ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
        total=$((total + ticks))
    done
    awk -v t="$total" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz }'
}

printf '%5s %9s %11s %7s %7s %12s %12s %7s %7s %11s %10s\n' round "size MB" "copy MB/s" \
    ratio "move s" "p99 base ms" "p99 move ms" ratio failed "broker cpu" "bench cpu"
for round in $(seq 1 "$rounds"); do
    rm -rf "$CLUSTER_DIR"
    scripts/cluster.sh up 4 >/dev/null
    brokers=$(cat "$CLUSTER_DIR"/node-*/pid)
    corelog topic create moving --partitions 1 --replication-factor 3 >/dev/null
    corelog topic create steady --partitions "$partitions" --replication-factor 3 >/dev/null
    "$bench" produce --json --bootstrap "$bootstrap" --topic moving --partitions 1 \
        --replication-factor 3 --rate 0 --producers 2 --duration "$fill" > "$work/fill.json" 2>/dev/null
    read -r size replicas < <(corelog --json topic describe moving | python3 -c '
import json, sys
partition = json.load(sys.stdin)[0]["partition_details"][0]
print(partition["size_bytes"], ",".join(str(r) for r in partition["replicas"]))')
    outside=$(python3 -c "print(next(b for b in range(1, 5) if str(b) not in '$replicas'.split(',')))")
    # The move replaces the set's last replica with the broker outside it.
    target="${replicas%,*},$outside"

    # bash's `time` gives the load generator's CPU seconds when it exits.
    (
        TIMEFORMAT='%U %S'
        time "$bench" produce --json --bootstrap "$bootstrap" --topic steady \
            --partitions "$partitions" --replication-factor 3 \
            --schedule "$rate:$base,$rate:$move" > "$work/steady.json" 2>"$work/bench.err"
    ) 2>"$work/bench.time" &
    load=$!
    # shellcheck disable=SC2086 # one pid per word
    cpu_before=$(cpu_seconds $brokers)
    sleep "$base"
    corelog partition reassign moving 0 --replicas "$target" --throttle "$throttle" >/dev/null
    started=$(date +%s.%N)
    : > "$work/samples"
    while true; do
        corelog --json partition reassignments > "$work/now.json" || true
        python3 - "$work/now.json" >> "$work/samples" <<'PY'
import json, sys, time
moves = json.load(open(sys.argv[1])).get("reassignments", [])
copying = [m for m in moves if m["learners"]]
if copying:
    print(f'{time.time():.3f} {copying[0]["bytes_copied"]}')
elif moves:
    print("stepping")
else:
    print("done")
PY
        [ "$(tail -n 1 "$work/samples")" = done ] && break
        if awk -v s="$started" -v n="$(date +%s.%N)" 'BEGIN { exit !(n - s > 300) }'; then
            echo "round $round: the move did not end in 300 s" >&2
            break
        fi
        sleep 1
    done
    took=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    wait "$load"
    # shellcheck disable=SC2086 # one pid per word
    broker_cpu=$(awk -v a="$(cpu_seconds $brokers)" -v b="$cpu_before" 'BEGIN { printf "%.1f", a - b }')
    bench_cpu=$(awk '{ printf "%.1f", $1 + $2 }' "$work/bench.time")
    python3 - "$work/steady.json" "$work/samples" "$round" "$size" "$throttle" "$took" \
        "$broker_cpu" "$bench_cpu" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
samples = [line.split() for line in open(sys.argv[2]) if len(line.split()) == 2]
round_, size, throttle, took, broker_cpu, bench_cpu = sys.argv[3:9]
size, throttle = int(size), int(throttle)
# The copy rate between the first and the last sample of the learner
# copying: the move's start and its steps are not copy time.
rate = float("nan")
if len(samples) >= 2:
    (t0, b0), (t1, b1) = samples[0], samples[-1]
    if float(t1) > float(t0):
        rate = (int(b1) - int(b0)) / (float(t1) - float(t0))
base, during = (step["append_latency"]["p99_us"] / 1000 for step in report["steps"][:2])
print(f"{round_:>5} {size / 1e6:>9.0f} {rate / 1e6:>11.1f} {rate / throttle:>7.2f} {float(took):>7.1f} "
      f"{base:>12.1f} {during:>12.1f} {during / base:>7.2f} {report['errors']:>7} "
      f"{broker_cpu:>11} {bench_cpu:>10}")
PY
    scripts/cluster.sh down >/dev/null
done
