//! A simulated broker holding one replica: the I/O shell around
//! [`Replica`]. It turns messages and disk events into calls on the state
//! machine and carries out the actions that come back, exactly as the
//! broker's shell must (Persist/Truncate/Reset durable before the next
//! action; pushes filled from the local log; client appends acknowledged
//! once the leader's high watermark passes them).

use std::collections::VecDeque;

use bytes::Bytes;
use corelog_replication::{
    Action, Batch, BatchMeta, PartitionKey, PushResult, RecoveredLog, Replica, ReplicaConfig,
    ReplicaId, ReplicaMeta, ReplicationError, RoleView,
};
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::checker::{Checker, Incarnation};
use crate::disk::Disk;
use crate::network::{Endpoint, Message, Network};
use crate::rng::Rng;
use crate::trace::Trace;

/// How often a node tells the controller it is alive, milliseconds.
const HEARTBEAT_MS: u64 = 20;

/// What a node's handlers need from the rest of the simulation.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The current time.
    pub now_ms: u64,
    /// The network.
    pub network: &'a mut Network,
    /// The invariant checker.
    pub checker: &'a mut Checker,
    /// Randomness for disk timings and retention.
    pub rng: &'a mut Rng,
    /// The event log.
    pub trace: &'a mut Trace,
    /// Fsync delay range, milliseconds.
    pub fsync_ms: (u64, u64),
    /// Set when data was removed from a disk (truncation, reset), so that
    /// the run checks durability of committed records across disks.
    pub removed_data: Option<&'static str>,
    /// Coverage counters.
    pub stats: &'a mut Stats,
}

/// How often the interesting paths ran: a simulator that never truncates
/// or resets proves little about them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Follower truncations.
    pub truncations: u64,
    /// Follower resets (catch-up from below retention).
    pub resets: u64,
    /// Retention deletions.
    pub retentions: u64,
    /// Mismatch answers sent.
    pub mismatches: u64,
    /// Leaderships taken.
    pub leaderships: u64,
    /// Leaderships refused because the replica led the epoch before.
    pub already_led: u64,
    /// Restarts.
    pub restarts: u64,
}

/// A client append waiting for the high watermark.
#[derive(Clone, Debug)]
struct Pending {
    client: u32,
    request: u64,
    batch: Batch,
}

/// One simulated broker.
#[derive(Debug)]
pub struct Node {
    id: ReplicaId,
    incarnation: u64,
    partition: PartitionKey,
    config: ReplicaConfig,
    /// `None` while the node is down.
    replica: Option<Replica>,
    disk: Disk,
    pending: Vec<Pending>,
    known_leader: Option<ReplicaId>,
    restart_at_ms: Option<u64>,
    last_heartbeat_ms: u64,
}

