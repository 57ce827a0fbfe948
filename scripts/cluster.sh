#!/usr/bin/env bash
# A local N-broker corelog cluster on 127.0.0.1 for development and tests:
#
#   scripts/cluster.sh up [N]      start N brokers (default 3), all controller voters
#   scripts/cluster.sh down        stop them (SIGTERM, then wait)
#   scripts/cluster.sh status      which are running, and the cluster's topics
#
# Broker i (1..N) listens on 127.0.0.1:$((BASE_PORT + i)) with metrics on
# 127.0.0.1:$((BASE_PORT + 100 + i)) and keeps its data in $CLUSTER_DIR/node-i;
# racks rack-1..rack-N. No pinning and one shard per broker (this machine has
# two cores). State (pids) lives in $CLUSTER_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

base_port=${BASE_PORT:-7200}
cluster_dir=${CLUSTER_DIR:-target/cluster}
corelogd=${CORELOGD:-./target/release/corelogd}
corelog=${CORELOG:-./target/release/corelog}

voters() {
    local count=$1 list="" i
    for i in $(seq 1 "$count"); do
        list="${list:+$list,}$i@127.0.0.1:$((base_port + i))"
    done
    echo "$list"
}

up() {
    local count=${1:-3}
    if [ ! -x "$corelogd" ] || [ ! -x "$corelog" ]; then
        cargo build --release -p corelog-broker -p corelog-client --bins
    fi
    mkdir -p "$cluster_dir"
    local all_voters
    all_voters=$(voters "$count")
    echo "$count" > "$cluster_dir/size"
    for i in $(seq 1 "$count"); do
        local node_dir="$cluster_dir/node-$i"
        mkdir -p "$node_dir"
        if [ -f "$node_dir/pid" ] && kill -0 "$(cat "$node_dir/pid")" 2>/dev/null; then
            echo "broker $i already running (pid $(cat "$node_dir/pid"))"
            continue
        fi
        "$corelogd" --node-id "$i" --rack "rack-$i" --shards 1 \
            --listen "127.0.0.1:$((base_port + i))" \
            --metrics-listen "127.0.0.1:$((base_port + 100 + i))" \
            --advertised-host 127.0.0.1 \
            --controller-voters "$all_voters" \
            --data-dir "$node_dir/data" \
            --disk-reserve-bytes $((256 << 20)) \
            > "$node_dir/log" 2>&1 &
        echo $! > "$node_dir/pid"
        echo "broker $i: 127.0.0.1:$((base_port + i)), pid $!, log $node_dir/log"
    done
    for _ in $(seq 1 100); do
        if "$corelog" --bootstrap "127.0.0.1:$((base_port + 1))" topic list >/dev/null 2>&1; then
            echo "cluster of $count ready; bootstrap 127.0.0.1:$((base_port + 1))"
            return 0
        fi
        sleep 0.2
    done
    echo "the cluster did not become ready; see $cluster_dir/node-*/log" >&2
    return 1
}

down() {
    local node_dir pid
    for node_dir in "$cluster_dir"/node-*; do
        [ -f "$node_dir/pid" ] || continue
        pid=$(cat "$node_dir/pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
            echo "stopped broker $(basename "$node_dir") (pid $pid)"
        fi
        rm -f "$node_dir/pid"
    done
}

status() {
    local node_dir pid
    for node_dir in "$cluster_dir"/node-*; do
        [ -d "$node_dir" ] || continue
        pid=$(cat "$node_dir/pid" 2>/dev/null || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            echo "$(basename "$node_dir"): running (pid $pid)"
        else
            echo "$(basename "$node_dir"): stopped"
        fi
    done
    "$corelog" --bootstrap "127.0.0.1:$((base_port + 1))" topic list 2>/dev/null || true
}

case "${1:-}" in
    up) up "${2:-3}" ;;
    down) down ;;
    status) status ;;
    *) echo "usage: scripts/cluster.sh up [N] | down | status" >&2; exit 2 ;;
esac
