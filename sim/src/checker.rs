//! The invariant checker: watches every replica's high watermark and role,
//! every disk (parsed from its files, see [`crate::disk`]), every
//! acknowledgement to a client and every leadership, and records the first
//! violation.
//!
//! The checked properties (spec "Invariants the simulator checks"):
//! 1. No acknowledged record is lost or changed: an acknowledged batch is
//!    committed (below a leader's high watermark, as recorded here) and
//!    holds the records the client sent; committed batches stay durable,
//!    byte for byte, on a majority of disks (retention excepted); the
//!    leader of the newest epoch holds every committed batch it has made
//!    durable, and once its own marker is committed its high watermark is
//!    past every acknowledged record.
//! 2. The high watermark never moves back (per replica incarnation: it is
//!    soft state and restarts after a crash).
//! 3. Replicas agree below their high watermarks: every batch a replica's
//!    files hold below its high watermark equals the one recorded as
//!    committed at that offset (first come), so all agree with each other,
//!    forever; and a high watermark never falls inside a batch.
//! 4. At most one leader (replica incarnation) per epoch.
//! 5. A leader never commits records it wrote after a majority promised a
//!    newer epoch. (The spec's wording, "never become committed", is too
//!    strong: a later leader may legitimately commit such a record if it
//!    received it, as Raft commits old-term entries.)

use std::collections::BTreeMap;

use bytes::Bytes;
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::disk::{LogView, StoredBatch};
use crate::world::Incarnation;

/// The checker's record of the run.
#[derive(Debug)]
pub struct Checker {
    limits: BatchLimits,
    /// Committed batches by base offset, as first seen below some high
    /// watermark.
    committed: BTreeMap<Offset, StoredBatch>,
    /// High watermark per incarnation.
    high_watermarks: BTreeMap<Incarnation, Offset>,
    /// Per incarnation, how far its batches below its high watermark were
    /// compared with the committed ones (its files may lag its high
    /// watermark: a follower learns it before its appends are written).
    verified: BTreeMap<Incarnation, Offset>,
    /// The incarnation that led each epoch.
    leaders: BTreeMap<LeaderEpoch, Incarnation>,
    /// Per epoch: the leader's log end when a majority had promised a newer
    /// epoch (`None`: the leader was down then, and never commits again).
    fence_ends: BTreeMap<LeaderEpoch, Option<Offset>>,
    /// Acknowledged batches by base offset.
    acknowledged: BTreeMap<Offset, StoredBatch>,
    violation: Option<String>,
    /// Acknowledgements counted (statistics).
    pub ack_count: u64,
}

impl Checker {
    /// A checker of batches within `limits`.
    #[must_use]
    pub fn new(limits: BatchLimits) -> Checker {
        Checker {
            limits,
            committed: BTreeMap::new(),
            high_watermarks: BTreeMap::new(),
            verified: BTreeMap::new(),
            leaders: BTreeMap::new(),
            fence_ends: BTreeMap::new(),
            acknowledged: BTreeMap::new(),
            violation: None,
            ack_count: 0,
        }
    }

    /// The first violation seen, if any.
    #[must_use]
    pub fn violation(&self) -> Option<&str> {
        self.violation.as_deref()
    }

    /// Reports a violation found elsewhere.
    pub fn report(&mut self, message: String) {
        if self.violation.is_none() {
            self.violation = Some(message);
        }
    }

    /// The end of the last acknowledged batch.
    #[must_use]
    pub fn acknowledged_end(&self) -> Offset {
        self.acknowledged
            .values()
            .next_back()
            .map_or(Offset(0), StoredBatch::end)
    }

