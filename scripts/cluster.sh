#!/usr/bin/env bash
# A local N-broker corelog cluster on 127.0.0.1 for development and tests:
#
#   scripts/cluster.sh up [N] [--tls]
#                                  start N brokers (default 3), the first 1, 3
#                                  or 5 of them controller voters, and wait
#                                  until the cluster is ready;
#                                  with --tls, every listener and every
#                                  connection between brokers speaks TLS, with
#                                  certificates scripts/dev-certs.sh makes in
#                                  $CLUSTER_DIR/tls (clients: --tls-ca
#                                  $CLUSTER_DIR/tls/ca.pem); `start` and
#                                  `status` follow what `up` chose
#   scripts/cluster.sh down        stop the brokers this script started
#                                  (SIGTERM, then wait; SIGKILL after 30 s)
#   scripts/cluster.sh status      which brokers run; the controller's view of
#                                  them (`corelog cluster info`, `cluster
#                                  health`); the topics
#   scripts/cluster.sh kill I      SIGKILL broker I (a crash: no shutdown), if
#                                  its pid file still names that broker's
#                                  corelogd; returns once the process is gone
#   scripts/cluster.sh stop I      SIGTERM broker I (a planned stop: it hands its
#                                  leaderships off first), if its pid file
#                                  still names it; returns once it is gone
#   scripts/cluster.sh start I     restart broker I with the flags `up` gives it
#                                  (the cluster size `up` recorded) and wait
#                                  until it is unfenced and answers clients;
#                                  its previous log is kept as node-I/log.1
#
# Broker i (1..N) listens on 127.0.0.1:$((BASE_PORT + i)) with metrics on
# 127.0.0.1:$((BASE_PORT + 100 + i)) and keeps its data and log in
# $CLUSTER_DIR/node-i; racks rack-1..rack-N. No pinning, SHARDS executors per
# broker (default 1). State (pid files) lives in $CLUSTER_DIR.
#
# Ready means: every broker is registered with the controller and unfenced
# (brokers register fenced and are unfenced once a heartbeat shows them
# caught up with the metadata), which also proves that a Raft controller
# leader exists, since only the leader answers heartbeats; and every broker
# answers clients. Then `corelog topic create NAME --partitions P
# --replication-factor 3` works at once. A broker reports its fence in its
# log (cluster/membership.rs: "controller changed this broker's fence").
#
# Environment: BASE_PORT (7200), CLUSTER_DIR (target/cluster), SHARDS (1),
# READY_TIMEOUT seconds (30), CORELOGD and CORELOG (binaries; default the
# release builds, rebuilt by `up` unless NO_BUILD=1), BROKER_ARGS (extra
# corelogd flags for every broker, e.g. "--preallocate-bytes 0").
set -euo pipefail
cd "$(dirname "$0")/.."

base_port=${BASE_PORT:-7200}
cluster_dir=$(realpath -m "${CLUSTER_DIR:-target/cluster}")
shards=${SHARDS:-1}
ready_timeout=${READY_TIMEOUT:-30}
corelogd=${CORELOGD:-./target/release/corelogd}
corelog=${CORELOG:-./target/release/corelog}
read -r -a broker_args <<< "${BROKER_ARGS:-}"
tls_dir="$cluster_dir/tls"
# A cluster `up --tls` started: its brokers speak TLS, and so does every
# corelog this script runs (the CLI reads CORELOG_TLS_CA).
if [ -f "$cluster_dir/tls-on" ]; then
    export CORELOG_TLS_CA="$tls_dir/ca.pem"
fi

# The controller voters of a cluster of $1 brokers: the first 1, 3 or 5
# (the sizes a Raft quorum is meant to have); the others are brokers only.
voters() {
    local count=$1 list="" i
    if [ "$count" -ge 5 ]; then
        count=5
    elif [ "$count" -ge 3 ]; then
        count=3
    else
        count=1
    fi
    for i in $(seq 1 "$count"); do
        list="${list:+$list,}$i@127.0.0.1:$((base_port + i))"
    done
    echo "$list"
}

