//! The invariant checker: watches every node's disk and high watermark,
//! every acknowledgement to a client and every leadership, and records the
//! first violation.
//!
//! The checked properties (spec "Invariants the simulator checks"):
//! 1. No acknowledged record is lost or changed: an acknowledged batch is
//!    committed (below a leader's high watermark, as recorded here);
//!    committed batches stay durable, byte for byte, on a majority of disks
//!    (retention excepted); every new leader holds all of them; a leader
//!    whose marker is committed has its high watermark past all of them.
//! 2. The high watermark never moves back (per replica incarnation: it is
//!    soft state and restarts at the log start after a crash).
//! 3. Replicas agree below their high watermarks: every batch any replica
//!    has below its high watermark equals the one recorded as committed at
//!    that offset (first come), so all agree with each other, forever.
//! 4. At most one leader (replica incarnation) per epoch.
//! 5. A leader never commits records it wrote after a majority promised a
//!    newer epoch. (The spec's wording, "never become committed", is too
//!    strong: a later leader may legitimately commit such a record if it
//!    received it, as Raft commits old-term entries; see the crate docs.)

use std::collections::BTreeMap;

use corelog_replication::{Batch, ReplicaId};
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::disk::Disk;

/// A replica incarnation: a node id and how often it restarted.
pub type Incarnation = (ReplicaId, u64);

/// The checker's record of the run.
#[derive(Debug, Default)]
pub struct Checker {
    /// Committed batches by base offset, as first seen below some high
    /// watermark.
    committed: BTreeMap<Offset, Batch>,
    /// High watermark per incarnation.
    high_watermarks: BTreeMap<Incarnation, Offset>,
    /// The incarnation that led each epoch.
    leaders: BTreeMap<LeaderEpoch, Incarnation>,
    /// Per epoch: the leader's log end when a majority had promised a newer
    /// epoch.
    fence_ends: BTreeMap<LeaderEpoch, Offset>,
    /// Acknowledged batches by base offset.
    acknowledged: BTreeMap<Offset, Batch>,
    /// The first violation.
    violation: Option<String>,
    /// Acknowledgements counted (statistics).
    pub ack_count: u64,
}

impl Checker {
    /// The first violation seen, if any.
    #[must_use]
    pub fn violation(&self) -> Option<&str> {
        self.violation.as_deref()
    }

    fn fail(&mut self, message: String) {
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
            .map_or(Offset(0), Batch::end)
    }

    /// A replica's high watermark rose from its previous value to
    /// `high_watermark` (properties 2, 3 and 5). `leading` is the epoch it
    /// leads, if it does.
    pub fn on_high_watermark(
        &mut self,
        who: Incarnation,
        high_watermark: Offset,
        disk: &Disk,
        leading: Option<LeaderEpoch>,
    ) {
        let previous = self.high_watermarks.get(&who).copied().unwrap_or(Offset(0));
        if high_watermark < previous {
            self.fail(format!(
                "{who:?}: high watermark moved back from {previous} to {high_watermark}"
            ));
            return;
        }
        self.high_watermarks.insert(who, high_watermark);
        let from = previous.max(disk.log_start());
        if let Some(epoch) = leading
            && let Some(fence_end) = self.fence_ends.get(&epoch).copied()
            && high_watermark > fence_end
        {
            self.fail(format!(
                "{who:?} leading fenced epoch {epoch} committed up to {high_watermark}, \
                 past {fence_end} where a majority had promised a newer epoch"
            ));
        }
        let start = disk.batches().partition_point(|batch| batch.end() <= from);
        let newly: Vec<Batch> = disk.batches()[start..]
            .iter()
            .take_while(|batch| batch.base < high_watermark)
            .cloned()
            .collect();
        for batch in newly {
            if batch.last >= high_watermark {
                self.fail(format!(
                    "{who:?}: high watermark {high_watermark} inside batch {:?}",
                    batch.meta()
                ));
                return;
            }
            self.commit(who, batch);
        }
    }

