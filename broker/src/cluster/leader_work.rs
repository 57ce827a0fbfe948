//! What the controller leader does besides Raft, on any executor: it keeps
//! the brokers' sessions (fences a broker silent past the session timeout,
//! unfences a fenced one whose heartbeat shows it caught up), runs the
//! partition elections due each tick, and starts the moves that
//! decommission brokers.
//!
//! The broker's [`super::controller_service::ControllerService`] and the
//! simulator's controller processes both drive their leaders through
//! [`LeaderWork`], over a [`LeaderHost`] each implements, so the simulator
//! runs this logic exactly as production does. The books themselves are
//! pure ([`SessionBook`], [`ElectionBook`]); this module only decides when
//! to consult them and spawns the proposals and rounds they call for.

use std::cell::{Cell, Ref, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_controller::{Command, ControllerNode, MetadataState, NodeId, TopicId, decommission};

use super::election::{ElectionBook, ElectionTimings, RoundHost, run_round};
use super::in_sync::MoveReport;
use super::sessions::{Heartbeat, HeartbeatRefusal, SessionBook};
use crate::executor::{Executor, spawn};

/// A controller process as its leader work sees it.
pub trait LeaderHost: RoundHost + 'static {
    /// Reads the controller node.
    fn with_node<R>(&self, read: impl FnOnce(&ControllerNode) -> R) -> R;

    /// Where the leader's tasks run and what time it is.
    fn executor(&self) -> &dyn Executor;

    /// This process's leader work.
    fn leader_work(&self) -> &LeaderWork;

    /// Wall-clock time in milliseconds since the Unix epoch, to stamp the
    /// moves this leader starts.
    fn wall_clock_ms(&self) -> i64;

    /// What the leaders of moving partitions reported (see
    /// `InSyncBook::move_reports`); nothing by default.
    fn move_reports(
        &self,
        state: &MetadataState,
        now: Instant,
    ) -> BTreeMap<(TopicId, u32), MoveReport> {
        let _ = (state, now);
        BTreeMap::new()
    }
}

/// The leader's session and election bookkeeping.
#[derive(Debug)]
pub struct LeaderWork {
    sessions: RefCell<SessionBook>,
    elections: RefCell<ElectionBook>,
    /// Decommission moves are being proposed: the next tick waits for
    /// them rather than planning the same moves again.
    proposing_moves: Cell<bool>,
}

impl LeaderWork {
    /// Sessions that expire after `session_timeout` of silence; elections
    /// retried on `timings`.
    #[must_use]
    pub fn new(session_timeout: Duration, timings: ElectionTimings) -> LeaderWork {
        LeaderWork {
            sessions: RefCell::new(SessionBook::new(session_timeout)),
            elections: RefCell::new(ElectionBook::with_timings(timings)),
            proposing_moves: Cell::new(false),
        }
    }