    /// `who`'s high watermark is `high_watermark`, its files hold `view`,
    /// and it leads `leading`, if anything (properties 2, 3 and 5).
    pub fn on_high_watermark(
        &mut self,
        who: Incarnation,
        high_watermark: Offset,
        view: &LogView,
        leading: Option<LeaderEpoch>,
    ) {
        let previous = self.high_watermarks.get(&who).copied().unwrap_or(Offset(0));
        if high_watermark < previous {
            self.report(format!(
                "{who:?}: high watermark moved back from {previous} to {high_watermark}"
            ));
            return;
        }
        self.high_watermarks.insert(who, high_watermark);
        if let Some(epoch) = leading
            && let Some(Some(fence_end)) = self.fence_ends.get(&epoch).copied()
            && high_watermark > fence_end
            && self.leaders.get(&epoch) == Some(&who)
        {
            self.report(format!(
                "{who:?} leading fenced epoch {epoch} committed up to {high_watermark}, \
                 past {fence_end} where a majority had promised a newer epoch"
            ));
        }
        let verified = self.verified.get(&who).copied().unwrap_or(Offset(0));
        let from = verified.max(view.log_start());
        let mut reached = from;
        let mut newly = Vec::new();
        for batch in view.from(from) {
            if batch.base >= high_watermark {
                break;
            }
            if batch.last >= high_watermark {
                self.report(format!(
                    "{who:?}: high watermark {high_watermark} inside batch {}..={}",
                    batch.base, batch.last
                ));
                return;
            }
            reached = batch.end();
            newly.push(batch.clone());
        }
        for batch in newly {
            self.commit(who, batch);
        }
        self.verified.insert(who, reached);
    }

    fn commit(&mut self, who: Incarnation, batch: StoredBatch) {
        if let Some((_, known)) = self.committed.range(..=batch.base).next_back()
            && known.last >= batch.base
        {
            if *known != batch {
                let known = known.clone();
                self.report(format!(
                    "{who:?} has {}..={} (epoch {:?}) below its high watermark where \
                     {}..={} (epoch {:?}) was committed",
                    batch.base, batch.last, batch.epoch, known.base, known.last, known.epoch
                ));
            }
            return;
        }
        if let Some((_, next)) = self.committed.range(batch.base..).next()
            && next.base <= batch.last
        {
            let next = next.clone();
            self.report(format!(
                "{who:?} commits {}..={} overlapping committed {}..={}",
                batch.base, batch.last, next.base, next.last
            ));
            return;
        }
        self.committed.insert(batch.base, batch);
    }

    /// A leader acknowledged to a client that the batch of `values` is
    /// committed at `base` (property 1).
    pub fn on_acknowledged(&mut self, who: Incarnation, base: Offset, values: &[Bytes]) {
        self.ack_count += 1;
        let Some(batch) = self.committed.get(&base).cloned() else {
            self.report(format!(
                "{who:?} acknowledged a batch at {base}, where no batch is committed"
            ));
            return;
        };
        let stored: Vec<Bytes> = match batch::decode_records(&batch.bytes, &self.limits) {
            Ok(records) => records
                .into_iter()
                .filter_map(|record| record.value)
                .collect(),
            Err(error) => {
                self.report(format!(
                    "committed batch at {base} does not decode: {error}"
                ));
                return;
            }
        };
        if stored != values {
            self.report(format!(
                "{who:?} acknowledged {values:?} at {base}, where {stored:?} is committed"
            ));
        }
        self.acknowledged.insert(base, batch);
    }

