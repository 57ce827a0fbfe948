#!/usr/bin/env bash
# Restarts every broker of the local cluster scripts/cluster.sh started, one
# at a time, through maintenance mode, so that no partition pauses longer
# than one leadership move and nothing acknowledged is lost (issue 38):
#
#   for each broker I:
#     corelog cluster maintenance enable I   its leaderships move to other
#                                            replicas; returns once it leads
#                                            nothing
#     scripts/cluster.sh stop I              SIGTERM: it leads nothing, so
#                                            its controlled shutdown is quick
#     scripts/cluster.sh start I             waits until it is unfenced and
#                                            answers clients
#     corelog cluster health (until healthy) its replicas caught up: every
#                                            partition has all its replicas
#                                            in sync again, so the next stop
#                                            cannot take a majority away
#     corelog cluster maintenance disable I
#   corelog cluster rebalance-leaders        preferred leaders back
#
#   scripts/rolling-restart.sh
#
# Environment: as scripts/cluster.sh (CLUSTER_DIR, BASE_PORT, CORELOG,
# CORELOGD, NO_BUILD); HEALTH_TIMEOUT seconds to wait for a healthy cluster
# after each restart (120); MAINTENANCE=0 skips the maintenance and
# rebalance steps (a plain SIGTERM restart, for brokers without them).
# Exits non-zero, leaving the broker in maintenance, at the first step that
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."

base_port=${BASE_PORT:-7200}
cluster_dir=$(realpath -m "${CLUSTER_DIR:-target/cluster}")
corelog=${CORELOG:-./target/release/corelog}
health_timeout=${HEALTH_TIMEOUT:-120}
maintenance=${MAINTENANCE:-1}
count=$(cat "$cluster_dir/size" 2>/dev/null) \
    || { echo "no cluster in $cluster_dir: start one with scripts/cluster.sh up" >&2; exit 2; }
bootstrap=$(for i in $(seq 1 "$count"); do printf '127.0.0.1:%d,' $((base_port + i)); done)
bootstrap=${bootstrap%,}
cli() { "$corelog" --bootstrap "$bootstrap" "$@"; }

started=$SECONDS
for i in $(seq 1 "$count"); do
    if [ "$maintenance" = 1 ]; then
        echo "broker $i: maintenance on"
        cli cluster maintenance enable "$i"
    fi
    echo "broker $i: restart"
    NO_BUILD=1 scripts/cluster.sh stop "$i"
    NO_BUILD=1 scripts/cluster.sh start "$i"
    deadline=$((SECONDS + health_timeout))
    until cli cluster health >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "broker $i: the cluster is not healthy ${health_timeout} s after its restart;" \
                "it stays in maintenance. What is wrong:" >&2
            cli cluster health >&2 || true
            exit 1
        fi
        sleep 1
    done
    echo "broker $i: healthy again"
    if [ "$maintenance" = 1 ]; then
        cli cluster maintenance disable "$i"
    fi
done
if [ "$maintenance" = 1 ]; then
    # A partition that did not move stays with another replica; the
    # controller gives it back to its preferred leader by itself later.
    cli cluster rebalance-leaders \
        || echo "some partitions stay with another replica for now (see above)"
fi
echo "rolling restart of $count brokers done in $((SECONDS - started)) s"