    /// The brokers' sessions, to read.
    pub fn sessions(&self) -> Ref<'_, SessionBook> {
        self.sessions.borrow()
    }

    /// A registration of `node` applied at metadata `version`: its session
    /// starts now.
    pub fn registered<H: LeaderHost>(host: &H, node: NodeId, version: u64) {
        let now = host.executor().now();
        host.leader_work()
            .sessions
            .borrow_mut()
            .registered(node, version, now);
    }

    /// This process no longer leads: the next leadership starts every
    /// session over.
    pub fn stop_leading(&self) {
        self.sessions.borrow_mut().stop_leading();
    }

    /// A heartbeat from `node` (process `incarnation`, at metadata
    /// `version`) reached the leader; proposes its unfence when it caught
    /// up.
    ///
    /// # Errors
    /// [`HeartbeatRefusal`] when the broker must register again.
    pub fn heartbeat<H: LeaderHost>(
        host: &Rc<H>,
        node: NodeId,
        incarnation: u64,
        version: u64,
    ) -> Result<Heartbeat, HeartbeatRefusal> {
        let now = host.executor().now();
        let heartbeat = host.with_node(|controller| {
            host.leader_work().sessions.borrow_mut().heartbeat(
                controller.state(),
                node,
                incarnation,
                version,
                now,
            )
        })?;
        if let Some(command) = heartbeat.unfence.clone() {
            let task = host.clone();
            spawn(host.executor(), async move {
                if let Err(error) = task.propose(command).await {
                    tracing::debug!(%node, %error, "unfence not applied; the next heartbeat retries");
                }
                task.leader_work().sessions.borrow_mut().settled(node);
            });
        }
        Ok(heartbeat)
    }

    /// The leader's tick: fences the brokers whose session expired,
    /// starts the election rounds due, then the moves off decommissioning
    /// brokers; returns how many rounds it started.
    pub fn tick<H: LeaderHost>(host: &Rc<H>) -> usize {
        if !host.with_node(ControllerNode::is_leader) {
            return 0;
        }
        LeaderWork::fence_expired(host);
        let rounds = LeaderWork::run_elections(host);
        LeaderWork::start_decommission_moves(host);
        rounds
    }

    /// Proposes the moves [`decommission::next_moves`] asks for, one after
    /// another on a task; none while the previous batch is still being
    /// proposed. A refused move (the partition changed meanwhile) is only
    /// logged: the next tick plans again from the new state.
    pub fn start_decommission_moves<H: LeaderHost>(host: &Rc<H>) {
        if host.leader_work().proposing_moves.get() {
            return;
        }
        let now_ms = host.wall_clock_ms();
        let moves = host.with_node(|controller| {
            if !controller.is_leader() || controller.state().version() < controller.commit_index() {
                return Vec::new();
            }
            decommission::next_moves(controller.state(), now_ms)
        });
        if moves.is_empty() {
            return;
        }
        host.leader_work().proposing_moves.set(true);
        let task = host.clone();
        spawn(host.executor(), async move {
            for command in moves {
                if let Command::StartReassignment {
                    topic_id,
                    partition,
                    target,
                    ..
                } = &command
                {
                    let (topic_id, partition) = (topic_id.0, *partition);
                    let target: Vec<u64> = target.iter().map(|replica| replica.node.0).collect();
                    match task.propose(command).await {
                        Ok(()) => {
                            tracing::info!(
                                topic_id,
                                partition,
                                ?target,
                                "decommission: move started"
                            );
                        }
                        Err(error) => {
                            tracing::debug!(topic_id, partition, %error, "decommission: move not started; the next tick plans again");
                        }
                    }
                }
            }
            task.leader_work().proposing_moves.set(false);
        });
    }

    /// `node` (process `incarnation`) is shutting down: fences it now, so
    /// that its leaderships are elected elsewhere while it still serves as
    /// a follower, and keeps it fenced (see [`SessionBook::leave`]).
    ///
    /// # Errors
    /// [`HeartbeatRefusal`] when `node` is not registered with that
    /// incarnation.
    pub fn leave<H: LeaderHost>(
        host: &Rc<H>,
        node: NodeId,
        incarnation: u64,
    ) -> Result<(), HeartbeatRefusal> {
        let fence = host.with_node(|controller| {
            host.leader_work()
                .sessions
                .borrow_mut()
                .leave(controller.state(), node, incarnation)
        })?;
        tracing::info!(%node, incarnation, "broker is shutting down: moving its leaderships");
        if let Some(command) = fence {
            LeaderWork::propose_fence(host, node, command);
        }
        Ok(())
    }

    /// Asks for the leadership of `partition` of `topic_id` to move to `to`
    /// (see [`ElectionBook::request_transfer`]) and starts the round now.
    pub fn request_transfer<H: LeaderHost>(
        host: &Rc<H>,
        topic_id: TopicId,
        partition: u32,
        to: NodeId,
    ) {
        let now = host.executor().now();
        host.leader_work()
            .elections
            .borrow_mut()
            .request_transfer(topic_id, partition, to, now);
        tracing::info!(topic_id = topic_id.0, partition, %to, "leadership transfer requested");
        LeaderWork::run_elections(host);
    }

    /// The broker a transfer of the partition is asked to, while the
    /// request is pending.
    #[must_use]
    pub fn transfer_pending(&self, topic_id: TopicId, partition: u32) -> Option<NodeId> {
        self.elections.borrow().transfer(topic_id, partition)
    }

    /// How long a transfer request waits for a round.
    #[must_use]
    pub fn transfer_timeout(&self) -> Duration {
        self.elections.borrow().timings().transfer_timeout
    }

    fn fence_expired<H: LeaderHost>(host: &Rc<H>) {
        let now = host.executor().now();
        let fences = host.with_node(|controller| {
            host.leader_work()
                .sessions
                .borrow_mut()
                .expired(controller.state(), now)
        });
        for command in fences {
            let Command::FenceBroker { node } = command else {
                continue;
            };
            if !host.leader_work().sessions().is_leaving(node) {
                let timeout = host.leader_work().sessions().timeout();
                tracing::warn!(%node, ?timeout, "broker session expired: fencing it");
            }
            LeaderWork::propose_fence(host, node, command);
        }
    }

    fn propose_fence<H: LeaderHost>(host: &Rc<H>, node: NodeId, command: Command) {
        let task = host.clone();
        spawn(host.executor(), async move {
            let fenced = task.propose(command).await;
            task.leader_work().sessions.borrow_mut().settled(node);
            match fenced {
                // Its leaderships move now rather than at the next tick.
                Ok(()) => {
                    LeaderWork::run_elections(&task);
                }
                Err(error) => {
                    tracing::debug!(%node, %error, "fence not applied; the next tick retries");
                }
            }
        });
    }

    /// Starts the election rounds due now, each on its own task; returns
    /// how many.
    pub fn run_elections<H: LeaderHost>(host: &Rc<H>) -> usize {
        let now = host.executor().now();
        let planned = host.with_node(|controller| {
            // A new leader may still be applying what its predecessor
            // committed; deciding on that older state would only waste
            // rounds (the epoch checks keep them harmless).
            if !controller.is_leader() || controller.state().version() < controller.commit_index() {
                return Vec::new();
            }
            let mut book = host.leader_work().elections.borrow_mut();
            if book.follow_term(controller.term()) {
                tracing::debug!(
                    term = controller.term(),
                    "controller leader: election bookkeeping reset"
                );
            }
            let reports = host.move_reports(controller.state(), now);
            book.plan_with_moves(controller.state(), now, &reports)
        });
        let started = planned.len();
        for due in planned {
            tracing::debug!(
                topic_id = due.topic_id.0,
                partition = due.partition,
                epoch = %due.new_epoch,
                reason = %due.reason,
                "election round"
            );
            let task = host.clone();
            spawn(host.executor(), async move {
                let outcome = run_round(&*task, &due).await;
                tracing::debug!(epoch = %due.new_epoch, ?outcome, "election round finished");
                task.leader_work()
                    .elections
                    .borrow_mut()
                    .finish(&due, outcome);
            });
        }
        started
    }
}