    /// `who` leads `epoch`, durably (property 4). Returns whether that is
    /// news.
    pub fn on_leader(&mut self, who: Incarnation, epoch: LeaderEpoch) -> bool {
        match self.leaders.insert(epoch, who) {
            Some(previous) if previous != who => {
                self.report(format!("epoch {epoch} led by {previous:?} and by {who:?}"));
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// The leader of the newest epoch holds every committed batch from its
    /// log start up to its durable end (property 1; beyond its durable end
    /// its files may not have them yet).
    pub fn check_leader_holds(
        &mut self,
        who: Incarnation,
        epoch: LeaderEpoch,
        view: &LogView,
        durable_end: Offset,
    ) {
        if self.leaders.keys().next_back() != Some(&epoch) {
            return;
        }
        let missing = self
            .committed
            .range(view.log_start()..)
            .map(|(_, batch)| batch)
            .take_while(|batch| batch.last < durable_end)
            .find(|batch| !view.holds(batch))
            .cloned();
        if let Some(batch) = missing {
            self.report(format!(
                "{who:?} leads epoch {epoch} without committed {}..={}",
                batch.base, batch.last
            ));
        }
    }

    /// The leader of the newest epoch, once its marker is committed, has
    /// every acknowledged record below its high watermark (property 1).
    /// Leaders of older epochs may lag: they are fenced and commit nothing
    /// new.
    pub fn check_leader_covers_acknowledged(
        &mut self,
        who: Incarnation,
        epoch: LeaderEpoch,
        high_watermark: Offset,
        epoch_start: Offset,
    ) {
        if self.leaders.keys().next_back() != Some(&epoch) {
            return;
        }
        let acknowledged_end = self.acknowledged_end();
        if high_watermark > epoch_start && high_watermark < acknowledged_end {
            self.report(format!(
                "{who:?} committed its epoch's first batch at {epoch_start} but its high \
                 watermark {high_watermark} is below acknowledged records up to \
                 {acknowledged_end}"
            ));
        }
    }

    /// Records, for every led epoch not yet fenced, whether a majority of
    /// disks now holds a promise of a newer epoch (`fences`: each node's
    /// durable promise); if so, the leader's log end (`log_end_of`: `None`
    /// when that incarnation is down) bounds what it may ever commit
    /// (property 5).
    pub fn track_fences(
        &mut self,
        fences: &BTreeMap<u32, LeaderEpoch>,
        log_end_of: impl Fn(Incarnation) -> Option<Offset>,
    ) {
        let majority = fences.len() / 2 + 1;
        let unfenced: Vec<(LeaderEpoch, Incarnation)> = self
            .leaders
            .iter()
            .filter(|(epoch, _)| !self.fence_ends.contains_key(epoch))
            .map(|(epoch, who)| (*epoch, *who))
            .collect();
        for (epoch, leader) in unfenced {
            let promised = fences.values().filter(|fence| **fence > epoch).count();
            if promised >= majority {
                self.fence_ends.insert(epoch, log_end_of(leader));
            }
        }
    }

    /// A committed batch durable (or deleted by retention) on fewer than
    /// `needed` of `disks`, if any.
    fn committed_on_fewer_than(
        &self,
        disks: &BTreeMap<u32, LogView>,
        needed: usize,
    ) -> Option<StoredBatch> {
        self.committed
            .values()
            .find(|batch| {
                disks
                    .values()
                    .filter(|disk| disk.log_start() > batch.base || disk.holds(batch))
                    .count()
                    < needed
            })
            .cloned()
    }

    /// Every committed batch is durable on a majority of disks, or deleted
    /// by retention there (property 1). `disks` are the durable views.
    /// Called after events that remove data: crashes, truncations, resets.
    pub fn check_durability(&mut self, disks: &BTreeMap<u32, LogView>, why: &str) {
        let majority = disks.len() / 2 + 1;
        if let Some(batch) = self.committed_on_fewer_than(disks, majority) {
            let acknowledged = self.acknowledged.contains_key(&batch.base);
            self.report(format!(
                "after {why}: committed {}..={} (acknowledged: {acknowledged}) is durable on \
                 fewer than {majority} disks",
                batch.base, batch.last
            ));
        }
    }

    /// Every committed batch is durable, or deleted by retention, on
    /// enough of `disks` (the current replica set's) that every majority
    /// of them holds it: an election there cannot lose it (property 1,
    /// for a set that changes one node at a time; the set just grown by
    /// a learner may hold a batch committed by the smaller set on only
    /// that set's majority).
    pub fn check_durability_for_elections(&mut self, disks: &BTreeMap<u32, LogView>, why: &str) {
        let needed = disks.len() - (disks.len() / 2 + 1) + 1;
        if let Some(batch) = self.committed_on_fewer_than(disks, needed) {
            self.report(format!(
                "after {why}: committed {}..={} is durable on fewer than {needed} of the \
                 replicas {:?}: an election among the others can lose it",
                batch.base,
                batch.last,
                disks.keys().collect::<Vec<_>>()
            ));
        }
    }

    /// A restarted incarnation starts with no high watermark history.
    pub fn forget(&mut self, who: Incarnation) {
        self.high_watermarks.remove(&who);
        self.verified.remove(&who);
    }

    /// How many batches are committed (statistics).
    #[must_use]
    pub fn committed_count(&self) -> usize {
        self.committed.len()
    }
}