# Whether pid $1 is the corelogd this script started for node directory $2:
# alive, a corelogd, with that node's data directory. A stale pid file whose
# pid now belongs to another process is never signalled.
ours() {
    local pid=$1 node_dir=$2 args data_dir
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    args=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $(head -n 1 <<< "$args") == *corelogd ]] || return 1
    data_dir=$(grep -A 1 -xF -- --data-dir <<< "$args" | sed -n 2p)
    [ -n "$data_dir" ] || return 1
    # A relative --data-dir is relative to the broker's working directory.
    [[ $data_dir == /* ]] || data_dir="$(readlink "/proc/$pid/cwd")/$data_dir"
    [ "$(realpath -m "$data_dir")" = "$node_dir/data" ]
}

running_pid() {
    local node_dir=$1 pid
    pid=$(cat "$node_dir/pid" 2>/dev/null) || return 1
    ours "$pid" "$node_dir" || return 1
    echo "$pid"
}

# The broker's standing with the controller: "unfenced", "fenced"
# (registered, not yet unfenced, or fenced since) or "unregistered". Read
# from its corelog_broker_fenced metric (node number $2); without curl, or
# while the metrics listener is not up, from its log.
fence_state() {
    local node_dir=$1 i=$2 value last
    if command -v curl >/dev/null 2>&1; then
        value=$(curl -sf --max-time 2 "http://127.0.0.1:$((base_port + 100 + i))/metrics" 2>/dev/null \
            | awk '/^corelog_broker_fenced\{shard="0"\}/ { print $2 }') || true
        case "$value" in
            0) echo unfenced; return ;;
            1) echo fenced; return ;;
        esac
    fi
    last=$(grep -E "registered with the controller|changed this broker's fence" "$node_dir/log" 2>/dev/null \
        | tail -n 1) || true
    case "$last" in
        "") echo unregistered ;;
        *"fence"*"fenced=false"*) echo unfenced ;;
        *) echo fenced ;;
    esac
}

# Waits until every broker in "$@" (node numbers) runs, is unfenced and
# answers clients.
wait_ready() {
    local started=$SECONDS i node_dir state waiting
    while :; do
        waiting=()
        for i in "$@"; do
            node_dir="$cluster_dir/node-$i"
            if ! running_pid "$node_dir" >/dev/null; then
                echo "broker $i exited while starting; the end of $node_dir/log:" >&2
                tail -n 20 "$node_dir/log" >&2 || true
                return 1
            fi
            state=$(fence_state "$node_dir" "$i")
            if [ "$state" != unfenced ]; then
                waiting+=("broker $i $state")
            elif ! "$corelog" --bootstrap "127.0.0.1:$((base_port + i))" topic list \
                >/dev/null 2>&1; then
                waiting+=("broker $i not answering clients")
            fi
        done
        if [ ${#waiting[@]} -eq 0 ]; then
            return 0
        fi
        if [ $((SECONDS - started)) -ge "$ready_timeout" ]; then
            local summary
            summary=$(printf '%s, ' "${waiting[@]}")
            echo "not ready after $ready_timeout s (${summary%, });" \
                "the brokers keep running: see $cluster_dir/node-*/log," \
                "and stop them with scripts/cluster.sh down" >&2
            return 1
        fi
        sleep 0.2
    done
}

# Whether something accepts connections on 127.0.0.1:$1.
port_in_use() {
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Starts broker $1 of a cluster of $2 in the background and records its pid.
# A previous log is kept as log.1. Refuses when its ports are taken: the
# broker would bind them anyway (they are shared with SO_REUSEPORT) and
# half of the connections would reach the other process.
start_node() {
    local i=$1 count=$2 node_dir="$cluster_dir/node-$1" port
    for port in $((base_port + i)) $((base_port + 100 + i)); do
        if port_in_use "$port"; then
            echo "broker $i: 127.0.0.1:$port is already in use (another cluster?);" \
                "choose another BASE_PORT" >&2
            return 1
        fi
    done
    mkdir -p "$node_dir"
    [ ! -f "$node_dir/log" ] || mv -f "$node_dir/log" "$node_dir/log.1"
    # One cluster id for all the cluster's brokers: each refuses a data
    # directory of another cluster (see meta.properties in the README).
    [ -s "$cluster_dir/cluster-id" ] ||
        od -An -tx1 -N16 /dev/urandom | tr -d ' \n' > "$cluster_dir/cluster-id"
    # One secret for all the cluster's brokers: they prove it to each other
    # before speaking Raft and replication (README, Security). Readable by
    # its owner only.
    if [ ! -s "$cluster_dir/cluster.secret" ]; then
        (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$cluster_dir/cluster.secret")
    fi
    local tls_args=()
    if [ -f "$cluster_dir/tls-on" ]; then
        tls_args=(--tls-cert "$tls_dir/broker.pem" --tls-key "$tls_dir/broker.key"
            --tls-client-ca "$tls_dir/ca.pem")
    fi
    "$corelogd" --node-id "$i" --rack "rack-$i" --shards "$shards" \
        --cluster-id "$(cat "$cluster_dir/cluster-id")" \
        --cluster-secret-file "$cluster_dir/cluster.secret" \
        --listen "127.0.0.1:$((base_port + i))" \
        --metrics-listen "127.0.0.1:$((base_port + 100 + i))" \
        --advertised-host 127.0.0.1 \
        --controller-voters "$(voters "$count")" \
        --data-dir "$node_dir/data" \
        --disk-reserve-bytes $((256 << 20)) \
        "${tls_args[@]}" "${broker_args[@]}" \
        > "$node_dir/log" 2>&1 &
    local pid=$!
    echo "$pid" > "$node_dir/pid"
    # The background job is a fork of this shell until it execs corelogd;
    # wait for the exec, so that the pid check (ours) recognises it.
    for _ in $(seq 1 500); do
        ours "$pid" "$node_dir" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
    done
    echo "broker $i: 127.0.0.1:$((base_port + i)), metrics :$((base_port + 100 + i))," \
        "pid $pid, log $node_dir/log"
}

# The node number argument $1 of kill/start, checked against the cluster
# size `up` recorded.
node_arg() {
    local command=$1 i=${2:-} count
    count=$(cat "$cluster_dir/size" 2>/dev/null) \
        || { echo "$command: no cluster in $cluster_dir (run up first)" >&2; exit 1; }
    if ! [[ $i =~ ^[1-9][0-9]*$ ]] || [ "$i" -gt "$count" ]; then
        echo "$command: I must be a broker number from 1 to $count, not ${i:-nothing}" >&2
        exit 2
    fi
    echo "$i"
}

up() {
    local count=3 tls=""
    for arg in "$@"; do
        case "$arg" in
            --tls) tls=1 ;;
            *) count=$arg ;;
        esac
    done
    [[ $count =~ ^[1-9][0-9]*$ ]] || { echo "up: N must be a positive number, not $count" >&2; exit 2; }
    if [ -z "${NO_BUILD:-}" ] && [ -z "${CORELOGD:-}${CORELOG:-}" ]; then
        # The Makefile's one release build (RELEASE_BUILD): another package
        # selection would recompile with another feature set.
        cargo build --release --workspace
    fi
    mkdir -p "$cluster_dir"
    local i pid started=$SECONDS
    if [ -n "$tls" ]; then
        [ -s "$tls_dir/broker.pem" ] || ./scripts/dev-certs.sh "$tls_dir" >/dev/null
        touch "$cluster_dir/tls-on"
        export CORELOG_TLS_CA="$tls_dir/ca.pem"
    elif [ -f "$cluster_dir/tls-on" ]; then
        echo "up: the cluster in $cluster_dir was started with --tls; pass --tls again" \
            "(or remove $cluster_dir for a new plaintext cluster)" >&2
        exit 2
    fi
    echo "$count" > "$cluster_dir/size"
    for i in $(seq 1 "$count"); do
        if pid=$(running_pid "$cluster_dir/node-$i"); then
            echo "broker $i already running (pid $pid)"
            continue
        fi
        start_node "$i" "$count" || return 1
    done
    wait_ready $(seq 1 "$count") || { echo "the cluster is not ready" >&2; return 1; }
    echo "cluster of $count ready in $((SECONDS - started)) s;" \
        "bootstrap 127.0.0.1:$((base_port + 1))${tls:+ with --tls-ca $tls_dir/ca.pem}"
}

# SIGKILL, as a crash: the broker gets no chance to shut down.
# Sends signal $2 (KILL or TERM) to broker $3 for command $1 and returns
# once the process is gone (SIGKILL after 30 s for a TERM it ignores).
# Whether process $1 is gone, or a zombie not yet reaped by whoever
# inherited it. Not merely its main thread: a broker whose main thread
# returned is a zombie while its executor threads still close their
# sockets, and a new broker on its ports must wait for those.
exited() {
    [ -d "/proc/$1" ] || return 0
    [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" = Z ] || return 1
    [ "$(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -le 1 ]
}

signal_node() {
    local command=$1 signal=$2 i node_dir pid
    i=$(node_arg "$command" "${3:-}")
    node_dir="$cluster_dir/node-$i"
    if ! pid=$(running_pid "$node_dir"); then
        echo "$command: broker $i is not running (no pid file naming its corelogd)" >&2
        exit 1
    fi
    kill "-$signal" "$pid"
    for _ in $(seq 1 3000); do
        exited "$pid" && break
        sleep 0.01
    done
    if ! exited "$pid"; then
        echo "broker $i (pid $pid) ignored SIG$signal for 30 s; killing it"
        kill -KILL "$pid"
    fi
    rm -f "$node_dir/pid"
    echo "stopped broker $i (pid $pid) with SIG$signal"
}

start() {
    local i count pid started=$SECONDS
    i=$(node_arg start "${1:-}")
    count=$(cat "$cluster_dir/size")
    if pid=$(running_pid "$cluster_dir/node-$i"); then
        echo "broker $i already running (pid $pid)"
    else
        start_node "$i" "$count" || return 1
    fi
    wait_ready "$i" || { echo "broker $i is not ready" >&2; return 1; }
    echo "broker $i ready in $((SECONDS - started)) s"
}

down() {
    local node_dir pid
    for node_dir in "$cluster_dir"/node-*; do
        [ -f "$node_dir/pid" ] || continue
        if pid=$(running_pid "$node_dir"); then
            kill -TERM "$pid"
            for _ in $(seq 1 150); do exited "$pid" && break; sleep 0.2; done
            if ! exited "$pid"; then
                echo "broker $(basename "$node_dir") (pid $pid) ignored SIGTERM for 30 s; killing it"
                kill -KILL "$pid"
            fi
            echo "stopped broker $(basename "$node_dir") (pid $pid)"
        fi
        rm -f "$node_dir/pid"
    done
}

status() {
    local node_dir pid i
    for node_dir in "$cluster_dir"/node-*; do
        [ -d "$node_dir" ] || continue
        i=${node_dir##*-}
        if pid=$(running_pid "$node_dir"); then
            echo "$(basename "$node_dir"): running (pid $pid)," \
                "127.0.0.1:$((base_port + i)), metrics :$((base_port + 100 + i))"
        else
            echo "$(basename "$node_dir"): stopped"
        fi
    done
    # Fenced or alive is the controller leader's word, not a broker's own
    # (a broker cut off from the controller still thinks itself unfenced).
    for node_dir in "$cluster_dir"/node-*; do
        i=${node_dir##*-}
        running_pid "$node_dir" >/dev/null || continue
        "$corelog" --bootstrap "127.0.0.1:$((base_port + i))" cluster info 2>/dev/null || continue
        "$corelog" --bootstrap "127.0.0.1:$((base_port + i))" cluster health 2>/dev/null || true
        "$corelog" --bootstrap "127.0.0.1:$((base_port + i))" topic list 2>/dev/null || true
        return 0
    done
    return 0
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    status) status ;;
    kill) signal_node kill KILL "${2:-}" ;;
    stop) signal_node stop TERM "${2:-}" ;;
    start) start "${2:-}" ;;
    *) echo "usage: scripts/cluster.sh up [N] [--tls] | down | status | kill I | stop I | start I" >&2; exit 2 ;;
esac
