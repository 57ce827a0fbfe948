//! The checker: one pass over the history in order (matching outcomes with
//! invocations and following every group's committed offsets), then one
//! pass per check over what it collected.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::history::{ClientId, Event, EventKind, History, ProducerStamp, ValueId};
use super::report::{Check, CheckKind, HistoryProblems, PartitionRecords, Report, Stats};

/// Examples kept per check by [`check`].
pub const DEFAULT_MAX_EXAMPLES: usize = 20;

/// Checks `history` against the log's contracts, keeping up to
/// [`DEFAULT_MAX_EXAMPLES`] examples per check.
#[must_use]
pub fn check(history: &History) -> Report {
    check_with_limit(history, DEFAULT_MAX_EXAMPLES)
}

/// Checks `history`, keeping up to `max_examples` examples per check (the
/// counts are always complete).
#[must_use]
pub fn check_with_limit(history: &History, max_examples: usize) -> Report {
    let mut checker = Checker::new(max_examples);
    for (index, event) in history.events().iter().enumerate() {
        checker.collect(index, event);
    }
    checker.finish()
}

/// A topic partition, borrowed from the history.
type Tp<'h> = (&'h str, u32);

/// Where each value is in the final read: its distinct positions.
type FinalPositions<'h> = BTreeMap<ValueId, BTreeSet<(Tp<'h>, u64)>>;

/// An idempotent producer on a partition: (producer id, epoch, partition).
type ProducerPartition<'h> = (i64, i16, Tp<'h>);

/// An acknowledged record of an idempotent producer: (sequence, offset,
/// value).
type Sequenced = (i32, u64, ValueId);

/// `topic/partition`.
fn tp_name((topic, partition): Tp<'_>) -> String {
    format!("{topic}/{partition}")
}

/// `topic/partition@offset`.
fn place(tp: Tp<'_>, offset: u64) -> String {
    format!("{}@{offset}", tp_name(tp))
}

/// How examples refer to an event: 1-based, so event #n is line n of the
/// history's JSON lines.
fn event_ref(index: usize, event: &Event) -> String {
    format!(
        "event #{} ({}, {} ms)",
        index + 1,
        event.client,
        event.at_ms
    )
}

/// A count with its first examples.
#[derive(Debug)]
struct Findings {
    count: u64,
    examples: Vec<String>,
    limit: usize,
}

impl Findings {
    fn new(limit: usize) -> Findings {
        Findings {
            count: 0,
            examples: Vec::new(),
            limit,
        }
    }

    /// Counts one finding; builds its example only if it will be kept.
    fn add(&mut self, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < self.limit {
            self.examples.push(example());
        }
    }

    /// The check's result: the count when `applicable`, otherwise n/a.
    fn into_check(self, applicable: bool) -> Check {
        if applicable {
            Check {
                violations: Some(self.count),
                examples: self.examples,
            }
        } else {
            Check::not_applicable()
        }
    }
}

/// A produce invocation.
#[derive(Debug)]
struct Invoke<'h> {
    at_ms: u64,
    topic: &'h str,
    partition: Option<u32>,
    producer: Option<ProducerStamp>,
}

/// How a write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Acknowledged at this partition (of the invocation's topic) and offset.
    Ok { partition: u32, offset: u64 },
    /// Definitely not written.
    Fail,
    /// Indeterminate.
    Unknown,
}

/// The first outcome recorded for a write.
#[derive(Debug)]
struct Resolved {
    index: usize,
    at_ms: u64,
    client: ClientId,
    outcome: Outcome,
}

/// An acknowledged write with what the checks need of it.
#[derive(Debug)]
struct Ack<'h> {
    value_id: ValueId,
    tp: Tp<'h>,
    offset: u64,
    invoked_ms: u64,
    acked_ms: u64,
    producer: Option<ProducerStamp>,
    /// Where the acknowledgement is in the history, for examples.
    at: String,
}

/// A read served by a fetch.
#[derive(Debug)]
struct Read<'h> {
    tp: Tp<'h>,
    offset: u64,
    value_id: Option<ValueId>,
    checksum_ok: bool,
    at: String,
}

/// Identifies a commit invocation so its completion can find it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CommitKey<'h> {
    client: ClientId,
    group: &'h str,
    generation: i32,
    tp: Tp<'h>,
    offset: u64,
}

impl<'h> CommitKey<'h> {
    /// The key of a commit event's fields, as recorded by `client`.
    fn of(
        client: ClientId,
        group: &'h str,
        generation: i32,
        topic: &'h str,
        partition: u32,
        offset: u64,
    ) -> CommitKey<'h> {
        CommitKey {
            client,
            group,
            generation,
            tp: (topic, partition),
            offset,
        }
    }
}

/// What was known when a commit was invoked.
#[derive(Debug)]
struct PendingCommit {
    index: usize,
    /// The committed-offset floor then: (offset, event index that set it).
    floor: Option<(u64, usize)>,
    /// The highest generation seen for the group then: (generation, event
    /// index where it was seen).
    generation: Option<(i32, usize)>,
}

/// A group's committed offset on one partition, as far as the history
/// proves it.
#[derive(Debug, Default)]
struct OffsetState {
    /// The committed offset can be no lower than this: the highest
    /// acknowledged commit, or the last reset. (offset, event index.)
    floor: Option<(u64, usize)>,
    /// Event index of the last reset (or manual commit); commits invoked
    /// before it do not raise the floor, since they may have been applied
    /// before the reset.
    last_reset: Option<usize>,
}

/// Who saw a record at a position.
#[derive(Clone, Debug)]
struct Seen {
    value_id: Option<ValueId>,
    by: String,
}

/// Formats an optional value id.
fn value_name(value_id: Option<ValueId>) -> String {
    value_id.map_or_else(|| "a non-workload record".to_owned(), |v| v.to_string())
}

/// State accumulated over the history.
#[derive(Debug)]
struct Checker<'h> {
    limit: usize,
    stats: Stats,
    problems: Findings,
    previous_ms: Option<u64>,

    invokes: HashMap<ValueId, Invoke<'h>>,
    /// Invocation order, for deterministic iteration.
    invoke_order: Vec<ValueId>,
    outcomes: HashMap<ValueId, Resolved>,
    /// Outcome order, for deterministic iteration.
    outcome_order: Vec<ValueId>,
    reads: Vec<Read<'h>>,
    no_quorum: HashMap<Tp<'h>, Vec<(u64, u64)>>,
    final_reads: BTreeMap<Tp<'h>, Vec<(u64, Option<ValueId>)>>,

    generations: HashMap<&'h str, (i32, usize)>,
    offsets: HashMap<(&'h str, Tp<'h>), OffsetState>,
    pending_commits: HashMap<CommitKey<'h>, VecDeque<PendingCommit>>,
    member_commits_ok: u64,
    regressions: Findings,
    stale: Findings,
}

