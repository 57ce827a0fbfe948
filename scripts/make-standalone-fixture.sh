#!/usr/bin/env bash
# Writes tests/fixtures/standalone-v1.tar.gz: a data directory as a
# standalone corelogd wrote it before a single node became a one-voter
# cluster (JSON topic catalog in `metadata`, partitions without
# `replica-meta`, every batch stamped leader epoch 0), with a manifest of
# what it holds. tests/tests/upgrade.rs opens it with the current broker
# and checks that every record, offset, producer state and group offset
# survived the migration.
#
# It needs the binaries of a build from before that change (commit 0c5fd8a
# or earlier): corelogd, corelog and the search_projection example.
#
#   OLD_BIN=/path/to/old/release scripts/make-standalone-fixture.sh
#
# What goes in (small, but every kind of state the migration must carry):
# - `orders` (3 partitions) and `orders.dlq`: the search_projection
#   example's demo events, consumed by groups `search` and `analytics`
#   through the group protocol (committed offsets in `__groups`), and one
#   malformed event quarantined with an audit record (`__audit`);
# - `ledger` (1 partition, 1 MiB segments, 512 KiB max.message.bytes):
#   2,600 records of ~450 bytes from an idempotent producer, schema 2, so
#   the log has two segments and producer state to keep;
# - group `replayer`: offsets set by an audited reset, with no members.
#
# Topics keep their records forever (--retention-ms -1): the fixture is
# opened months after it was written, and time retention would otherwise
# delete its closed segments then. The test likewise runs the broker with
# a producer-state retention longer than the fixture's age.
set -euo pipefail
cd "$(dirname "$0")/.."

old=${OLD_BIN:?set OLD_BIN to a directory with the old corelogd, corelog and search_projection}
out=tests/fixtures/standalone-v1.tar.gz
port=${PORT:-17611}
bootstrap="127.0.0.1:$port"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/corelog-fixture.XXXXXX")
data="$work/data"

"$old/corelogd" --data-dir "$data" --shards 2 --listen "$bootstrap" \
    --metrics-listen "127.0.0.1:$((port + 80))" --disk-reserve-bytes 0 --retention-ms -1 \
    2> "$work/broker.log" &
broker=$!
cleanup() {
    kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.1
done

cli() { "$old/corelog" --bootstrap "$bootstrap" "$@"; }

(cd "$work" && "$old/search_projection" --bootstrap "$bootstrap" \
    --demo-events 200 --idle-exit-seconds 3 > "$work/example.out")

cli topic create ledger --partitions 1 \
    --config segment.bytes=1048576 --config max.message.bytes=524288
pad=$(printf 'x%.0s' $(seq 1 400))
for i in $(seq 0 2599); do
    printf 'acct-%d\tledger entry %06d %s\n' $((i % 17)) "$i" "$pad"
done | cli produce --topic ledger --key-separator $'\t' --schema 2

cli group reset-offsets replayer --topic ledger --to-offset 1234 \
    --reason "fixture: replay the ledger from entry 1234"

manifest="$work/manifest.json"
{
    echo '{'
    echo '  "written_by": "'"$("$old/corelogd" --version)"'",'
    echo '  "topics": '"$(cli --json topic describe orders orders.dlq ledger)"','
    echo '  "groups": {'
    echo '    "search": '"$(cli --json group describe search)"','
    echo '    "analytics": '"$(cli --json group describe analytics)"','
    echo '    "replayer": '"$(cli --json group describe replayer)"
    echo '  },'
    echo '  "audit": '"$(cli --json group audit)"','
    echo '  "orders": ['"$(cli --json consume --topic orders | paste -sd, -)"']'
    echo '}'
} > "$manifest"

kill -TERM "$broker"
wait "$broker" || true
broker=

mkdir -p tests/fixtures
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -czf "$out" data manifest.json
ls -l "$out"