impl Node {
    /// A node with an empty disk, up.
    #[must_use]
    pub fn new(id: ReplicaId, partition: PartitionKey, config: ReplicaConfig) -> Self {
        Self {
            id,
            incarnation: 0,
            partition,
            config,
            replica: Some(Replica::new(id, partition, config)),
            disk: Disk::default(),
            pending: Vec::new(),
            known_leader: None,
            restart_at_ms: None,
            last_heartbeat_ms: 0,
        }
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// The current incarnation.
    #[must_use]
    pub fn incarnation(&self) -> Incarnation {
        (self.id, self.incarnation)
    }

    /// The disk.
    #[must_use]
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// The replica, if the node is up.
    #[must_use]
    pub fn replica(&self) -> Option<&Replica> {
        self.replica.as_ref()
    }

    /// Whether the node is down.
    #[must_use]
    pub fn is_down(&self) -> bool {
        self.replica.is_none()
    }

    /// When the node's next fsync completes.
    #[must_use]
    pub fn fsync_due(&self) -> Option<u64> {
        self.replica.as_ref().and(self.disk.fsync_due())
    }

    /// A message arrives.
    pub fn receive(&mut self, from: Endpoint, message: Message, ctx: &mut Ctx<'_>) {
        let Some(replica) = self.replica.as_mut() else {
            return;
        };
        let now = ctx.now_ms;
        let result = match message {
            Message::Push(push) => replica.on_push(push, now),
            Message::PushAck(ack) => replica.on_push_ack(&ack, now),
            Message::Query(query) => replica.on_query(&query),
            Message::Metadata {
                leader,
                epoch,
                replicas,
            } => {
                self.known_leader = leader;
                self.on_metadata(leader, epoch, &replicas, ctx);
                return;
            }
            Message::Append {
                client,
                request,
                records,
                payload,
            } => {
                self.on_append(client, request, records, payload, ctx);
                return;
            }
            Message::Answer(_)
            | Message::Heartbeat { .. }
            | Message::AppendOk { .. }
            | Message::NotLeader { .. } => {
                panic!("{from:?} sent a node a message for the controller or a client")
            }
        };
        self.after_call(result, ctx);
    }

    fn after_call(&mut self, result: Result<Vec<Action>, ReplicationError>, ctx: &mut Ctx<'_>) {
        match result {
            Ok(actions) => self.apply(actions, ctx),
            Err(error) => self.refused(&error, ctx),
        }
    }

    /// A refused call: expected ones (stale metadata) are traced; one that
    /// reveals two leaders in an epoch is a violation.
    fn refused(&mut self, error: &ReplicationError, ctx: &mut Ctx<'_>) {
        if matches!(error, ReplicationError::AlreadyLed { .. }) {
            ctx.stats.already_led += 1;
        }
        ctx.trace
            .log(ctx.now_ms, || format!("{}: refused: {error}", self.id));
        if matches!(error, ReplicationError::ConflictingLeader { .. }) {
            ctx.checker
                .report(format!("{:?}: {error}", self.incarnation()));
        }
    }

    fn on_metadata(
        &mut self,
        leader: Option<ReplicaId>,
        epoch: LeaderEpoch,
        replicas: &[ReplicaId],
        ctx: &mut Ctx<'_>,
    ) {
        let Some(leader) = leader else {
            return;
        };
        let Some(replica) = self.replica.as_mut() else {
            return;
        };
        let now = ctx.now_ms;
        if leader == self.id {
            let already =
                matches!(replica.role(), RoleView::Leader { epoch: led, .. } if led == epoch);
            let result = replica.become_leader(epoch, replicas, now);
            if result.is_ok() && !already {
                ctx.stats.leaderships += 1;
                ctx.trace
                    .log(now, || format!("{}: leads epoch {epoch}", self.id));
                ctx.checker.on_leader(self.incarnation(), epoch, &self.disk);
            }
            self.after_call(result, ctx);
        } else {
            let result = replica.become_follower(epoch, leader, now);
            // Stale metadata (an epoch below the fence) is expected.
            if !matches!(result, Err(ReplicationError::Fenced { .. })) {
                self.after_call(result, ctx);
            }
        }
    }

    fn on_append(
        &mut self,
        client: u32,
        request: u64,
        records: u64,
        payload: Bytes,
        ctx: &mut Ctx<'_>,
    ) {
        let Some(replica) = self.replica.as_mut() else {
            return;
        };
        let RoleView::Leader {
            epoch,
            accepting_writes: true,
        } = replica.role()
        else {
            let hint = self.known_leader;
            ctx.network.send(
                ctx.now_ms,
                Endpoint::Node(self.id),
                Endpoint::Client(client),
                Message::NotLeader { request, hint },
            );
            return;
        };
        let base = self.disk.log_end();
        let batch = Batch {
            base,
            last: base.plus(records - 1),
            epoch,
            bytes: payload,
        };
        self.disk.append(batch.clone());
        replica.on_local_append(batch.meta());
        self.pending.push(Pending {
            client,
            request,
            batch,
        });
        let actions = replica.poll_sends(ctx.now_ms);
        self.start_fsync(ctx);
        self.apply(actions, ctx);
    }

    /// Timers: restart when due; the replica's tick; the heartbeat to the
    /// controller; now and then, retention.
    pub fn tick(&mut self, ctx: &mut Ctx<'_>, retention_per_million: u64) {
        if self.replica.is_none() {
            if self.restart_at_ms.is_some_and(|at| at <= ctx.now_ms) {
                self.restart(ctx);
            }
            return;
        }
        if let Some(replica) = self.replica.as_mut() {
            let actions = replica.tick(ctx.now_ms);
            self.apply(actions, ctx);
        }
        if ctx.now_ms >= self.last_heartbeat_ms + HEARTBEAT_MS
            && let Some(replica) = &self.replica
        {
            self.last_heartbeat_ms = ctx.now_ms;
            let role = replica.role();
            ctx.network.send(
                ctx.now_ms,
                Endpoint::Node(self.id),
                Endpoint::Controller,
                Message::Heartbeat {
                    node: self.id,
                    role,
                },
            );
        }
        if ctx.rng.chance(retention_per_million) {
            self.retain(ctx);
        }
    }

    /// Deletes a random committed, durable prefix.
    fn retain(&mut self, ctx: &mut Ctx<'_>) {
        let Some(replica) = self.replica.as_mut() else {
            return;
        };
        let limit = replica.high_watermark().min(replica.durable_end());
        let candidates: Vec<Offset> = self
            .disk
            .batches()
            .iter()
            .map(Batch::end)
            .take_while(|end| *end <= limit)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let pick = candidates[ctx.rng.below(candidates.len() as u64) as usize];
        self.disk.delete_before(pick);
        ctx.stats.retentions += 1;
        let actions = replica.advance_log_start(pick);
        ctx.trace
            .log(ctx.now_ms, || format!("{}: retention to {pick}", self.id));
        self.apply(actions, ctx);
    }

    /// Completes a due fsync and tells the replica.
    pub fn complete_fsync(&mut self, ctx: &mut Ctx<'_>) {
        if self.replica.is_none() {
            return;
        }
        if let Some(durable_end) = self.disk.complete_fsync(ctx.now_ms)
            && let Some(replica) = self.replica.as_mut()
        {
            let actions = replica.on_local_durable(durable_end);
            self.apply(actions, ctx);
        }
        self.start_fsync(ctx);
    }

    fn start_fsync(&mut self, ctx: &mut Ctx<'_>) {
        let (low, high) = ctx.fsync_ms;
        let delay = ctx.rng.between(low, high);
        self.disk.start_fsync(ctx.now_ms, delay);
    }

    /// Crashes the node: only durable data survives; it restarts at
    /// `restart_at_ms`.
    pub fn crash(&mut self, restart_at_ms: u64, ctx: &mut Ctx<'_>) {
        if self.replica.take().is_none() {
            return;
        }
        ctx.trace.log(ctx.now_ms, || {
            format!(
                "{}: crash (durable end {})",
                self.id,
                self.disk.durable_end()
            )
        });
        self.disk.crash();
        self.pending.clear();
        self.restart_at_ms = Some(restart_at_ms);
        ctx.removed_data = Some("a crash");
    }

    /// Restarts from the disk: decode the metadata, recover the replica.
    pub fn restart(&mut self, ctx: &mut Ctx<'_>) {
        self.restart_at_ms = None;
        self.incarnation += 1;
        ctx.stats.restarts += 1;
        ctx.checker.forget_incarnation(self.incarnation());
        let meta = match self.disk.meta_bytes().map(ReplicaMeta::decode) {
            None => ReplicaMeta::new(),
            Some(Ok(meta)) => meta,
            Some(Err(error)) => {
                ctx.checker.report(format!(
                    "{}: persisted metadata unreadable: {error}",
                    self.id
                ));
                return;
            }
        };
        let log = RecoveredLog {
            log_start: self.disk.log_start(),
            log_end: self.disk.log_end(),
            last_epoch: self.disk.batches().last().map(|batch| batch.epoch),
        };
        ctx.trace.log(ctx.now_ms, || {
            format!("{}: restart, {log:?}, fence {}", self.id, meta.fenced_epoch)
        });
        match Replica::recover(self.id, self.partition, self.config, meta, log) {
            Ok((replica, actions)) => {
                self.replica = Some(replica);
                self.apply(actions, ctx);
            }
            Err(error) => ctx
                .checker
                .report(format!("{}: recovery refused: {error}", self.id)),
        }
    }

    /// Carries out actions in order; actions produced on the way (the
    /// marker's append) run after them.
    fn apply(&mut self, actions: Vec<Action>, ctx: &mut Ctx<'_>) {
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            let Some(replica) = self.replica.as_mut() else {
                return;
            };
            match action {
                Action::Persist(meta) => self.disk.persist(&meta),
                Action::AppendMarker { epoch } => {
                    let base = self.disk.log_end();
                    let marker = Batch {
                        base,
                        last: base,
                        epoch,
                        bytes: Bytes::from(format!("marker {epoch} by {}", self.id)),
                    };
                    self.disk.append(marker);
                    replica.on_local_append(BatchMeta {
                        base,
                        last: base,
                        epoch,
                    });
                    self.start_fsync(ctx);
                    queue.extend(self.replica_mut().poll_sends(ctx.now_ms));
                }
                Action::SendPush {
                    to,
                    mut push,
                    max_bytes,
                } => {
                    push.batches = self.disk.read(push.start, max_bytes);
                    replica.on_push_sent(to, push.end());
                    ctx.network.send(
                        ctx.now_ms,
                        Endpoint::Node(self.id),
                        Endpoint::Node(to),
                        Message::Push(push),
                    );
                }
                Action::Append { batches } => {
                    for batch in batches {
                        self.disk.append(batch);
                    }
                    self.start_fsync(ctx);
                }
                Action::Truncate { to } => {
                    ctx.trace
                        .log(ctx.now_ms, || format!("{}: truncate to {to}", self.id));
                    self.disk.truncate(to);
                    ctx.stats.truncations += 1;
                    ctx.removed_data = Some("a truncation");
                }
                Action::Reset { log_start } => {
                    ctx.trace
                        .log(ctx.now_ms, || format!("{}: reset to {log_start}", self.id));
                    self.disk.reset(log_start);
                    ctx.stats.resets += 1;
                    ctx.removed_data = Some("a reset");
                }
                Action::SendAck { to, ack } => {
                    if let PushResult::Mismatch {
                        last_epoch,
                        log_end,
                    } = ack.result
                    {
                        ctx.stats.mismatches += 1;
                        ctx.trace.log(ctx.now_ms, || {
                            format!(
                                "{}: mismatch to {to} in epoch {}: last epoch {last_epoch:?}, \
                                 log end {log_end}",
                                self.id, ack.epoch
                            )
                        });
                    }
                    ctx.network.send(
                        ctx.now_ms,
                        Endpoint::Node(self.id),
                        Endpoint::Node(to),
                        Message::PushAck(ack),
                    );
                }
                Action::SendAnswer { answer } => ctx.network.send(
                    ctx.now_ms,
                    Endpoint::Node(self.id),
                    Endpoint::Controller,
                    Message::Answer(answer),
                ),
                Action::HighWatermark(high_watermark) => {
                    self.on_high_watermark(high_watermark, ctx);
                }
                Action::StepDown { epoch } => {
                    ctx.trace.log(ctx.now_ms, || {
                        format!("{}: steps down from {epoch}", self.id)
                    });
                    self.fail_pending(ctx);
                }
            }
        }
    }