    fn commit(&mut self, who: Incarnation, batch: Batch) {
        if let Some((_, known)) = self.committed.range(..=batch.base).next_back()
            && known.last >= batch.base
        {
            if *known != batch {
                let known = known.clone();
                self.fail(format!(
                    "{who:?} has {:?} {:?} below its high watermark where {:?} {:?} was committed",
                    batch.meta(),
                    batch.bytes,
                    known.meta(),
                    known.bytes
                ));
            }
            return;
        }
        if let Some((_, next)) = self.committed.range(batch.base..).next()
            && next.base <= batch.last
        {
            let next = next.clone();
            self.fail(format!(
                "{who:?} commits {:?} overlapping committed {:?}",
                batch.meta(),
                next.meta()
            ));
            return;
        }
        self.committed.insert(batch.base, batch);
    }

    /// A leader acknowledged `batch` to its client (property 1).
    pub fn on_acknowledged(&mut self, who: Incarnation, batch: &Batch) {
        self.ack_count += 1;
        if self.committed.get(&batch.base) != Some(batch) {
            self.fail(format!(
                "{who:?} acknowledged {:?} which is not the committed batch there",
                batch.meta()
            ));
        }
        self.acknowledged.insert(batch.base, batch.clone());
    }

    /// `who` took leadership of `epoch` with this log (properties 1 and 4).
    pub fn on_leader(&mut self, who: Incarnation, epoch: LeaderEpoch, disk: &Disk) {
        if let Some(previous) = self.leaders.insert(epoch, who)
            && previous != who
        {
            self.fail(format!("epoch {epoch} led by {previous:?} and by {who:?}"));
            return;
        }
        let missing = self
            .committed
            .values()
            .filter(|batch| batch.base >= disk.log_start())
            .find(|batch| disk.batch_at(batch.base) != Some(*batch))
            .cloned();
        if let Some(batch) = missing {
            self.fail(format!(
                "{who:?} leads epoch {epoch} without committed {:?}",
                batch.meta()
            ));
        }
    }

    /// The leader of an epoch, if known.
    #[must_use]
    pub fn leader_of(&self, epoch: LeaderEpoch) -> Option<Incarnation> {
        self.leaders.get(&epoch).copied()
    }

    /// Records, for every led epoch not yet fenced, whether a majority of
    /// disks now holds a promise of a newer epoch; if so, the leader's log
    /// end now bounds what that leader may ever commit (property 5).
    pub fn track_fences(&mut self, disks: &BTreeMap<ReplicaId, &Disk>) {
        let majority = disks.len() / 2 + 1;
        let unfenced: Vec<(LeaderEpoch, Incarnation)> = self
            .leaders
            .iter()
            .filter(|(epoch, _)| !self.fence_ends.contains_key(epoch))
            .map(|(epoch, who)| (*epoch, *who))
            .collect();
        for (epoch, (leader, _)) in unfenced {
            let promised = disks
                .values()
                .filter(|disk| disk.persisted_fence() > epoch)
                .count();
            if promised >= majority
                && let Some(disk) = disks.get(&leader)
            {
                self.fence_ends.insert(epoch, disk.log_end());
            }
        }
    }

    /// Every committed batch is durable on a majority of disks, or deleted
    /// by retention there (property 1). Called after events that remove
    /// data: crashes, truncations, resets.
    pub fn check_durability(&mut self, disks: &BTreeMap<ReplicaId, &Disk>, why: &str) {
        let majority = disks.len() / 2 + 1;
        let lost = self
            .committed
            .values()
            .find(|batch| {
                disks
                    .values()
                    .filter(|disk| disk.log_start() > batch.base || disk.holds_durably(batch))
                    .count()
                    < majority
            })
            .cloned();
        if let Some(batch) = lost {
            let acknowledged = self.acknowledged.contains_key(&batch.base);
            self.fail(format!(
                "after {why}: committed {:?} (acknowledged: {acknowledged}) is durable on \
                 fewer than {majority} disks",
                batch.meta()
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
            self.fail(format!(
                "{who:?} committed its epoch's marker at {epoch_start} but its high watermark \
                 {high_watermark} is below acknowledged records up to {acknowledged_end}"
            ));
        }
    }

    /// Reports a violation found elsewhere (a shell-level consistency
    /// check, a refused leadership that must not happen).
    pub fn report(&mut self, message: String) {
        self.fail(message);
    }

    /// A restarted incarnation starts with no high watermark history.
    pub fn forget_incarnation(&mut self, who: Incarnation) {
        self.high_watermarks.remove(&who);
    }

    /// How many batches are committed (statistics).
    #[must_use]
    pub fn committed_count(&self) -> usize {
        self.committed.len()
    }
}
