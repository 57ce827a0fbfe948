#!/usr/bin/env bash
# The simulator's mutation check: plant each of thirteen known bugs (seven in
# replication, one in the shard journal, five in the controller) in a copy of
# the tree and make sure the seeds catch it. A mutant the seeds do not catch means the simulator
# lost its power to find that class of bug.
#
#   scripts/sim-mutations.sh [SEEDS]     (default 2000)
#   ONLY=fig scripts/sim-mutations.sh    (only the mutants whose name has "fig")
#
# Each mutant is one textual change (in its text and replacement, "<NL>"
# stands for a line break, for a change that must name more than one line
# to be unique, and "<BAR>" for "|"), applied to a copy
# under $MUTANT_DIR (default target/mutants/src) and built in its own target
# directory, so the working tree and its build are never touched. Prints one
# line per mutant (caught at which seed and simulated time, or MISSED) and
# exits non-zero if any mutant was missed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seeds=${1:-2000}
work=${MUTANT_DIR:-$root/target/mutants}
copy=$work/src
export CARGO_TARGET_DIR=$work/target

# name | file | exact text | replacement
mutants=(
    "non-majority high watermark|replication/src/replica/leader.rs|let majority = leader.replicas.len() / 2 + 1;|let majority = 1;"
    "follower ignores prev_epoch|replication/src/replica/follower.rs|self.meta.history.epoch_before(start) == prev_epoch|{ let _ = prev_epoch; true }"
    "push accepted below the fence|replication/src/replica/follower.rs|if push.epoch < self.meta.fenced_epoch {|if push.epoch < self.meta.fenced_epoch && false {"
    "fig. 8 marker rule dropped|replication/src/replica/leader.rs|if candidate > leader.epoch_start && candidate > self.high_watermark {|if candidate > self.high_watermark {"
    "journal acknowledges before its fdatasync|broker/storage/src/journal.rs|file.sync_data()<NL>            .await<NL>            .map_err(<BAR>error<BAR> StorageError::io(&path, error))?;<NL><NL>        let mut state = self.state.borrow_mut();|drop(file.sync_data());<NL><NL>        let mut state = self.state.borrow_mut();"
    "a late follower is taken for an unreachable one|replication/src/replica/leader.rs|.is_some_and(<BAR>failed<BAR> failed >= since_ms)|.is_none_or(<BAR>_<BAR> true)"
    "a push still on its way is resent|replication/src/replica/leader.rs|                && progress.outstanding == 0<NL>|"
    "a leadership transfer elects its target even when it lost|broker/src/cluster/election.rs|        Decision::Elect { leader, epoch } => {|        Decision::Elect { leader, epoch } => { let leader = match due.reason { ElectionReason::Transfer { to } => replica_id(to).unwrap_or(leader), _ => leader };"
    "controller applies an uncommitted entry|controller/src/node.rs|let committed = ready.take_committed_entries();|let mut committed = ready.take_committed_entries(); committed.extend(ready.entries().iter().cloned());"
    "a move drops the leaving replicas as its learner joins|controller/src/state.rs|        record.replicas = replicas.to_vec();|        record.replicas = match &record.reassignment { Some(moving) => replicas.iter().copied().filter(<BAR>r<BAR> moving.goal().iter().any(<BAR>g<BAR> g.node == r.node) <BAR><BAR> Some(r.node) == leader).collect(), None => replicas.to_vec() };"
    "a move step does not wait for the leader to commit its epoch|broker/src/cluster/election.rs|            committed: report.epoch_committed,|            committed: true,"
    "a move step asks only the new set, less brokers in maintenance|broker/src/cluster/election.rs|        due.targets = record<NL>|        let _unused: Vec<QueryTarget> = record<NL>"
    "a learner counts toward the high watermark|replication/src/replica/leader.rs|                .iter()<NL>                .filter(<BAR>replica<BAR> end_of(replica) >= *end)|                .iter()<NL>                .chain(leader.learners.iter())<NL>                .filter(<BAR>replica<BAR> end_of(replica) >= *end)"
)

missed=0
previous=
for entry in "${mutants[@]}"; do
    IFS='|' read -r name file text replacement <<<"$entry"
    [[ -z "${ONLY:-}" || "$name" == *"$ONLY"* ]] || continue
    text=${text//'<NL>'/$'\n'} && text=${text//'<BAR>'/'|'}
    replacement=${replacement//'<NL>'/$'\n'} && replacement=${replacement//'<BAR>'/'|'}
    rm -rf "$copy" && mkdir -p "$copy"
    tar -C "$root" --exclude=./target --exclude=./.git -cf - . | tar -C "$copy" -xf -
    # Restored files keep their old mtimes, older than the build of the
    # mutant before: touch this mutant's file and the previous one's, so
    # that cargo rebuilds their crates rather than reuse a mutant. The
    # first mutant of a run touches every mutant's file, as the last run
    # may have left any of them built mutated.
    if [ -z "$previous" ]; then
        for other in "${mutants[@]}"; do
            IFS='|' read -r _ other_file _ <<<"$other"
            touch "$copy/$other_file"
        done
    fi
    touch "$copy/$file" ${previous:+"$copy/$previous"}
    previous=$file
    # Exactly one occurrence, or the mutant silently stopped applying.
    count=$(TEXT=$text perl -0ne 'print scalar(() = /\Q$ENV{TEXT}\E/g)' "$copy/$file")
    if [ "$count" != 1 ]; then
        echo "mutant '$name': expected one '$text' in $file, found $count" >&2
        exit 2
    fi
    TEXT=$text REPLACEMENT=$replacement perl -0pi -e \
        's/\Q$ENV{TEXT}\E/$ENV{REPLACEMENT}/' "$copy/$file"
    if ! (cd "$copy" && cargo test -q -p corelog-sim --release --test sim --no-run 2>&1 | tail -20); then
        echo "mutant '$name' does not build" >&2
        exit 2
    fi
    started=$(date +%s)
    if output=$(cd "$copy" && SIM_SEEDS=$seeds cargo test -q -p corelog-sim --release \
        --test sim -- --exact replay --nocapture 2>&1); then
        echo "MISSED  $name: $seeds seeds passed ($(( $(date +%s) - started )) s)"
        missed=$((missed + 1))
    else
        caught=$(grep -m1 -o 'sim seed [0-9]* failed at [0-9]* ms: .\{0,160\}' <<<"$output" \
            || grep -m1 'error' <<<"$output" || true)
        echo "caught  $name: ${caught:-see output} ($(( $(date +%s) - started )) s)"
    fi
done
exit $(( missed > 0 ))
