#!/usr/bin/env bash
# Two builds of corelogd side by side on this machine, alternating rounds,
# with the same load generator: the seed's workload (bench-broker.sh's
# three phases) against a fresh broker of each build, plus each build's
# `corelog-bench storage`. Disk and CPU vary between runs on a shared
# machine, so only a comparison inside one run means anything.
#
#   scripts/bench-compare.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS]
#
# Each *_BIN_DIR holds corelogd and corelog-bench (for example a release
# build of an older commit, and ./target/release). The load generator is
# NEW_BIN_DIR's corelog-bench for both. Prints one line per phase and
# build with the latencies, the broker's CPU seconds and the load
# generator's; the raw reports go to $OUT (default target/bench-compare).
# Environment: SHARDS (2), PORT (17400), DURATION (60), PEAK_DURATION (10),
# E2E_DURATION (30), STORAGE=0 to skip the storage benchmark, STORAGE_ARGS
# (flags for `corelog-bench storage`, e.g. "--rounds 1 --seconds 3").
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench-compare.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS]}
new=${2:?usage: bench-compare.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS]}
rounds=${3:-3}
shards=${SHARDS:-2}
port=${PORT:-17400}
out=${OUT:-target/bench-compare}
mkdir -p "$out"
load=$new/corelog-bench
ticks=$(getconf CLK_TCK)

broker=
cleanup() {
    if [ -n "$broker" ]; then kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null; fi
    rm -rf "${TMPDIR:-/var/tmp}"/corelog-compare.*
}
trap cleanup EXIT

cpu_seconds() { # utime + stime of a process, in seconds
    awk -v t="$ticks" '{ printf "%.1f", ($14 + $15) / t }' "/proc/$1/stat"
}

phase() { # build label round name broker-pid args...
    local label=$1 round=$2 name=$3 broker=$4
    shift 4
    local before report user_sys
    before=$(cpu_seconds "$broker")
    report=$out/$label-$round-$name.txt
    # A failed run (records not seen in time, say) is reported, not fatal.
    { TIMEFORMAT='%U %S'; time "$load" "$@" > "$report" 2>&1 || true; } 2> "$report.time"
    local after
    after=$(cpu_seconds "$broker")
    user_sys=$(awk '{ printf "%.1f", $1 + $2 }' "$report.time")
    local summary
    summary=$(grep -E -m1 -i 'p50|p95|p99' "$report" | tr -s ' ' || true)
    printf '%-4s round %s %-9s broker_cpu_s=%-6s loadgen_cpu_s=%-6s %s\n' "$label" "$round" \
        "$name" "$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", a - b }')" \
        "$user_sys" "$summary"
}

run_build() { # label bin-dir round
    local label=$1 bin=$2 round=$3
    local data
    data=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-compare.XXXXXX")
    # Write-back of an earlier build or run stalls every fdatasync: start
    # each build on a quiet disk.
    sync
    sleep 5
    "$bin/corelogd" --data-dir "$data" --shards "$shards" \
        --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 80))" \
        --disk-reserve-bytes $((1 << 30)) 2> "$out/$label-$round-broker.log" &
    broker=$!
    for _ in $(seq 1 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        sleep 0.1
    done
    local common=(--bootstrap "127.0.0.1:$port" --partitions 16 --record-bytes 1024)
    phase "$label" "$round" sustained "$broker" produce "${common[@]}" --topic seed \
        --rate 100000 --duration "${DURATION:-60}"
    phase "$label" "$round" peak "$broker" produce "${common[@]}" --topic seed \
        --rate 200000 --duration "${PEAK_DURATION:-10}"
    phase "$label" "$round" e2e "$broker" e2e "${common[@]}" --topic seed-e2e \
        --rate 100000 --duration "${E2E_DURATION:-30}"
    kill "$broker" && wait "$broker" 2>/dev/null || true
    broker=
    rm -rf "$data"
    if [ "${STORAGE:-1}" != 0 ]; then
        local report=$out/$label-$round-storage.txt
        # shellcheck disable=SC2086 # STORAGE_ARGS is a list of flags
        "$bin/corelog-bench" storage ${STORAGE_ARGS:-} > "$report" 2>&1 || true
        printf '%-4s round %s storage   %s\n' "$label" "$round" \
            "$(grep -E -m1 -i 'p50|p99|MB/s|records/s' "$report" | tr -s ' ' || true)"
    fi
}

for round in $(seq 1 "$rounds"); do
    # Alternate which build goes first, so that neither always runs on a
    # warmer (or more tired) disk.
    if [ $((round % 2)) = 1 ]; then
        run_build old "$old" "$round"
        run_build new "$new" "$round"
    else
        run_build new "$new" "$round"
        run_build old "$old" "$round"
    fi
done