    fn replica_mut(&mut self) -> &mut Replica {
        match self.replica.as_mut() {
            Some(replica) => replica,
            None => panic!("node {} is down", self.id),
        }
    }

    fn on_high_watermark(&mut self, high_watermark: Offset, ctx: &mut Ctx<'_>) {
        let leading = match self.replica.as_ref().map(Replica::role) {
            Some(RoleView::Leader { epoch, .. }) => Some(epoch),
            _ => None,
        };
        ctx.checker
            .on_high_watermark(self.incarnation(), high_watermark, &self.disk, leading);
        if leading.is_none() {
            return;
        }
        let committed = self
            .pending
            .iter()
            .take_while(|pending| pending.batch.last < high_watermark)
            .count();
        for pending in self.pending.drain(..committed) {
            ctx.checker
                .on_acknowledged((self.id, self.incarnation), &pending.batch);
            ctx.network.send(
                ctx.now_ms,
                Endpoint::Node(self.id),
                Endpoint::Client(pending.client),
                Message::AppendOk {
                    request: pending.request,
                    offset: pending.batch.base,
                },
            );
        }
    }

    fn fail_pending(&mut self, ctx: &mut Ctx<'_>) {
        for pending in self.pending.drain(..) {
            ctx.network.send(
                ctx.now_ms,
                Endpoint::Node(self.id),
                Endpoint::Client(pending.client),
                Message::NotLeader {
                    request: pending.request,
                    hint: None,
                },
            );
        }
    }

    /// Checks that the state machine's view of the log is the disk's, and
    /// that a leader whose marker committed covers every acknowledged
    /// record.
    pub fn check(&self, checker: &mut Checker) {
        let Some(replica) = &self.replica else {
            return;
        };
        let view = (
            replica.log_start(),
            replica.log_end(),
            replica.durable_end(),
        );
        let disk = (
            self.disk.log_start(),
            self.disk.log_end(),
            self.disk.durable_end(),
        );
        if view != disk {
            checker.report(format!(
                "{}: replica sees (start, end, durable) {view:?}, disk has {disk:?}",
                self.id
            ));
        }
        if let RoleView::Leader { epoch, .. } = replica.role()
            && let Some(epoch_start) = replica.meta().history.start_of(epoch)
        {
            checker.check_leader_covers_acknowledged(
                self.incarnation(),
                epoch,
                replica.high_watermark(),
                epoch_start,
            );
        }
    }
}