impl<'h> Checker<'h> {
    fn new(limit: usize) -> Checker<'h> {
        Checker {
            limit,
            stats: Stats::default(),
            problems: Findings::new(limit),
            previous_ms: None,
            invokes: HashMap::new(),
            invoke_order: Vec::new(),
            outcomes: HashMap::new(),
            outcome_order: Vec::new(),
            reads: Vec::new(),
            no_quorum: HashMap::new(),
            final_reads: BTreeMap::new(),
            generations: HashMap::new(),
            offsets: HashMap::new(),
            pending_commits: HashMap::new(),
            member_commits_ok: 0,
            regressions: Findings::new(limit),
            stale: Findings::new(limit),
        }
    }

    /// First pass: takes in one event, in history order.
    fn collect(&mut self, index: usize, event: &'h Event) {
        self.stats.events += 1;
        if let Some(previous) = self.previous_ms
            && event.at_ms < previous
        {
            self.problems.add(|| {
                format!(
                    "{} is earlier than the event before it ({previous} ms)",
                    event_ref(index, event)
                )
            });
        }
        self.previous_ms = Some(event.at_ms);

        match &event.kind {
            EventKind::ProduceInvoke {
                value_id,
                topic,
                partition,
                producer,
                ..
            } => match self.invokes.entry(*value_id) {
                Entry::Occupied(_) => self
                    .problems
                    .add(|| format!("{value_id} sent again at {}", event_ref(index, event))),
                Entry::Vacant(vacant) => {
                    vacant.insert(Invoke {
                        at_ms: event.at_ms,
                        topic,
                        partition: *partition,
                        producer: *producer,
                    });
                    self.invoke_order.push(*value_id);
                    self.stats.sent += 1;
                }
            },
            EventKind::ProduceOk {
                value_id,
                partition,
                offset,
            } => self.resolve(
                index,
                event,
                *value_id,
                Outcome::Ok {
                    partition: *partition,
                    offset: *offset,
                },
            ),
            EventKind::ProduceFail { value_id, .. } => {
                self.resolve(index, event, *value_id, Outcome::Fail);
            }
            EventKind::ProduceUnknown { value_id, .. } => {
                self.resolve(index, event, *value_id, Outcome::Unknown);
            }
            EventKind::Read {
                group,
                generation,
                topic,
                partition,
                offset,
                value_id,
                checksum_ok,
                ..
            } => {
                self.stats.reads += 1;
                if let (Some(group), Some(generation)) = (group, generation) {
                    self.observe_generation(group, *generation, index);
                }
                self.reads.push(Read {
                    tp: (topic, *partition),
                    offset: *offset,
                    value_id: *value_id,
                    checksum_ok: *checksum_ok,
                    at: event_ref(index, event),
                });
            }
            EventKind::CommitInvoke {
                group,
                generation,
                topic,
                partition,
                offset,
            } => {
                self.stats.commits_invoked += 1;
                let tp = (topic.as_str(), *partition);
                let pending = PendingCommit {
                    index,
                    floor: self
                        .offsets
                        .get(&(group.as_str(), tp))
                        .and_then(|state| state.floor),
                    generation: self.generations.get(group.as_str()).copied(),
                };
                self.pending_commits
                    .entry(CommitKey {
                        client: event.client,
                        group,
                        generation: *generation,
                        tp,
                        offset: *offset,
                    })
                    .or_default()
                    .push_back(pending);
                self.observe_generation(group, *generation, index);
            }
            EventKind::CommitOk {
                group,
                generation,
                topic,
                partition,
                offset,
            } => {
                self.stats.commits_ok += 1;
                let key =
                    CommitKey::of(event.client, group, *generation, topic, *partition, *offset);
                self.commit_ok(index, event, key);
            }
            EventKind::CommitFail {
                group,
                generation,
                topic,
                partition,
                offset,
                ..
            } => {
                self.stats.commits_failed += 1;
                let key =
                    CommitKey::of(event.client, group, *generation, topic, *partition, *offset);
                if self.take_pending(&key).is_none() {
                    self.problems.add(|| {
                        format!(
                            "commit_fail at {} matches no earlier commit_invoke",
                            event_ref(index, event)
                        )
                    });
                }
            }
            EventKind::GroupReset {
                group,
                topic,
                partition,
                offset,
            } => {
                self.stats.group_resets += 1;
                let state = self
                    .offsets
                    .entry((group.as_str(), (topic.as_str(), *partition)))
                    .or_default();
                state.floor = Some((*offset, index));
                state.last_reset = Some(index);
            }
            EventKind::NoQuorum {
                topic,
                partition,
                from_ms,
                to_ms,
            } => {
                if from_ms > to_ms {
                    self.problems.add(|| {
                        format!(
                            "no-quorum interval at {} ends before it starts",
                            event_ref(index, event)
                        )
                    });
                } else {
                    self.stats.no_quorum_intervals += 1;
                    self.no_quorum
                        .entry((topic, *partition))
                        .or_default()
                        .push((*from_ms, *to_ms));
                }
            }
            EventKind::FinalRead {
                topic,
                partition,
                records,
            } => self
                .final_reads
                .entry((topic, *partition))
                .or_default()
                .extend_from_slice(records),
        }
    }

    /// Records the first outcome of a write.
    fn resolve(&mut self, index: usize, event: &Event, value_id: ValueId, outcome: Outcome) {
        let Some(invoke) = self.invokes.get(&value_id) else {
            self.problems.add(|| {
                format!(
                    "outcome of {value_id} at {} has no earlier produce_invoke",
                    event_ref(index, event)
                )
            });
            return;
        };
        if let Outcome::Ok { partition, .. } = outcome
            && let Some(sent_to) = invoke.partition
            && sent_to != partition
        {
            let topic = invoke.topic;
            self.problems.add(|| {
                format!(
                    "{value_id} was sent to {} but acknowledged on {} at {}",
                    tp_name((topic, sent_to)),
                    tp_name((topic, partition)),
                    event_ref(index, event)
                )
            });
        }
        match self.outcomes.entry(value_id) {
            Entry::Occupied(first) => {
                let first = first.get().index;
                self.problems.add(|| {
                    format!(
                        "second outcome of {value_id} at {} (the first, at event #{}, counts)",
                        event_ref(index, event),
                        first + 1
                    )
                });
            }
            Entry::Vacant(vacant) => {
                vacant.insert(Resolved {
                    index,
                    at_ms: event.at_ms,
                    client: event.client,
                    outcome,
                });
                self.outcome_order.push(value_id);
            }
        }
    }

    /// A member of `group` was in `generation` at event `index`.
    fn observe_generation(&mut self, group: &'h str, generation: i32, index: usize) {
        if generation < 0 {
            return;
        }
        let seen = self.generations.entry(group).or_insert((generation, index));
        if generation > seen.0 {
            *seen = (generation, index);
        }
    }

    fn take_pending(&mut self, key: &CommitKey<'h>) -> Option<PendingCommit> {
        let queue = self.pending_commits.get_mut(key)?;
        let pending = queue.pop_front();
        if queue.is_empty() {
            self.pending_commits.remove(key);
        }
        pending
    }

    /// An accepted commit: checks it against what was known when it was
    /// invoked, then raises the group's floor.
    fn commit_ok(&mut self, index: usize, event: &Event, key: CommitKey<'h>) {
        let current_floor = self
            .offsets
            .get(&(key.group, key.tp))
            .and_then(|state| state.floor);
        let current_generation = self.generations.get(key.group).copied();
        let pending = match self.take_pending(&key) {
            Some(pending) => pending,
            None => {
                self.problems.add(|| {
                    format!(
                        "commit_ok at {} matches no earlier commit_invoke; checked as if invoked there",
                        event_ref(index, event)
                    )
                });
                PendingCommit {
                    index,
                    floor: current_floor,
                    generation: current_generation,
                }
            }
        };
        let CommitKey {
            group,
            generation,
            tp,
            offset,
            ..
        } = key;
        let state = self.offsets.entry((group, tp)).or_default();

        if generation < 0 {
            // Manual offsets of a memberless group: set by an operator,
            // like a reset.
            state.floor = Some((offset, index));
            state.last_reset = Some(index);
            return;
        }

        self.member_commits_ok += 1;
        if let Some((seen, seen_at)) = pending.generation
            && seen > generation
        {
            self.stale.add(|| {
                format!(
                    "group {group:?}: commit of {} in generation {generation} accepted at {}, \
                     but generation {seen} was seen at event #{} before it was invoked",
                    place(tp, offset),
                    event_ref(index, event),
                    seen_at + 1
                )
            });
        }
        let applied_after_reset = state.last_reset.is_none_or(|reset| pending.index > reset);
        if let Some((floor, floor_at)) = pending.floor
            && offset < floor
        {
            if applied_after_reset {
                // The committed offset is now this one: later commits are
                // measured against it, not against the lost floor.
                state.floor = Some((offset, index));
            }
            self.regressions.add(|| {
                format!(
                    "group {group:?}: committed offset of {} went from {floor} (event #{}) \
                     back to {offset} at {}",
                    tp_name(tp),
                    floor_at + 1,
                    event_ref(index, event)
                )
            });
        }
        if applied_after_reset && state.floor.is_none_or(|(floor, _)| offset > floor) {
            state.floor = Some((offset, index));
        }
        self.observe_generation(group, generation, index);
    }

    /// Second pass: runs the checks over what was collected.
    fn finish(mut self) -> Report {
        let limit = self.limit;
        let acks = self.acks();
        self.count_outcomes();

        let has_final = !self.final_reads.is_empty();
        let has_reads = !self.reads.is_empty() || has_final;

        // Where each value is in the final read (distinct positions).
        let mut final_positions: FinalPositions<'h> = BTreeMap::new();
        let mut final_order = Findings::new(limit);
        for (&tp, records) in &self.final_reads {
            self.stats.final_read.push(PartitionRecords {
                topic: tp.0.to_owned(),
                partition: tp.1,
                records: u64::try_from(records.len()).unwrap_or(u64::MAX),
            });
            for pair in records.windows(2) {
                if let [(before, _), (after, _)] = pair
                    && after <= before
                {
                    final_order.add(|| {
                        format!(
                            "{}: offset {after} follows offset {before} in the final read",
                            tp_name(tp)
                        )
                    });
                }
            }
            for &(offset, value_id) in records {
                if let Some(value_id) = value_id {
                    final_positions
                        .entry(value_id)
                        .or_default()
                        .insert((tp, offset));
                }
            }
        }
        if has_final {
            self.uncovered_partitions(&acks);
        }

        let mut lost = Findings::new(limit);
        let mut moved = Findings::new(limit);
        if has_final {
            for ack in acks
                .iter()
                .filter(|ack| self.final_reads.contains_key(&ack.tp))
            {
                match final_positions.get(&ack.value_id) {
                    None => lost.add(|| {
                        format!(
                            "{} acknowledged at {} ({}) is not in the final read",
                            ack.value_id,
                            place(ack.tp, ack.offset),
                            ack.at
                        )
                    }),
                    Some(positions) if !positions.contains(&(ack.tp, ack.offset)) => {
                        moved.add(|| {
                            let found: Vec<String> = positions
                                .iter()
                                .map(|&(tp, offset)| place(tp, offset))
                                .collect();
                            format!(
                                "{} acknowledged at {} ({}) is in the final read at {}",
                                ack.value_id,
                                place(ack.tp, ack.offset),
                                ack.at,
                                found.join(", ")
                            )
                        });
                    }
                    Some(_) => {}
                }
            }
        }

        let (phantom, failed_visible, read_then_lost) =
            self.read_integrity(&final_positions, has_final);
        let duplicates = self.duplicates(&final_positions);
        let (producer_order, has_idempotent_acks) = self.producer_order(&acks);
        let divergent = self.divergent_reads();
        let mut corrupt = Findings::new(limit);
        for read in self.reads.iter().filter(|read| !read.checksum_ok) {
            corrupt.add(|| {
                format!(
                    "{} at {} fails its checksum ({})",
                    value_name(read.value_id),
                    place(read.tp, read.offset),
                    read.at
                )
            });
        }
        let no_quorum = self.acks_without_quorum(&acks);

        let has_member_commits = self.member_commits_ok > 0;
        let has_no_quorum = !self.no_quorum.is_empty();
        let has_plain_reads = !self.reads.is_empty();
        let checks: BTreeMap<CheckKind, Check> = [
            (CheckKind::AcknowledgedLost, lost.into_check(has_final)),
            (
                CheckKind::AcknowledgedOffsetChanged,
                moved.into_check(has_final),
            ),
            (
                CheckKind::ReadThenLost,
                read_then_lost.into_check(has_final && has_plain_reads),
            ),
            (CheckKind::PhantomRead, phantom.into_check(has_reads)),
            (
                CheckKind::FailedWriteVisible,
                failed_visible.into_check(has_reads),
            ),
            (CheckKind::Duplicate, duplicates.into_check(has_final)),
            (
                CheckKind::ProducerOrder,
                producer_order.into_check(has_idempotent_acks),
            ),
            (CheckKind::FinalReadOrder, final_order.into_check(has_final)),
            (CheckKind::DivergentRead, divergent.into_check(has_reads)),
            (
                CheckKind::CommitRegression,
                self.regressions.into_check(has_member_commits),
            ),
            (
                CheckKind::StaleGenerationCommit,
                self.stale.into_check(has_member_commits),
            ),
            (CheckKind::CorruptRead, corrupt.into_check(has_plain_reads)),
            (
                CheckKind::AckWithoutQuorum,
                no_quorum.into_check(has_no_quorum),
            ),
        ]
        .into_iter()
        .collect();

        Report {
            checks,
            history_problems: HistoryProblems {
                count: self.problems.count,
                examples: self.problems.examples,
            },
            stats: self.stats,
        }
    }

    /// Acknowledged writes whose invocation is known, in acknowledgement
    /// order.
    fn acks(&self) -> Vec<Ack<'h>> {
        self.outcome_order
            .iter()
            .filter_map(|value_id| {
                let resolved = self.outcomes.get(value_id)?;
                let invoke = self.invokes.get(value_id)?;
                let Outcome::Ok { partition, offset } = resolved.outcome else {
                    return None;
                };
                Some(Ack {
                    value_id: *value_id,
                    tp: (invoke.topic, partition),
                    offset,
                    invoked_ms: invoke.at_ms,
                    acked_ms: resolved.at_ms,
                    producer: invoke.producer,
                    at: format!(
                        "event #{} ({}, {} ms)",
                        resolved.index + 1,
                        resolved.client,
                        resolved.at_ms
                    ),
                })
            })
            .collect()
    }

    /// Fills the outcome counts of the stats.
    fn count_outcomes(&mut self) {
        for resolved in self.outcomes.values() {
            match resolved.outcome {
                Outcome::Ok { .. } => self.stats.acknowledged += 1,
                Outcome::Fail => self.stats.failed += 1,
                Outcome::Unknown => self.stats.unknown += 1,
            }
        }
        self.stats.unresolved = self
            .invoke_order
            .iter()
            .filter(|value_id| !self.outcomes.contains_key(value_id))
            .count()
            .try_into()
            .unwrap_or(u64::MAX);
    }

    /// The outcome of a write that was invoked: `None` if unresolved.
    fn outcome(&self, value_id: ValueId) -> Option<Outcome> {
        self.outcomes
            .get(&value_id)
            .map(|resolved| resolved.outcome)
    }

    /// Reports, once each, partitions with acknowledged or read records
    /// that the final read does not cover: nothing can be proved there.
    fn uncovered_partitions(&mut self, acks: &[Ack<'h>]) {
        let mut reported = BTreeSet::new();
        let used = acks
            .iter()
            .map(|ack| ack.tp)
            .chain(self.reads.iter().map(|read| read.tp));
        for tp in used {
            if !self.final_reads.contains_key(&tp) && reported.insert(tp) {
                self.problems.add(|| {
                    format!(
                        "{} has acknowledged or read records but no final read; \
                         its records are not checked for loss",
                        tp_name(tp)
                    )
                });
            }
        }
    }

    /// Phantom reads, reads of failed writes, and unacknowledged records
    /// that were read and then lost; counts unknown writes in the log.
    fn read_integrity(
        &mut self,
        final_positions: &FinalPositions<'h>,
        has_final: bool,
    ) -> (Findings, Findings, Findings) {
        let mut phantom = Findings::new(self.limit);
        let mut failed_visible = Findings::new(self.limit);
        let mut read_then_lost = Findings::new(self.limit);
        let mut phantom_values = HashSet::new();
        let mut phantom_places = HashSet::new();
        let mut failed_values = HashSet::new();
        let mut lost_values = HashSet::new();
        let mut unknown_in_log = HashSet::new();

        let final_reads = self.final_reads.iter().flat_map(|(&tp, records)| {
            records
                .iter()
                .map(move |&(offset, value_id)| (tp, offset, value_id, "the final read"))
        });
        let reads = self
            .reads
            .iter()
            .map(|read| (read.tp, read.offset, read.value_id, read.at.as_str()));
        for (tp, offset, value_id, by) in reads.chain(final_reads) {
            let Some(value_id) = value_id else {
                if phantom_places.insert((tp, offset)) {
                    phantom
                        .add(|| format!("{} is not a workload record ({by})", place(tp, offset)));
                }
                continue;
            };
            if !self.invokes.contains_key(&value_id) {
                if phantom_values.insert(value_id) {
                    phantom.add(|| {
                        format!(
                            "{value_id} read at {} ({by}) was never sent",
                            place(tp, offset)
                        )
                    });
                }
                continue;
            }
            match self.outcome(value_id) {
                Some(Outcome::Fail) => {
                    if failed_values.insert(value_id) {
                        failed_visible.add(|| {
                            format!(
                                "{value_id} read at {} ({by}) had failed to write",
                                place(tp, offset)
                            )
                        });
                    }
                }
                Some(Outcome::Unknown) | None => {
                    unknown_in_log.insert(value_id);
                }
                Some(Outcome::Ok { .. }) => {}
            }
        }

        if has_final {
            for read in &self.reads {
                let Some(value_id) = read.value_id else {
                    continue;
                };
                let unacknowledged = self.invokes.contains_key(&value_id)
                    && matches!(self.outcome(value_id), Some(Outcome::Unknown) | None);
                if unacknowledged
                    && self.final_reads.contains_key(&read.tp)
                    && !final_positions.contains_key(&value_id)
                    && lost_values.insert(value_id)
                {
                    read_then_lost.add(|| {
                        format!(
                            "{value_id} (write outcome unknown) read at {} ({}) is not in the final read",
                            place(read.tp, read.offset),
                            read.at
                        )
                    });
                }
            }
        }

        self.stats.unknown_in_log = unknown_in_log.len().try_into().unwrap_or(u64::MAX);
        (phantom, failed_visible, read_then_lost)
    }

    /// Values of idempotent producers at more than one offset of the final
    /// read; counts the allowed duplicates of other producers.
    fn duplicates(&mut self, final_positions: &FinalPositions<'h>) -> Findings {
        let mut duplicates = Findings::new(self.limit);
        for (value_id, positions) in final_positions {
            if positions.len() < 2 {
                continue;
            }
            match self.invokes.get(value_id) {
                Some(Invoke {
                    producer: Some(_), ..
                }) => duplicates.add(|| {
                    let found: Vec<String> = positions
                        .iter()
                        .map(|&(tp, offset)| place(tp, offset))
                        .collect();
                    format!(
                        "{value_id} (idempotent producer) is in the final read {} times: {}",
                        positions.len(),
                        found.join(", ")
                    )
                }),
                Some(Invoke { producer: None, .. }) => {
                    self.stats.duplicates_without_idempotence += 1;
                }
                // Never sent: a phantom read already.
                None => {}
            }
        }
        duplicates
    }

    /// Acknowledged offsets must grow with the sequence within a producer
    /// id, epoch and partition. Also says whether there was anything to
    /// check.
    fn producer_order(&mut self, acks: &[Ack<'h>]) -> (Findings, bool) {
        let mut by_producer: BTreeMap<ProducerPartition<'h>, Vec<Sequenced>> = BTreeMap::new();
        for ack in acks {
            if let Some(stamp) = ack.producer {
                by_producer
                    .entry((stamp.producer_id, stamp.epoch, ack.tp))
                    .or_default()
                    .push((stamp.sequence, ack.offset, ack.value_id));
            }
        }
        let mut order = Findings::new(self.limit);
        for (&(producer_id, epoch, tp), records) in &mut by_producer {
            records.sort_unstable();
            for pair in records.windows(2) {
                let [(seq_a, offset_a, value_a), (seq_b, offset_b, value_b)] = *pair else {
                    continue;
                };
                if seq_a == seq_b {
                    self.problems.add(|| {
                        format!(
                            "producer {producer_id} epoch {epoch} on {}: {value_a} and {value_b} \
                             were both acknowledged with sequence {seq_a}",
                            tp_name(tp)
                        )
                    });
                } else if offset_b <= offset_a {
                    order.add(|| {
                        format!(
                            "producer {producer_id} epoch {epoch} on {}: sequence {seq_b} ({value_b}) \
                             acknowledged at offset {offset_b}, not after sequence {seq_a} \
                             ({value_a}) at offset {offset_a}",
                            tp_name(tp)
                        )
                    });
                }
            }
        }
        (order, !by_producer.is_empty())
    }

    /// Positions read with different records, by reads or the final read.
    fn divergent_reads(&self) -> Findings {
        let mut divergent = Findings::new(self.limit);
        let mut first: HashMap<(Tp<'h>, u64), Seen> = HashMap::new();
        let mut flagged = HashSet::new();
        let final_reads = self.final_reads.iter().flat_map(|(&tp, records)| {
            records
                .iter()
                .map(move |&(offset, value_id)| (tp, offset, value_id, "the final read".to_owned()))
        });
        let reads = self
            .reads
            .iter()
            .map(|read| (read.tp, read.offset, read.value_id, read.at.clone()));
        for (tp, offset, value_id, by) in reads.chain(final_reads) {
            match first.entry((tp, offset)) {
                Entry::Vacant(vacant) => {
                    vacant.insert(Seen { value_id, by });
                }
                Entry::Occupied(seen) => {
                    let seen = seen.get();
                    if seen.value_id != value_id && flagged.insert((tp, offset)) {
                        divergent.add(|| {
                            format!(
                                "{} read as {} ({}) and as {} ({by})",
                                place(tp, offset),
                                value_name(seen.value_id),
                                seen.by,
                                value_name(value_id)
                            )
                        });
                    }
                }
            }
        }
        divergent
    }

    /// Acknowledgements whose whole send fell inside a no-quorum interval
    /// of their partition.
    fn acks_without_quorum(&mut self, acks: &[Ack<'h>]) -> Findings {
        let mut violations = Findings::new(self.limit);
        for ack in acks {
            let Some(intervals) = self.no_quorum.get(&ack.tp) else {
                continue;
            };
            let inside = intervals
                .iter()
                .find(|&&(from, to)| from <= ack.invoked_ms && ack.acked_ms <= to);
            if let Some(&(from, to)) = inside {
                violations.add(|| {
                    format!(
                        "{} sent at {} ms and acknowledged at {} ({}) while {} had no quorum \
                         ({from}..={to} ms)",
                        ack.value_id,
                        ack.invoked_ms,
                        place(ack.tp, ack.offset),
                        ack.at,
                        tp_name(ack.tp)
                    )
                });
            } else if intervals
                .iter()
                .any(|&(from, to)| from <= ack.acked_ms && ack.acked_ms <= to)
            {
                self.stats.acks_straddling_no_quorum += 1;
            }
        }
        violations
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::verify::history::Key;

    const TOPIC: &str = "t";
    const GROUP: &str = "g";
    const PRODUCER_A: i64 = 1;
    /// The clean final read of partition 0 and 1 for [`workload`].
    const P0: &[(u64, Option<u64>)] = &[(0, Some(1)), (1, Some(2)), (2, Some(5))];
    const P1: &[(u64, Option<u64>)] = &[(0, Some(3)), (1, Some(4))];

    /// Builds histories with a clock that moves 10 ms per event.
    struct H {
        history: History,
        now: u64,
    }

    impl H {
        fn new() -> H {
            H {
                history: History::new(),
                now: 0,
            }
        }

        fn ev(&mut self, client: u32, kind: EventKind) -> &mut H {
            self.now += 10;
            self.history.record(self.now, ClientId(client), kind);
            self
        }

        fn invoke(&mut self, v: u64, partition: u32, producer: Option<(i64, i32)>) -> &mut H {
            self.ev(
                1,
                EventKind::ProduceInvoke {
                    value_id: ValueId(v),
                    key: Some(Key::Int(v % 3)),
                    topic: TOPIC.into(),
                    partition: Some(partition),
                    producer: producer.map(|(producer_id, sequence)| ProducerStamp {
                        producer_id,
                        epoch: 0,
                        sequence,
                    }),
                },
            )
        }

        fn ok(&mut self, v: u64, partition: u32, offset: u64) -> &mut H {
            self.ev(
                1,
                EventKind::ProduceOk {
                    value_id: ValueId(v),
                    partition,
                    offset,
                },
            )
        }

        fn fail(&mut self, v: u64) -> &mut H {
            self.ev(
                1,
                EventKind::ProduceFail {
                    value_id: ValueId(v),
                    error: "refused".into(),
                },
            )
        }

        fn unknown(&mut self, v: u64) -> &mut H {
            self.ev(
                1,
                EventKind::ProduceUnknown {
                    value_id: ValueId(v),
                    error: "timed out".into(),
                },
            )
        }

        fn read_as(
            &mut self,
            client: u32,
            generation: i32,
            partition: u32,
            offset: u64,
            v: Option<u64>,
            checksum_ok: bool,
        ) -> &mut H {
            self.ev(
                client,
                EventKind::Read {
                    group: Some(GROUP.into()),
                    generation: Some(generation),
                    topic: TOPIC.into(),
                    partition,
                    offset,
                    value_id: v.map(ValueId),
                    key: v.map(|v| Key::Int(v % 3)),
                    checksum_ok,
                },
            )
        }

        fn read(&mut self, partition: u32, offset: u64, v: Option<u64>) -> &mut H {
            self.read_as(3, 1, partition, offset, v, true)
        }

        fn commit_invoke(
            &mut self,
            client: u32,
            generation: i32,
            partition: u32,
            offset: u64,
        ) -> &mut H {
            self.ev(
                client,
                EventKind::CommitInvoke {
                    group: GROUP.into(),
                    generation,
                    topic: TOPIC.into(),
                    partition,
                    offset,
                },
            )
        }

        fn commit_ok(
            &mut self,
            client: u32,
            generation: i32,
            partition: u32,
            offset: u64,
        ) -> &mut H {
            self.ev(
                client,
                EventKind::CommitOk {
                    group: GROUP.into(),
                    generation,
                    topic: TOPIC.into(),
                    partition,
                    offset,
                },
            )
        }

        fn commit(&mut self, client: u32, generation: i32, partition: u32, offset: u64) -> &mut H {
            self.commit_invoke(client, generation, partition, offset)
                .commit_ok(client, generation, partition, offset)
        }

        fn commit_fail(
            &mut self,
            client: u32,
            generation: i32,
            partition: u32,
            offset: u64,
        ) -> &mut H {
            self.ev(
                client,
                EventKind::CommitFail {
                    group: GROUP.into(),
                    generation,
                    topic: TOPIC.into(),
                    partition,
                    offset,
                    error: "ILLEGAL_GENERATION".into(),
                },
            )
        }

        fn reset(&mut self, partition: u32, offset: u64) -> &mut H {
            self.ev(
                8,
                EventKind::GroupReset {
                    group: GROUP.into(),
                    topic: TOPIC.into(),
                    partition,
                    offset,
                },
            )
        }

        fn no_quorum(&mut self, partition: u32, from_ms: u64, to_ms: u64) -> &mut H {
            self.ev(
                0,
                EventKind::NoQuorum {
                    topic: TOPIC.into(),
                    partition,
                    from_ms,
                    to_ms,
                },
            )
        }

        fn final_read(&mut self, partition: u32, records: &[(u64, Option<u64>)]) -> &mut H {
            self.ev(
                9,
                EventKind::FinalRead {
                    topic: TOPIC.into(),
                    partition,
                    records: records
                        .iter()
                        .map(|&(offset, v)| (offset, v.map(ValueId)))
                        .collect(),
                },
            )
        }

        /// The no-quorum data and final reads of a clean run, with the
        /// given final reads.
        fn finish_with(&mut self, p0: &[(u64, Option<u64>)], p1: &[(u64, Option<u64>)]) -> History {
            // A quiet period on partition 1 well after every ack.
            let from = self.now + 1_000;
            self.no_quorum(1, from, from + 500)
                .final_read(0, p0)
                .final_read(1, p1);
            self.history.clone()
        }

        fn finish(&mut self) -> History {
            self.finish_with(P0, P1)
        }
    }

    /// A clean workload: an idempotent producer writes values 1, 2 (p0)
    /// and 3 (p1), a plain producer writes 4 (p1); 5 is indeterminate and
    /// landed at p0@2, 6 indeterminate and never landed, 7 failed. A group
    /// member reads everything and commits.
    fn workload() -> H {
        let mut h = H::new();
        h.invoke(1, 0, Some((PRODUCER_A, 0)))
            .invoke(2, 0, Some((PRODUCER_A, 1)))
            .ok(1, 0, 0)
            .invoke(3, 1, Some((PRODUCER_A, 0)))
            .ok(2, 0, 1)
            .ok(3, 1, 0)
            .invoke(4, 1, None)
            .ok(4, 1, 1)
            .invoke(5, 0, Some((PRODUCER_A, 2)))
            .unknown(5)
            .invoke(6, 1, Some((PRODUCER_A, 1)))
            .unknown(6)
            .invoke(7, 1, None)
            .fail(7)
            .read(0, 0, Some(1))
            .read(0, 1, Some(2))
            .read(0, 2, Some(5))
            .read(1, 0, Some(3))
            .commit(3, 1, 0, 3)
            .commit(3, 1, 1, 1);
        h
    }

    /// Asserts that `report` flags only `kind`, `count` times, that the
    /// history is fine, and that the first example mentions `needle`.
    #[track_caller]
    fn assert_only(report: &Report, kind: CheckKind, count: u64, needle: &str) {
        for other in CheckKind::ALL {
            let expected = if other == kind { count } else { 0 };
            assert_eq!(
                report.check(other).violations,
                Some(expected),
                "{other:?} in\n{report}"
            );
        }
        assert_eq!(report.history_problems.count, 0, "{report}");
        assert_eq!(report.violations(), count);
        let examples = &report.check(kind).examples;
        assert_eq!(
            examples.len(),
            usize::try_from(count).unwrap(),
            "{examples:?}"
        );
        assert!(examples[0].contains(needle), "{examples:?}");
    }

    #[track_caller]
    fn assert_clean(report: &Report) {
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.violations(), 0);
    }

    #[test]
    fn a_clean_history_has_no_violation_and_every_check_applies() {
        let report = check(&workload().finish());
        assert_clean(&report);
        for kind in CheckKind::ALL {
            assert_eq!(report.check(kind).violations, Some(0), "{kind:?}");
        }
        let stats = &report.stats;
        assert_eq!(stats.events, 25);
        assert_eq!(
            (stats.sent, stats.acknowledged, stats.failed, stats.unknown),
            (7, 4, 1, 2)
        );
        assert_eq!((stats.unresolved, stats.unknown_in_log), (0, 1));
        assert_eq!(stats.reads, 4);
        assert_eq!(
            (
                stats.commits_invoked,
                stats.commits_ok,
                stats.commits_failed
            ),
            (2, 2, 0)
        );
        assert_eq!(stats.no_quorum_intervals, 1);
        assert_eq!(
            stats.final_read,
            vec![
                PartitionRecords {
                    topic: TOPIC.into(),
                    partition: 0,
                    records: 3
                },
                PartitionRecords {
                    topic: TOPIC.into(),
                    partition: 1,
                    records: 2
                },
            ]
        );
        let text = report.to_string();
        assert!(text.ends_with("verdict: clean"), "{text}");
        assert!(!text.contains("n/a"), "{text}");
    }

    #[test]
    fn an_empty_history_is_clean_and_checks_nothing() {
        let report = check(&History::new());
        assert_clean(&report);
        for kind in CheckKind::ALL {
            assert_eq!(report.check(kind).violations, None, "{kind:?}");
        }
    }

    #[test]
    fn checks_without_evidence_are_not_applicable() {
        // Produces only: no reads, no final read, no commits, no quorum data.
        let mut h = H::new();
        h.invoke(1, 0, Some((PRODUCER_A, 0))).ok(1, 0, 0);
        let report = check(&h.history);
        assert_clean(&report);
        for kind in CheckKind::ALL {
            let expected = (kind == CheckKind::ProducerOrder).then_some(0);
            assert_eq!(report.check(kind).violations, expected, "{kind:?}");
        }
        let text = report.to_string();
        let na = text.lines().filter(|line| line.ends_with("n/a")).count();
        assert_eq!(na, CheckKind::ALL.len() - 1, "{text}");
        assert!(text.contains("final read: none"), "{text}");
    }

    #[test]
    fn a_lost_acknowledged_record_is_found() {
        let history = workload().finish_with(&[(0, Some(1)), (2, Some(5))], P1);
        assert_only(
            &check(&history),
            CheckKind::AcknowledgedLost,
            1,
            "value 2 acknowledged at t/0@1",
        );
    }

    #[test]
    fn an_acknowledged_record_at_another_offset_is_found() {
        let history = workload().finish_with(&[(0, Some(1)), (2, Some(5)), (3, Some(2))], P1);
        assert_only(
            &check(&history),
            CheckKind::AcknowledgedOffsetChanged,
            1,
            "value 2 acknowledged at t/0@1 (event #5",
        );
        let report = check(&history);
        assert!(
            report.check(CheckKind::AcknowledgedOffsetChanged).examples[0]
                .ends_with("is in the final read at t/0@3")
        );
    }

    #[test]
    fn an_unacknowledged_record_read_then_lost_is_found() {
        // 5's write was indeterminate, but a reader was served it at p0@2.
        let history = workload().finish_with(&[(0, Some(1)), (1, Some(2))], P1);
        let report = check(&history);
        assert_only(
            &report,
            CheckKind::ReadThenLost,
            1,
            "value 5 (write outcome unknown)",
        );
        assert_eq!(report.stats.unknown_in_log, 1);
    }

    #[test]
    fn a_record_never_sent_is_a_phantom() {
        let mut h = workload();
        h.read(1, 2, Some(99));
        let history = h.finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, Some(99))]);
        assert_only(
            &check(&history),
            CheckKind::PhantomRead,
            1,
            "value 99 read at t/1@2",
        );
    }

    #[test]
    fn a_non_workload_record_is_a_phantom_once_per_position() {
        let mut h = workload();
        h.read(1, 2, None).read(1, 2, None);
        let history = h.finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, None)]);
        assert_only(
            &check(&history),
            CheckKind::PhantomRead,
            1,
            "t/1@2 is not a workload record",
        );
    }

    #[test]
    fn a_failed_write_that_is_visible_is_found() {
        let mut h = workload();
        h.read(1, 2, Some(7));
        let history = h.finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, Some(7))]);
        assert_only(
            &check(&history),
            CheckKind::FailedWriteVisible,
            1,
            "value 7 read at t/1@2",
        );
    }

    #[test]
    fn a_duplicate_of_an_idempotent_producer_is_found() {
        let history = workload().finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, Some(3))]);
        assert_only(
            &check(&history),
            CheckKind::Duplicate,
            1,
            "value 3 (idempotent producer) is in the final read 2 times: t/1@0, t/1@2",
        );
    }

    #[test]
    fn duplicates_without_idempotence_are_allowed_and_counted() {
        let history = workload().finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, Some(4))]);
        let report = check(&history);
        assert_clean(&report);
        assert_eq!(report.stats.duplicates_without_idempotence, 1);
    }

    #[test]
    fn acknowledged_offsets_against_the_sequence_are_found() {
        // Producer B's sequence 1 is acknowledged before its sequence 0.
        let mut h = workload();
        h.invoke(8, 1, Some((2, 0)))
            .invoke(9, 1, Some((2, 1)))
            .ok(9, 1, 2)
            .ok(8, 1, 3);
        let history = h.finish_with(
            P0,
            &[(0, Some(3)), (1, Some(4)), (2, Some(9)), (3, Some(8))],
        );
        assert_only(
            &check(&history),
            CheckKind::ProducerOrder,
            1,
            "producer 2 epoch 0 on t/1: sequence 1 (value 9) acknowledged at offset 2",
        );
    }

    #[test]
    fn a_new_epoch_starts_a_new_sequence_space() {
        let mut h = workload();
        h.invoke(8, 1, Some((2, 5))).ok(8, 1, 2);
        h.ev(
            1,
            EventKind::ProduceInvoke {
                value_id: ValueId(9),
                key: None,
                topic: TOPIC.into(),
                partition: Some(1),
                producer: Some(ProducerStamp {
                    producer_id: 2,
                    epoch: 1,
                    sequence: 0,
                }),
            },
        )
        .ok(9, 1, 3);
        let history = h.finish_with(
            P0,
            &[(0, Some(3)), (1, Some(4)), (2, Some(8)), (3, Some(9))],
        );
        assert_clean(&check(&history));
    }

    #[test]
    fn a_final_read_going_backwards_is_found() {
        let history = workload().finish_with(P0, &[(1, Some(4)), (0, Some(3))]);
        assert_only(
            &check(&history),
            CheckKind::FinalReadOrder,
            1,
            "t/1: offset 0 follows offset 1",
        );
    }

    #[test]
    fn a_final_read_in_chunks_is_concatenated() {
        let mut h = workload();
        h.final_read(0, &[(0, Some(1))]);
        let history = h.finish_with(&[(1, Some(2)), (2, Some(5))], P1);
        let report = check(&history);
        assert_clean(&report);
        assert_eq!(report.stats.final_read[0].records, 3);

        // Overlapping chunks are out of order.
        let mut h = workload();
        h.final_read(0, &[(0, Some(1)), (1, Some(2))]);
        let history = h.finish_with(&[(1, Some(2)), (2, Some(5))], P1);
        assert_only(
            &check(&history),
            CheckKind::FinalReadOrder,
            1,
            "t/0: offset 1 follows offset 1",
        );
    }

    #[test]
    fn two_reads_of_one_offset_with_different_records_diverge() {
        let mut h = workload();
        h.read_as(4, 1, 0, 1, Some(1), true);
        let history = h.finish();
        assert_only(
            &check(&history),
            CheckKind::DivergentRead,
            1,
            "t/0@1 read as value 2 (event #16 (client 3, 160 ms)) and as value 1 (event #23",
        );
    }

    #[test]
    fn a_read_and_the_final_read_diverging_is_found() {
        let history = workload().finish_with(&[(0, Some(1)), (1, Some(2)), (2, Some(1))], P1);
        let report = check(&history);
        // 1 is at two offsets (a duplicate) and p0@2 shows 1 where 5 was read.
        assert_eq!(report.count(CheckKind::DivergentRead), 1, "{report}");
        assert_eq!(report.count(CheckKind::Duplicate), 1, "{report}");
        assert_eq!(report.count(CheckKind::ReadThenLost), 1, "{report}");
        assert_eq!(report.violations(), 3);
    }

    #[test]
    fn a_committed_offset_moving_back_is_a_regression() {
        let mut h = workload();
        h.commit(3, 1, 0, 2);
        assert_only(
            &check(&h.finish()),
            CheckKind::CommitRegression,
            1,
            "group \"g\": committed offset of t/0 went from 3 (event #20) back to 2",
        );
    }

    #[test]
    fn a_regression_is_counted_once_not_for_every_later_commit() {
        let mut h = workload();
        h.commit(3, 1, 0, 1).commit(3, 1, 0, 2);
        let report = check(&h.finish());
        assert_only(&report, CheckKind::CommitRegression, 1, "back to 1");
    }

    #[test]
    fn a_group_reset_excuses_a_move_back() {
        let mut h = workload();
        h.reset(0, 0).commit(3, 1, 0, 2);
        assert_clean(&check(&h.finish()));

        // A reset of another partition does not.
        let mut h = workload();
        h.reset(1, 0).commit(3, 1, 0, 2);
        assert_only(&check(&h.finish()), CheckKind::CommitRegression, 1, "t/0");

        // Nor does a reset before the commit that set the floor.
        let mut h = workload();
        h.reset(0, 0).commit(3, 1, 0, 3).commit(3, 1, 0, 1);
        assert_only(
            &check(&h.finish()),
            CheckKind::CommitRegression,
            1,
            "back to 1",
        );

        // And committing below the reset offset is a regression too.
        let mut h = workload();
        h.reset(0, 10).commit(3, 1, 0, 5);
        assert_only(
            &check(&h.finish()),
            CheckKind::CommitRegression,
            1,
            "from 10",
        );
    }

    #[test]
    fn a_commit_invoked_before_a_reset_does_not_raise_the_floor() {
        // 9 may have been applied before the reset to 0, so 2 is fine.
        let mut h = workload();
        h.commit_invoke(3, 1, 0, 9)
            .reset(0, 0)
            .commit_ok(3, 1, 0, 9)
            .commit(3, 1, 0, 2);
        assert_clean(&check(&h.finish()));
    }

    #[test]
    fn commits_in_flight_together_may_complete_in_either_order() {
        let mut h = workload();
        h.commit_invoke(3, 1, 0, 5)
            .commit_invoke(4, 1, 0, 6)
            .commit_ok(4, 1, 0, 6)
            .commit_ok(3, 1, 0, 5);
        assert_clean(&check(&h.finish()));
    }

    #[test]
    fn failed_commits_do_not_count_as_committed() {
        let mut h = workload();
        h.commit_invoke(3, 1, 0, 9)
            .commit_fail(3, 1, 0, 9)
            .commit(3, 1, 0, 4);
        let report = check(&h.finish());
        assert_clean(&report);
        assert_eq!(report.stats.commits_failed, 1);
    }

    #[test]
    fn manual_offsets_of_an_empty_group_are_like_a_reset() {
        let mut h = workload();
        h.commit(8, -1, 0, 0).commit(3, 2, 0, 1);
        assert_clean(&check(&h.finish()));
    }

    #[test]
    fn a_commit_from_an_older_generation_is_stale() {
        let mut h = workload();
        h.read_as(4, 2, 1, 1, Some(4), true).commit(3, 1, 0, 4);
        assert_only(
            &check(&h.finish()),
            CheckKind::StaleGenerationCommit,
            1,
            "commit of t/0@4 in generation 1 accepted at event #25 (client 3, 250 ms), \
             but generation 2 was seen at event #23",
        );
    }

    #[test]
    fn newer_generations_seen_by_commits_make_older_commits_stale() {
        let mut h = workload();
        h.commit(4, 2, 1, 2).commit(3, 1, 0, 4);
        assert_only(
            &check(&h.finish()),
            CheckKind::StaleGenerationCommit,
            1,
            "in generation 1",
        );
    }

    #[test]
    fn a_commit_invoked_before_the_new_generation_is_not_stale() {
        let mut h = workload();
        h.commit_invoke(3, 1, 0, 4)
            .read_as(4, 2, 1, 1, Some(4), true)
            .commit_ok(3, 1, 0, 4);
        assert_clean(&check(&h.finish()));
    }

    #[test]
    fn a_record_failing_its_checksum_is_found() {
        let mut h = workload();
        h.read_as(3, 1, 0, 0, Some(1), false);
        assert_only(
            &check(&h.finish()),
            CheckKind::CorruptRead,
            1,
            "value 1 at t/0@0 fails its checksum",
        );
    }

    #[test]
    fn an_ack_inside_a_no_quorum_interval_is_found() {
        // Value 2 is sent at 20 ms and acknowledged at 50 ms.
        let mut h = workload();
        h.no_quorum(0, 20, 50);
        assert_only(
            &check(&h.finish()),
            CheckKind::AckWithoutQuorum,
            1,
            "value 2 sent at 20 ms and acknowledged at t/0@1 (event #5 (client 1, 50 ms)) \
             while t/0 had no quorum (20..=50 ms)",
        );
    }

    #[test]
    fn an_ack_straddling_a_no_quorum_interval_is_not_a_violation() {
        // Values 1 and 2 were sent at 10 and 20 ms, before quorum was lost
        // at 21 ms, and acknowledged at 30 and 50 ms.
        let mut h = workload();
        h.no_quorum(0, 21, 50);
        let report = check(&h.finish());
        assert_clean(&report);
        assert_eq!(report.stats.acks_straddling_no_quorum, 2);
        assert_eq!(report.stats.no_quorum_intervals, 2);
    }

    #[test]
    fn unknown_writes_may_or_may_not_be_in_the_log() {
        // 5 is in the log, 6 is not (both indeterminate); 10 has no outcome
        // and landed, 11 has no outcome and did not.
        let mut h = workload();
        h.invoke(10, 1, None).invoke(11, 1, None);
        let report = check(&h.finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, Some(10))]));
        assert_clean(&report);
        assert_eq!(report.stats.unknown, 2);
        assert_eq!(report.stats.unresolved, 2);
        assert_eq!(report.stats.unknown_in_log, 2);

        // With 5 absent from the log and never read it is fine too.
        let mut h = H::new();
        h.invoke(5, 0, None).unknown(5).final_read(0, &[]);
        assert_clean(&check(&h.history));
    }

    #[test]
    fn history_problems_are_reported_and_make_the_report_unclean() {
        let mut h = workload();
        h.ok(42, 0, 9) // no invocation
            .unknown(1) // second outcome
            .commit_ok(3, 1, 0, 3) // no invocation
            .commit_fail(3, 1, 1, 1) // no invocation
            .invoke(1, 0, None) // sent twice
            .invoke(12, 0, None)
            .ok(12, 1, 2) // sent to p0, acknowledged on p1
            .read(2, 0, Some(1)); // p2 has no final read
        h.history.record(
            0,
            ClientId(1),
            EventKind::NoQuorum {
                topic: TOPIC.into(),
                partition: 0,
                from_ms: 5,
                to_ms: 4,
            },
        ); // time goes back, interval ends before it starts
        let report = check(&h.finish_with(P0, &[(0, Some(3)), (1, Some(4)), (2, Some(12))]));
        assert_eq!(report.violations(), 0, "{report}");
        assert!(!report.is_clean());
        let problems = &report.history_problems.examples;
        let expected = [
            "outcome of value 42 at event #23",
            "second outcome of value 1 at event #24",
            "commit_ok at event #25 (client 3, 250 ms) matches no earlier commit_invoke",
            "commit_fail at event #26",
            "value 1 sent again at event #27",
            "value 12 was sent to t/0 but acknowledged on t/1 at event #29",
            "event #31 (client 1, 0 ms) is earlier than the event before it",
            "no-quorum interval at event #31",
            "t/2 has acknowledged or read records but no final read",
        ];
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        for (problem, expected) in problems.iter().zip(expected) {
            assert!(problem.starts_with(expected), "{problem:?} vs {expected:?}");
        }
        assert_eq!(report.history_problems.count, 9);
    }

    #[test]
    fn a_repeated_sequence_is_a_history_problem() {
        let mut h = workload();
        h.invoke(8, 1, Some((2, 0)))
            .invoke(9, 1, Some((2, 0)))
            .ok(8, 1, 2)
            .ok(9, 1, 3);
        let report = check(&h.finish_with(
            P0,
            &[(0, Some(3)), (1, Some(4)), (2, Some(8)), (3, Some(9))],
        ));
        assert_eq!(report.violations(), 0, "{report}");
        assert_eq!(report.history_problems.count, 1);
        assert!(report.history_problems.examples[0].contains("both acknowledged with sequence 0"));
    }

    #[test]
    fn counts_are_complete_when_examples_are_limited() {
        let history = workload().finish_with(&[], &[]);
        let report = check_with_limit(&history, 2);
        let lost = report.check(CheckKind::AcknowledgedLost);
        assert_eq!(lost.violations, Some(4));
        assert_eq!(lost.examples.len(), 2);
        assert!(lost.examples[0].starts_with("value 1 "), "{lost:?}");
        assert!(lost.examples[1].starts_with("value 2 "), "{lost:?}");
        assert_eq!(report.count(CheckKind::ReadThenLost), 1);
        assert!(report.to_string().contains("  ... and 2 more"));
    }

    #[test]
    fn the_report_survives_a_json_round_trip_of_its_history() {
        let history = workload().finish();
        let text = history.to_json_lines().unwrap();
        let parsed = History::from_json_lines(&text).unwrap();
        assert_eq!(check(&parsed), check(&history));
    }

    // ---- random clean histories ----

    /// What happens to a send.
    #[derive(Clone, Copy, Debug)]
    enum Fate {
        Ack,
        Fail,
        UnknownLanded,
        UnknownLost,
    }

    /// One step of the random workload.
    #[derive(Clone, Debug)]
    enum Action {
        /// A producer (0..4: two idempotent producers, the first one's next
        /// epoch, one without idempotence) sends to a partition.
        Send {
            producer: usize,
            partition: u32,
            fate: Fate,
        },
        /// A pending send completes.
        Complete { pick: usize },
        /// The group member reads a record of a partition.
        Read { partition: u32, pick: usize },
        /// The member commits (maybe refused) further on a partition.
        Commit {
            partition: u32,
            advance: u64,
            accepted: bool,
        },
        /// The group moves to a new generation.
        Rebalance,
        /// An operator resets a partition's committed offset.
        Reset { partition: u32, pick: u64 },
        /// The clock moves.
        Tick { ms: u64 },
        /// The injector proposes a no-quorum interval starting soon.
        Outage {
            partition: u32,
            delay: u64,
            len: u64,
        },
    }

    const PARTITIONS: u32 = 3;

    fn fate() -> impl Strategy<Value = Fate> {
        prop_oneof![
            4 => Just(Fate::Ack),
            1 => Just(Fate::Fail),
            1 => Just(Fate::UnknownLanded),
            1 => Just(Fate::UnknownLost),
        ]
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            6 => (0_usize..4, 0..PARTITIONS, fate())
                .prop_map(|(producer, partition, fate)| Action::Send { producer, partition, fate }),
            5 => any::<usize>().prop_map(|pick| Action::Complete { pick }),
            3 => (0..PARTITIONS, any::<usize>()).prop_map(|(partition, pick)| Action::Read { partition, pick }),
            2 => (0..PARTITIONS, 0_u64..4, any::<bool>())
                .prop_map(|(partition, advance, accepted)| Action::Commit { partition, advance, accepted }),
            1 => Just(Action::Rebalance),
            1 => (0..PARTITIONS, any::<u64>()).prop_map(|(partition, pick)| Action::Reset { partition, pick }),
            2 => (0_u64..20).prop_map(|ms| Action::Tick { ms }),
            1 => (0..PARTITIONS, 0_u64..30, 0_u64..60)
                .prop_map(|(partition, delay, len)| Action::Outage { partition, delay, len }),
        ]
    }

    /// A send waiting for its outcome.
    struct Pending {
        value_id: u64,
        fate: Fate,
        partition: u32,
        offset: Option<u64>,
    }

    /// Records `kind` one millisecond later.
    fn record(history: &mut History, now: &mut u64, client: ClientId, kind: EventKind) {
        *now += 1;
        history.record(*now, client, kind);
    }

    /// Runs `actions` against a model log and records a clean history;
    /// each partition's final read is cut into two chunks at `split`.
    fn simulate(actions: &[Action], split: usize) -> History {
        let stamps: [Option<(i64, i16)>; 4] = [Some((10, 0)), Some((11, 0)), Some((10, 1)), None];
        let mut history = History::new();
        let mut now = 0_u64;
        let mut next_value = 0_u64;
        let mut logs: Vec<Vec<(u64, Key)>> = vec![Vec::new(); PARTITIONS as usize];
        let mut sequences: BTreeMap<(usize, u32), i32> = BTreeMap::new();
        let mut pending: Vec<Pending> = Vec::new();
        let mut generation = 0_i32;
        let mut committed = [0_u64; PARTITIONS as usize];
        let mut outages = Vec::new();
        // (partition, time) of every append that landed.
        let mut landings: Vec<(u32, u64)> = Vec::new();
        let member = ClientId(100);

        for action in actions {
            match *action {
                Action::Send {
                    producer,
                    partition,
                    fate,
                } => {
                    next_value += 1;
                    let value_id = next_value;
                    let key = Key::Int(value_id % 7);
                    let producer_stamp = stamps[producer].map(|(producer_id, epoch)| {
                        let sequence = sequences.entry((producer, partition)).or_insert(0);
                        let stamp = ProducerStamp {
                            producer_id,
                            epoch,
                            sequence: *sequence,
                        };
                        *sequence += 1;
                        stamp
                    });
                    record(
                        &mut history,
                        &mut now,
                        ClientId(u32::try_from(producer).unwrap()),
                        EventKind::ProduceInvoke {
                            value_id: ValueId(value_id),
                            key: Some(key.clone()),
                            topic: TOPIC.into(),
                            partition: Some(partition),
                            producer: producer_stamp,
                        },
                    );
                    let log = &mut logs[partition as usize];
                    let offset = match fate {
                        Fate::Ack | Fate::UnknownLanded => {
                            log.push((value_id, key));
                            landings.push((partition, now));
                            Some(u64::try_from(log.len() - 1).unwrap())
                        }
                        Fate::Fail | Fate::UnknownLost => None,
                    };
                    pending.push(Pending {
                        value_id,
                        fate,
                        partition,
                        offset,
                    });
                }
                Action::Complete { pick } => {
                    if pending.is_empty() {
                        continue;
                    }
                    let done = pending.remove(pick % pending.len());
                    let value_id = ValueId(done.value_id);
                    let kind = match (done.fate, done.offset) {
                        (Fate::Ack, Some(offset)) => EventKind::ProduceOk {
                            value_id,
                            partition: done.partition,
                            offset,
                        },
                        (Fate::Fail, _) => EventKind::ProduceFail {
                            value_id,
                            error: "refused".into(),
                        },
                        _ => EventKind::ProduceUnknown {
                            value_id,
                            error: "timed out".into(),
                        },
                    };
                    record(&mut history, &mut now, ClientId(50), kind);
                }
                Action::Read { partition, pick } => {
                    let log = &logs[partition as usize];
                    if log.is_empty() {
                        continue;
                    }
                    let offset = pick % log.len();
                    let (value_id, key) = &log[offset];
                    record(
                        &mut history,
                        &mut now,
                        member,
                        EventKind::Read {
                            group: Some(GROUP.into()),
                            generation: Some(generation),
                            topic: TOPIC.into(),
                            partition,
                            offset: u64::try_from(offset).unwrap(),
                            value_id: Some(ValueId(*value_id)),
                            key: Some(key.clone()),
                            checksum_ok: true,
                        },
                    );
                }
                Action::Commit {
                    partition,
                    advance,
                    accepted,
                } => {
                    let offset = committed[partition as usize] + advance;
                    let fields = (GROUP.to_owned(), TOPIC.to_owned());
                    record(
                        &mut history,
                        &mut now,
                        member,
                        EventKind::CommitInvoke {
                            group: fields.0.clone(),
                            generation,
                            topic: fields.1.clone(),
                            partition,
                            offset,
                        },
                    );
                    let kind = if accepted {
                        committed[partition as usize] = offset;
                        EventKind::CommitOk {
                            group: fields.0,
                            generation,
                            topic: fields.1,
                            partition,
                            offset,
                        }
                    } else {
                        EventKind::CommitFail {
                            group: fields.0,
                            generation,
                            topic: fields.1,
                            partition,
                            offset,
                            error: "NOT_OWNER".into(),
                        }
                    };
                    record(&mut history, &mut now, member, kind);
                }
                Action::Rebalance => generation += 1,
                Action::Reset { partition, pick } => {
                    let offset = pick % (committed[partition as usize] + 5);
                    committed[partition as usize] = offset;
                    record(
                        &mut history,
                        &mut now,
                        ClientId(8),
                        EventKind::GroupReset {
                            group: GROUP.into(),
                            topic: TOPIC.into(),
                            partition,
                            offset,
                        },
                    );
                }
                Action::Tick { ms } => now += ms,
                Action::Outage {
                    partition,
                    delay,
                    len,
                } => {
                    outages.push((partition, now + delay, now + delay + len));
                }
            }
        }

        // The injector's intervals: only those during which nothing landed
        // on the partition. Acks may still arrive inside one, for records
        // that landed before it started.
        for (partition, from_ms, to_ms) in outages {
            if landings
                .iter()
                .all(|&(p, at)| p != partition || at < from_ms || at > to_ms)
            {
                record(
                    &mut history,
                    &mut now,
                    ClientId(0),
                    EventKind::NoQuorum {
                        topic: TOPIC.into(),
                        partition,
                        from_ms,
                        to_ms,
                    },
                );
            }
        }
        for (partition, log) in (0..PARTITIONS).zip(&logs) {
            let records: Vec<(u64, Option<ValueId>)> = log
                .iter()
                .enumerate()
                .map(|(offset, (value_id, _))| {
                    (u64::try_from(offset).unwrap(), Some(ValueId(*value_id)))
                })
                .collect();
            let cut = split.min(records.len());
            for chunk in [&records[..cut], &records[cut..]] {
                record(
                    &mut history,
                    &mut now,
                    ClientId(9),
                    EventKind::FinalRead {
                        topic: TOPIC.into(),
                        partition,
                        records: chunk.to_vec(),
                    },
                );
            }
        }
        history
    }

    /// Removes the acknowledged record `pick` (modulo their number) from
    /// the final read; `None` if nothing was acknowledged.
    fn drop_one_ack(history: &History, pick: usize) -> Option<(History, ValueId)> {
        let acked: Vec<(ValueId, u32, u64)> = history
            .events()
            .iter()
            .filter_map(|event| match event.kind {
                EventKind::ProduceOk {
                    value_id,
                    partition,
                    offset,
                } => Some((value_id, partition, offset)),
                _ => None,
            })
            .collect();
        if acked.is_empty() {
            return None;
        }
        let (value_id, partition, offset) = acked[pick % acked.len()];
        let events = history.events().iter().cloned().map(|mut event| {
            if let EventKind::FinalRead {
                partition: p,
                records,
                ..
            } = &mut event.kind
                && *p == partition
            {
                records.retain(|&(o, v)| (o, v) != (offset, Some(value_id)));
            }
            event
        });
        Some((events.collect(), value_id))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_clean_histories_have_no_violation(
            actions in proptest::collection::vec(action(), 0..150),
            split in 0_usize..20,
        ) {
            let history = simulate(&actions, split);
            let report = check(&history);
            prop_assert!(report.is_clean(), "{}", report);
            prop_assert_eq!(report.stats.sent, report.stats.acknowledged + report.stats.failed
                + report.stats.unknown + report.stats.unresolved);
        }

        #[test]
        fn dropping_one_acknowledged_record_is_exactly_one_loss(
            actions in proptest::collection::vec(action(), 1..150),
            split in 0_usize..20,
            pick in any::<usize>(),
        ) {
            let history = simulate(&actions, split);
            let Some((damaged, value_id)) = drop_one_ack(&history, pick) else {
                return Ok(());
            };
            let report = check(&damaged);
            prop_assert_eq!(report.count(CheckKind::AcknowledgedLost), 1, "{}", report);
            prop_assert_eq!(report.violations(), 1, "{}", report);
            prop_assert_eq!(report.history_problems.count, 0, "{}", report);
            let example = &report.check(CheckKind::AcknowledgedLost).examples[0];
            let expected = format!("{value_id} acknowledged at");
            prop_assert!(example.starts_with(&expected), "{}", example);
        }

        #[test]
        fn random_histories_survive_json_lines(
            actions in proptest::collection::vec(action(), 0..80),
            split in 0_usize..20,
        ) {
            let history = simulate(&actions, split);
            let text = history.to_json_lines().unwrap();
            let parsed = History::from_json_lines(&text).unwrap();
            prop_assert_eq!(&parsed, &history);
            prop_assert_eq!(check(&parsed), check(&history));
        }
    }
}
