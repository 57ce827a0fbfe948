//! The controller: a Raft group of one or three controller processes, each
//! running the production [`ControllerNode`] (tikv's raft-rs over the
//! controller crate's log, applying commands to its [`MetadataState`]) on
//! its own simulated disk, with its Raft messages crossing the faulty
//! network. raft-rs is deterministic given its inputs, and the node seeds
//! its own election jitter, so a seed still replays exactly.
//!
//! Each process is a shell like the broker's `ControllerService`: it drives
//! the Ready loop in the crate's order (records durable, then messages,
//! then what committed), and while it leads it runs the broker's own
//! leader work ([`LeaderWork`]: broker sessions, fencing and unfencing,
//! election rounds with their queries in parallel, `decide`, `resolve` and
//! the moved-epoch check) over this module's [`LeaderHost`]. A proposal waits
//! for the node to resolve it: applied, refused, or lost in a leader
//! change. Brokers send their registrations, heartbeats and resignations to
//! every controller process; only the leader acts on them (in production a
//! follower answers `NOT_CONTROLLER` with a hint). Every process publishes
//! its committed metadata to the brokers and clients, standing in for the
//! metadata long-poll; they keep the highest version they have seen.
//!
//! Processes crash (unsynced bytes of their log are lost) and restart
//! through the crate's recovery, and partitions cut them off from each
//! other and from brokers. [`History`] checks Raft's promises on every
//! Ready and after every step: one leader per term, the same command at
//! every index on every process, nothing applied beyond the commit index,
//! the metadata's own invariants, and no process halting.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_broker::cluster::election::{DueElection, ElectionTimings, QueryTarget, RoundHost};
use corelog_broker::cluster::in_sync::{InSyncBook, MoveReport};
use corelog_broker::cluster::leader_work::{LeaderHost, LeaderWork};
use corelog_broker::cluster::ready_loop::{ReadyHost, handle_readies};
use corelog_broker::executor::Executor;
use corelog_controller::decommission::Decommission;
use corelog_controller::durable::{self, HardState, RecoveredLog, SnapshotRecord};
use corelog_controller::{
    Command, ControllerConfig, ControllerNode, ControllerReady, LeaderEpoch, MetadataState, NodeId,
    OutboundMessage, ProposalId, ProposalOutcome, ProposeError, Replica, Resolved, Role, ShardId,
    TopicId,
};
use corelog_replication::QueryAnswer;
use corelog_storage::memory_disk::MemoryDisk;
use corelog_wire::rng::SplitMix64;
use futures::channel::oneshot;
use futures::future::{Either, LocalBoxFuture, select};

use crate::disk::{SimDisk, SyncDelay};
use crate::executor::Owner;
use crate::network::{Answer, Endpoint, Message, Published};
use crate::raft_log::RaftLog;
use crate::world::{Report, World};

/// The topic simulated.
pub const TOPIC: TopicId = TopicId(0);

/// Task owners of controller processes: `(OWNER_BASE + id, incarnation)`,
/// apart from every broker node's.
const OWNER_BASE: u32 = 1_000;

/// The controller's settings, drawn per seed (timings scaled down from
/// production's so that a run of a few seconds sees many failovers).
#[derive(Clone, Copy, Debug)]
pub struct ControllerSettings {
    /// Controller processes (Raft voters): 1 or 3.
    pub voters: u32,
    /// A broker silent this long is fenced.
    pub session_timeout: Duration,
    /// The election bookkeeping's intervals.
    pub elections: ElectionTimings,
    /// A replica query unanswered this long counts as no answer.
    pub query_timeout: Duration,
    /// One Raft tick; the leader's session and election work runs on it.
    pub tick_ms: u64,
    /// Raft ticks without a leader before an election (plus jitter).
    pub election_tick: usize,
    /// Raft ticks between the leader's heartbeats.
    pub heartbeat_tick: usize,
    /// Applied entries between snapshots (small: runs take, install and
    /// compact snapshots).
    pub snapshot_interval_entries: u64,
    /// How long the controller log's fdatasyncs take, milliseconds.
    pub sync_ms: (u64, u64),
    /// A proposal not resolved in this long is given up (its caller
    /// retries at the next tick).
    pub proposal_timeout: Duration,
    /// A Raft message not acknowledged in this long is reported
    /// unreachable.
    pub send_timeout: Duration,
    /// Metadata is republished this often.
    pub broadcast_ms: u64,
}

/// The endpoint of controller process `id`.
#[must_use]
pub fn endpoint(id: u32) -> Endpoint {
    Endpoint::Controller(id)
}

/// Raft's promises, as the processes' Readies show them, and what breaks
/// them.
#[derive(Debug, Default)]
pub struct History {
    /// The command applied at each index, and its term.
    applied: BTreeMap<u64, (u64, Command)>,
    /// The metadata as the commands applied so far make it, in index
    /// order (`None` once an index was first seen out of order).
    shadow: Option<MetadataState>,
    /// The leader of each term.
    leaders: BTreeMap<u64, u32>,
    /// Violations seen, for the checker.
    violations: Vec<String>,
    /// Leader changes seen (statistics).
    pub terms_led: u64,
}

impl History {
    /// What process `id`'s Ready says: its leadership and what it applied.
    fn observe(&mut self, id: u32, ready: &ControllerReady) {
        if ready.role == Role::Leader {
            match self.leaders.get(&ready.term) {
                Some(leader) if *leader != id => self.violations.push(format!(
                    "controller: two leaders in term {}: {leader} and {id}",
                    ready.term
                )),
                Some(_) => {}
                None => {
                    self.leaders.insert(ready.term, id);
                    self.terms_led += 1;
                }
            }
        }
        for committed in &ready.committed {
            let seen = (committed.term, committed.command.clone());
            match self.applied.get(&committed.index) {
                Some(first) if *first != seen => self.violations.push(format!(
                    "controller: process {id} applied {:?} (term {}) at index {}, where \
                     another applied {:?} (term {})",
                    committed.command, committed.term, committed.index, first.1, first.0
                )),
                Some(_) => {}
                None => {
                    self.applied.insert(committed.index, seen);
                    self.replay(committed.index, &committed.command);
                }
            }
        }
    }

    /// Applies the command first seen at `index` to the shadow metadata
    /// and checks that the partition's replica set, if it changed, changed
    /// by one node: a move never swaps a majority at once (two disjoint
    /// majorities could commit).
    fn replay(&mut self, index: u64, command: &Command) {
        let Some(shadow) = &mut self.shadow else {
            return;
        };
        // Indices of entries without a command (a new term's) are skipped.
        if index <= shadow.version() {
            self.shadow = None;
            return;
        }
        let nodes = |state: &MetadataState| -> Vec<NodeId> {
            let mut nodes: Vec<NodeId> = state
                .partition(TOPIC, 0)
                .map(|record| record.replicas.iter().map(|replica| replica.node).collect())
                .unwrap_or_default();
            nodes.sort_unstable();
            nodes
        };
        let before = nodes(shadow);
        // A refused command changes nothing, here as on every process.
        let _ = shadow.apply(index, command);
        let after = nodes(shadow);
        let changed = before.iter().filter(|node| !after.contains(node)).count()
            + after.iter().filter(|node| !before.contains(node)).count();
        if changed > 1 {
            self.violations.push(format!(
                "controller: index {index} changed the replica set from {before:?} to \
                 {after:?}, {changed} nodes at once ({command:?})"
            ));
        }
    }
}

/// One controller process's shell around its node, shared with its tasks.
struct Core {
    /// This core, for the tasks it spawns.
    me: std::rc::Weak<Core>,
    world: Rc<World>,
    settings: ControllerSettings,
    id: u32,
    owner: Owner,
    node: RefCell<ControllerNode>,
    /// Taken by the task handling Readies while it runs.
    log: RefCell<Option<RaftLog>>,
    /// A task is handling Readies.
    driving: Cell<bool>,
    /// Proposals of this process waiting for their outcome.
    waiting: RefCell<BTreeMap<ProposalId, oneshot::Sender<ProposalOutcome>>>,
    /// The broker's leader work: sessions and elections.
    leader_work: LeaderWork,
    /// The simulated executor, as the broker's code sees it.
    executor: Rc<dyn Executor>,
    history: Rc<RefCell<History>>,
    rounds: Rc<Cell<u64>>,
    /// Who hears the metadata publications.
    listeners: Rc<Vec<Endpoint>>,
    /// The leaders' reports of the replicas in sync.
    in_sync: RefCell<InSyncBook>,
}

/// A controller process: up (its core), opening, or down until a time.
struct Process {
    id: u32,
    disk: MemoryDisk,
    delay: Rc<SyncDelay>,
    incarnation: u64,
    /// Set by the opening task once the log is recovered.
    core: Rc<RefCell<Option<Rc<Core>>>>,
    down_until_ms: Option<u64>,
}

/// The controller group.
pub struct Controller {
    world: Rc<World>,
    settings: ControllerSettings,
    processes: BTreeMap<u32, Process>,
    /// The log every process starts from (the bootstrap snapshot).
    initial_log: Rc<Vec<u8>>,
    peers: Vec<NodeId>,
    seed: u64,
    history: Rc<RefCell<History>>,
    rounds: Rc<Cell<u64>>,
    listeners: Rc<Vec<Endpoint>>,
    last_tick_ms: u64,
    last_broadcast_ms: u64,
    /// The metadata version whose invariants were last checked, per process.
    checked_versions: RefCell<BTreeMap<u32, u64>>,
    /// Restarts of crashed processes (statistics).
    pub restarts: u64,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("published", &self.published())
            .field("leader", &self.leader())
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// A controller group whose metadata holds the brokers `nodes`
    /// (registered at incarnation 1, unfenced) and one topic with one
    /// partition replicated on all of them, preferred leader first, led by
    /// it at epoch 0 as a newly created topic is. The setup is applied
    /// through the state machine and given to every process as the
    /// snapshot its log starts from, as if the cluster had run before.
    ///
    /// # Panics
    /// If the state machine refuses the setup (a simulator bug).
    #[must_use]
    pub fn new(
        world: Rc<World>,
        settings: ControllerSettings,
        nodes: &[u32],
        replication_factor: usize,
        clients: &[u32],
        mut rng: SplitMix64,
    ) -> Controller {
        let state = initial_state(nodes, replication_factor);
        let peers: Vec<NodeId> = (1..=settings.voters)
            .map(|id| NodeId(u64::from(id)))
            .collect();
        let index = state.version();
        let initial_log = durable::encode_log(&RecoveredLog {
            snapshot: Some(SnapshotRecord {
                index,
                term: 1,
                voters: peers.clone(),
                resets_log: false,
                state: state.encode().into(),
            }),
            entries: Vec::new(),
            hard_state: HardState {
                term: 1,
                vote: 0,
                commit: index,
            },
        });
        let listeners: Vec<Endpoint> = nodes
            .iter()
            .map(|node| Endpoint::Node(*node))
            .chain(clients.iter().map(|client| Endpoint::Client(*client)))
            .collect();
        world.set_controllers((1..=settings.voters).map(endpoint).collect());
        let processes = (1..=settings.voters)
            .map(|id| {
                let process = Process {
                    id,
                    // Appends are small and unaligned, as through the
                    // broker's page-cache file.
                    disk: MemoryDisk::new(1, 1 << 40),
                    delay: SyncDelay::new(world.executor.clone(), rng.fork(), settings.sync_ms),
                    incarnation: 0,
                    core: Rc::new(RefCell::new(None)),
                    down_until_ms: Some(0),
                };
                (id, process)
            })
            .collect();
        Controller {
            world,
            settings,
            processes,
            initial_log: Rc::new(initial_log),
            peers,
            seed: rng.next_u64(),
            history: Rc::new(RefCell::new(History {
                shadow: Some(state.clone()),
                ..History::default()
            })),
            rounds: Rc::new(Cell::new(0)),
            listeners: Rc::new(listeners),
            last_tick_ms: 0,
            last_broadcast_ms: 0,
            checked_versions: RefCell::new(BTreeMap::new()),
            restarts: 0,
        }
    }

    /// The controller processes' ids.
    #[must_use]
    pub fn ids(&self) -> Vec<u32> {
        self.processes.keys().copied().collect()
    }

    /// Election rounds started (statistics).
    #[must_use]
    pub fn rounds(&self) -> u64 {
        self.rounds.get()
    }

    /// Terms that had a leader (statistics).
    #[must_use]
    pub fn terms_led(&self) -> u64 {
        self.history.borrow().terms_led
    }

    fn core(&self, id: u32) -> Option<Rc<Core>> {
        self.processes.get(&id)?.core.borrow().clone()
    }

    fn cores(&self) -> Vec<Rc<Core>> {
        self.processes
            .values()
            .filter_map(|process| process.core.borrow().clone())
            .collect()
    }

    /// The controller leader now, if one is up.
    #[must_use]
    pub fn leader(&self) -> Option<u32> {
        self.cores()
            .into_iter()
            .find(|core| core.node.borrow().is_leader())
            .map(|core| core.id)
    }

    /// An operator asks the controller leader to move the partition's
    /// leadership to `to` (`corelog partition elect-leader --to`); false
    /// when no process leads.
    pub fn request_transfer(&self, to: u32) -> bool {
        let Some(core) = self.cores().into_iter().find(|core| core.is_leader()) else {
            return false;
        };
        core.world
            .log(|| format!("controller {}: transfer to {to} requested", core.id));
        LeaderWork::request_transfer(&core, TOPIC, 0, NodeId(u64::from(to)));
        true
    }

    /// An operator puts `node` in maintenance or takes it out through the
    /// controller leader (`corelog cluster maintenance`); false when no
    /// process leads. A refusal (another node in maintenance) is logged.
    pub fn set_maintenance(&self, node: u32, enabled: bool) -> bool {
        let Some(core) = self.cores().into_iter().find(|core| core.is_leader()) else {
            return false;
        };
        let command = Command::SetBrokerMaintenance {
            node: NodeId(u64::from(node)),
            enabled,
        };
        let task = core.clone();
        core.spawn(async move {
            match task.propose_and_wait(command).await {
                Ok(()) => {
                    task.world
                        .log(|| format!("controller: {node} maintenance {enabled}"));
                    LeaderWork::run_elections(&task);
                }
                Err(error) => task.world.log(|| {
                    format!("controller: maintenance {enabled} of {node} refused: {error}")
                }),
            }
        });
        true
    }

    /// An operator decommissions `node` (`corelog cluster decommission`)
    /// or, with `max_moves` `None`, recommissions it, through the
    /// controller leader; false when no process leads. The leader's
    /// [`LeaderWork`] then starts the moves off it as the broker's does. A
    /// refusal (too few nodes would stay) is logged.
    pub fn set_decommission(&self, node: u32, max_moves: Option<u16>) -> bool {
        let Some(core) = self.cores().into_iter().find(|core| core.is_leader()) else {
            return false;
        };
        let command = Command::SetBrokerDecommission {
            node: NodeId(u64::from(node)),
            decommission: max_moves.map(|max_moves| Decommission {
                throttle_bytes_per_s: 0,
                max_moves,
            }),
        };
        let task = core.clone();
        core.spawn(async move {
            match task.propose_and_wait(command).await {
                Ok(()) => {
                    task.world
                        .log(|| format!("controller: {node} decommission {max_moves:?}"));
                    LeaderWork::start_decommission_moves(&task);
                    LeaderWork::run_elections(&task);
                }
                Err(error) => task.world.log(|| {
                    format!("controller: decommission {max_moves:?} of {node} refused: {error}")
                }),
            }
        });
        true
    }

    /// The node being decommissioned in the most advanced process's
    /// metadata, if any.
    #[must_use]
    pub fn decommissioning(&self) -> Option<u32> {
        self.cores()
            .iter()
            .map(|core| {
                let node = core.node.borrow();
                let state = node.state();
                let marked = state
                    .brokers()
                    .values()
                    .find(|broker| broker.decommission.is_some())
                    .map(|broker| broker.id);
                (state.version(), marked)
            })
            .max_by_key(|(version, _)| *version)
            .and_then(|(_, node)| node)
            .and_then(|node| u32::try_from(node.0).ok())
    }

    /// An operator starts moving the partition to `target` (`corelog
    /// partition reassign`) through the controller leader; false when no
    /// process leads. A refusal (a move in progress) is logged.
    pub fn start_reassignment(&self, target: &[u32], throttle_bytes_per_s: u64) -> bool {
        let Some(core) = self.cores().into_iter().find(|core| core.is_leader()) else {
            return false;
        };
        let command = Command::StartReassignment {
            topic_id: TOPIC,
            partition: 0,
            target: target
                .iter()
                .map(|node| Replica {
                    node: NodeId(u64::from(*node)),
                    shard: ShardId(0),
                })
                .collect(),
            throttle_bytes_per_s,
            started_at_ms: i64::try_from(core.world.now_ms()).unwrap_or(i64::MAX),
        };
        let target = target.to_vec();
        self.propose_then_elect(&core, command, format!("move to {target:?}"));
        true
    }

    /// An operator turns the partition's move back (`corelog partition
    /// reassign --cancel`); false when no process leads.
    pub fn cancel_reassignment(&self) -> bool {
        let Some(core) = self.cores().into_iter().find(|core| core.is_leader()) else {
            return false;
        };
        let command = Command::CancelReassignment {
            topic_id: TOPIC,
            partition: 0,
        };
        self.propose_then_elect(&core, command, "cancel of the move".to_owned());
        true
    }

    /// Proposes `command` through `core` and runs its elections once it
    /// applied (a move's first step is due at once), as the broker's
    /// controller service does.
    fn propose_then_elect(&self, core: &Rc<Core>, command: Command, what: String) {
        let task = core.clone();
        core.spawn(async move {
            match task.propose_and_wait(command).await {
                Ok(()) => {
                    task.world.log(|| format!("controller: {what} applied"));
                    LeaderWork::run_elections(&task);
                }
                Err(error) => task
                    .world
                    .log(|| format!("controller: {what} refused: {error}")),
            }
        });
    }

    /// The partition's move in the most advanced running process's
    /// metadata, with that metadata's version (`None` while no process
    /// runs): the move's start time and throttle, if one is in progress.
    #[must_use]
    pub fn move_view(&self) -> Option<(u64, Option<MoveView>)> {
        self.cores()
            .iter()
            .map(|core| {
                let node = core.node.borrow();
                let state = node.state();
                let moving = state
                    .partition(TOPIC, 0)
                    .and_then(|record| record.reassignment.as_ref())
                    .map(|moving| MoveView {
                        started_at_ms: moving.started_at_ms,
                        throttle_bytes_per_s: moving.throttle_bytes_per_s,
                    });
                (state.version(), moving)
            })
            .max_by_key(|(version, _)| *version)
    }

    /// The node in maintenance in the most advanced process's metadata.
    #[must_use]
    pub fn in_maintenance(&self) -> Option<u32> {
        self.cores()
            .iter()
            .map(|core| {
                let node = core.node.borrow();
                let state = node.state();
                (state.version(), state.broker_in_maintenance())
            })
            .max_by_key(|(version, _)| *version)
            .and_then(|(_, node)| node)
            .and_then(|node| u32::try_from(node.0).ok())
    }

    /// The partition's leadership as the most advanced process publishes it.
    #[must_use]
    pub fn published(&self) -> Option<Published> {
        self.cores()
            .iter()
            .map(|core| core.published())
            .max_by_key(|published| published.version)
    }

    /// Whether process `id` is down (crashed, not yet restarted).
    #[must_use]
    pub fn is_down(&self, id: u32) -> bool {
        self.processes
            .get(&id)
            .is_none_or(|process| process.down_until_ms.is_some())
    }

    /// A message arrives at process `to`.
    pub fn receive(&mut self, to: u32, from: Endpoint, message: Message) {
        if let Message::Answer { call, answer } = message {
            // Calls are the world's: a crashed caller's are gone already.
            self.world.answer(call, answer);
            return;
        }
        match self.core(to) {
            Some(core) => core.receive(from, message),
            None => self
                .world
                .log(|| format!("controller {to}: down, drops {message:?} from {from:?}")),
        }
    }

    /// Timers: restarts due, then on each Raft tick every process ticks
    /// (and the leader runs its session and election work); the periodic
    /// metadata publication.
    pub fn tick(&mut self) {
        let now_ms = self.world.now_ms();
        let due: Vec<u32> = self
            .processes
            .values()
            .filter(|process| process.down_until_ms.is_some_and(|at| at <= now_ms))
            .map(|process| process.id)
            .collect();
        for id in due {
            self.start(id);
        }
        if now_ms >= self.last_tick_ms + self.settings.tick_ms {
            self.last_tick_ms = now_ms;
            for core in self.cores() {
                core.tick();
            }
        }
        if now_ms >= self.last_broadcast_ms + self.settings.broadcast_ms {
            self.last_broadcast_ms = now_ms;
            for core in self.cores() {
                core.broadcast();
            }
        }
    }

    /// Power loss at process `id`: its tasks stop, its disk keeps only
    /// synced bytes; it restarts at `restart_at_ms`.
    pub fn crash(&mut self, id: u32, restart_at_ms: u64) {
        let Some(process) = self.processes.get_mut(&id) else {
            return;
        };
        if process.down_until_ms.is_some() {
            return;
        }
        self.world
            .executor
            .cancel((OWNER_BASE + id, process.incarnation));
        process.core.borrow_mut().take();
        process.disk.crash();
        process.down_until_ms = Some(restart_at_ms);
        self.world
            .log(|| format!("controller {id}: crash, restarting at {restart_at_ms}"));
    }

    /// Restarts every process that is down (the heal).
    pub fn restart_all(&mut self) {
        let down: Vec<u32> = self
            .processes
            .values()
            .filter(|process| process.down_until_ms.is_some())
            .map(|process| process.id)
            .collect();
        for id in down {
            self.start(id);
        }
    }

    /// Starts process `id` on its disk as it is: recovers the log, then
    /// opens the node from it.
    fn start(&mut self, id: u32) {
        let Some(process) = self.processes.get_mut(&id) else {
            return;
        };
        if process.incarnation > 0 {
            self.restarts += 1;
        }
        process.incarnation += 1;
        process.down_until_ms = None;
        let owner = (OWNER_BASE + id, process.incarnation);
        let disk = SimDisk::new(process.disk.clone(), process.delay.clone());
        let slot = process.core.clone();
        let initial = self.initial_log.clone();
        let world = self.world.clone();
        let settings = self.settings;
        let mut config =
            ControllerConfig::new(NodeId(u64::from(id)), self.peers.clone(), self.seed);
        // Each incarnation jitters its elections differently.
        config.seed ^= process.incarnation.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        config.election_tick = settings.election_tick;
        config.heartbeat_tick = settings.heartbeat_tick;
        config.snapshot_interval_entries = settings.snapshot_interval_entries;
        let history = self.history.clone();
        let rounds = self.rounds.clone();
        let listeners = self.listeners.clone();
        self.world.executor.spawn(owner, async move {
            let opened = RaftLog::open(disk, &initial)
                .await
                .and_then(|(log, recovered)| {
                    ControllerNode::new(config, recovered)
                        .map(|node| (log, node))
                        .map_err(|error| error.to_string())
                });
            let (log, node) = match opened {
                Ok(opened) => opened,
                Err(error) => {
                    world.report(Report::Violation(format!(
                        "controller {id}: does not restart: {error}"
                    )));
                    return;
                }
            };
            world.log(|| format!("controller {id}: up at version {}", node.state().version()));
            let executor = world.executor.for_owner(owner);
            let core = Rc::new_cyclic(|me| Core {
                me: me.clone(),
                world,
                settings,
                id,
                owner,
                node: RefCell::new(node),
                log: RefCell::new(Some(log)),
                driving: Cell::new(false),
                waiting: RefCell::new(BTreeMap::new()),
                leader_work: LeaderWork::new(settings.session_timeout, settings.elections),
                executor,
                history,
                rounds,
                listeners,
                // As the broker's controller keeps them: a session and a
                // bit.
                in_sync: RefCell::new(InSyncBook::new(settings.session_timeout * 2)),
            });
            *slot.borrow_mut() = Some(core.clone());
            // The restarted node replays what its log committed.
            core.kick();
        });
    }

    /// Raft's promises after a step, on every process that is up: nothing
    /// applied beyond the commit index, the metadata's invariants, no halt;
    /// plus what the Readies showed ([`History`]).
    ///
    /// # Errors
    /// The first violation.
    pub fn check(&self) -> Result<(), String> {
        if let Some(violation) = self.history.borrow_mut().violations.drain(..).next() {
            return Err(violation);
        }
        for core in self.cores() {
            let node = core.node.borrow();
            let id = core.id;
            if let Some(error) = node.halted() {
                return Err(format!("controller {id}: halted: {error}"));
            }
            let (applied, committed) = (node.state().version(), node.commit_index());
            if applied > committed {
                return Err(format!(
                    "controller {id}: applied up to index {applied}, beyond its commit index \
                     {committed}"
                ));
            }
            let checked = self.checked_versions.borrow_mut().insert(id, applied);
            if checked != Some(applied)
                && let Err(error) = node.state().check_invariants()
            {
                return Err(format!("controller {id}: metadata broken: {error}"));
            }
        }
        Ok(())
    }
}

/// The metadata the run starts from: `nodes` registered and unfenced, and
/// the topic on the first `replication_factor` of them.
fn initial_state(nodes: &[u32], replication_factor: usize) -> MetadataState {
    let mut state = MetadataState::default();
    let mut apply = |command: Command| {
        let index = state.version() + 1;
        if let Err(error) = state.apply(index, &command) {
            panic!("setup command {command:?} refused: {error}");
        }
    };
    for node in nodes {
        let node = NodeId(u64::from(*node));
        apply(Command::RegisterBroker {
            node,
            host: "sim".to_owned(),
            port: 1,
            rack: None,
            shard_count: 1,
            incarnation: 1,
        });
        apply(Command::UnfenceBroker {
            node,
            incarnation: 1,
        });
    }
    apply(Command::CreateTopic {
        name: "events".to_owned(),
        internal: false,
        // The nodes use segments and retention far below the smallest a
        // topic may set (a run holds kilobytes): the controller keeps the
        // defaults, which nothing here reads.
        config: BTreeMap::new(),
        assignments: vec![
            nodes
                .iter()
                .take(replication_factor)
                .map(|node| Replica {
                    node: NodeId(u64::from(*node)),
                    shard: ShardId(0),
                })
                .collect(),
        ],
        created_at_ms: 0,
        owner: None,
    });
    state
}

impl Core {
    fn endpoint(&self) -> Endpoint {
        endpoint(self.id)
    }

    fn shared(&self) -> Option<Rc<Core>> {
        self.me.upgrade()
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.world.executor.spawn(self.owner, task);
    }

    fn is_leader(&self) -> bool {
        self.node.borrow().is_leader()
    }

    fn published(&self) -> Published {
        let node = self.node.borrow();
        let state = node.state();
        let record = state.partition(TOPIC, 0);
        Published {
            version: state.version(),
            leader: record
                .and_then(|record| record.leader)
                .and_then(|node| u32::try_from(node.0).ok()),
            epoch: record.map_or(LeaderEpoch(0), |record| record.leader_epoch),
            replicas: record
                .map(|record| nodes_of(&record.replicas))
                .unwrap_or_default(),
            learners: record
                .and_then(|record| {
                    let moving = record.reassignment.as_ref()?;
                    Some(nodes_of(&moving.learners(&record.replicas)))
                })
                .unwrap_or_default(),
            learner_throttle_bytes_per_s: record
                .and_then(|record| record.reassignment.as_ref())
                .map_or(0, |moving| moving.throttle_bytes_per_s),
        }
    }

    fn broadcast(&self) {
        let published = self.published();
        for to in self.listeners.iter() {
            self.world
                .send(self.endpoint(), *to, Message::Metadata(published.clone()));
        }
    }

    /// A message for this process.
    fn receive(self: &Rc<Self>, from: Endpoint, message: Message) {
        match message {
            Message::Raft { call, bytes } => {
                let stepped = self.node.borrow_mut().step(&bytes);
                if let Err(error) = &stepped {
                    self.world
                        .log(|| format!("controller {}: raft message refused: {error}", self.id));
                }
                self.kick();
                self.world.send(
                    self.endpoint(),
                    from,
                    Message::Answer {
                        call,
                        answer: Answer::Raft {
                            accepted: stepped.is_ok(),
                        },
                    },
                );
            }
            _ if !self.is_leader() => {}
            Message::Register { node, incarnation } => self.register(from, node, incarnation),
            Message::Heartbeat {
                node,
                incarnation,
                metadata_version,
            } => self.heartbeat(from, node, incarnation, metadata_version),
            Message::Leave { node, incarnation } => {
                if let Err(refusal) = LeaderWork::leave(self, NodeId(u64::from(node)), incarnation)
                {
                    self.world
                        .log(|| format!("controller {}: leave refused: {refusal}", self.id));
                }
            }
            Message::Report {
                node,
                incarnation,
                led,
            } => {
                let now = self.executor.now();
                let recorded = self.in_sync.borrow_mut().record(
                    self.node.borrow().state(),
                    NodeId(u64::from(node)),
                    incarnation,
                    &[led],
                    now,
                );
                if let Err(refusal) = recorded {
                    self.world
                        .log(|| format!("controller {}: report refused: {refusal}", self.id));
                }
            }
            Message::Resign { node, epoch } => {
                let command = Command::ResignLeader {
                    topic_id: TOPIC,
                    partition: 0,
                    leader: NodeId(u64::from(node)),
                    epoch,
                };
                let task = self.clone();
                self.spawn(async move {
                    if let Err(error) = task.propose_and_wait(command).await {
                        task.world
                            .log(|| format!("controller: resignation of {node} refused: {error}"));
                    }
                });
            }
            other => self
                .world
                .log(|| format!("controller {}: ignores {other:?} from {from:?}", self.id)),
        }
    }

    fn register(self: &Rc<Self>, from: Endpoint, node: u32, incarnation: u64) {
        let command = Command::RegisterBroker {
            node: NodeId(u64::from(node)),
            host: "sim".to_owned(),
            port: 1,
            rack: None,
            shard_count: 1,
            incarnation,
        };
        let task = self.clone();
        self.spawn(async move {
            match task.propose_and_wait(command).await {
                Ok(()) => {
                    let version = task.node.borrow().state().version();
                    LeaderWork::registered(&*task, NodeId(u64::from(node)), version);
                    task.world
                        .send(task.endpoint(), from, Message::Registered { incarnation });
                }
                Err(error) => task
                    .world
                    .log(|| format!("controller: registration of {node} refused: {error}")),
            }
        });
    }

    fn heartbeat(self: &Rc<Self>, from: Endpoint, node: u32, incarnation: u64, version: u64) {
        let node_id = NodeId(u64::from(node));
        if let Err(refusal) = LeaderWork::heartbeat(self, node_id, incarnation, version) {
            self.world
                .log(|| format!("controller {}: heartbeat refused: {refusal}", self.id));
            self.world.send(
                self.endpoint(),
                from,
                Message::RegisterAgain { incarnation },
            );
        }
    }

    /// One Raft tick; the leader's session and election work.
    fn tick(self: &Rc<Self>) {
        self.node.borrow_mut().tick();
        self.kick();
        let started = LeaderWork::tick(self);
        self.rounds.set(self.rounds.get() + started as u64);
    }

    /// Makes sure a task handles the node's Readies.
    fn kick(&self) {
        let Some(core) = self.shared() else {
            return;
        };
        if self.driving.replace(true) {
            return;
        }
        self.spawn(async move {
            let log = core.log.borrow_mut().take();
            let Some(mut log) = log else {
                return;
            };
            let handled = handle_readies(&*core, &mut log).await;
            *core.log.borrow_mut() = Some(log);
            core.driving.set(false);
            if let Err(error) = handled {
                core.world.report(Report::Violation(format!(
                    "controller {}: stopped: {error}",
                    core.id
                )));
            }
        });
    }

    /// Sends a Raft message as a call: no answer in time is reported
    /// unreachable, and a snapshot's delivery is always reported.
    fn send_raft(&self, message: OutboundMessage) {
        let Ok(to) = u32::try_from(message.to.0) else {
            return;
        };
        let Some(core) = self.shared() else {
            return;
        };
        self.spawn(async move {
            let bytes = message.bytes;
            let answer = core
                .world
                .call(
                    core.endpoint(),
                    endpoint(to),
                    |call| Message::Raft { call, bytes },
                    core.settings.send_timeout,
                )
                .await;
            let delivered = matches!(answer, Some(Answer::Raft { accepted: true }));
            if delivered && !message.carries_snapshot {
                return;
            }
            {
                let mut node = core.node.borrow_mut();
                if !delivered {
                    node.report_unreachable(message.to);
                }
                if message.carries_snapshot {
                    node.report_snapshot(message.to, delivered);
                }
            }
            core.kick();
        });
    }

    /// Proposes `command` and waits until the node resolves it.
    async fn propose_and_wait(&self, command: Command) -> Result<(), String> {
        let deadline = self.world.now_ms() + self.settings.proposal_timeout.as_millis() as u64;
        let id = loop {
            let proposed = self.node.borrow_mut().propose(&command);
            match proposed {
                Ok(id) => break id,
                Err(ProposeError::ReadyInProgress) if self.world.now_ms() < deadline => {
                    self.world
                        .executor
                        .sleep(Duration::from_millis(self.settings.tick_ms))
                        .await;
                }
                Err(error) => return Err(error.to_string()),
            }
        };
        let (sender, receiver) = oneshot::channel();
        self.waiting.borrow_mut().insert(id, sender);
        self.kick();
        let timeout = self.world.executor.sleep(self.settings.proposal_timeout);
        let outcome = match select(receiver, Box::pin(timeout)).await {
            Either::Left((Ok(outcome), _)) => outcome,
            Either::Left((Err(_), _)) | Either::Right(_) => {
                self.waiting.borrow_mut().remove(&id);
                ProposalOutcome::Unknown
            }
        };
        match outcome {
            ProposalOutcome::Applied(outcome) => {
                self.world
                    .log(|| format!("controller {}: applied {command:?}: {outcome:?}", self.id));
                Ok(())
            }
            ProposalOutcome::Refused(error) => Err(error.to_string()),
            ProposalOutcome::Lost | ProposalOutcome::Unknown => {
                Err("lost in a leader change".to_owned())
            }
        }
    }
}

/// The Ready loop's shell: Raft messages as calls over the simulated
/// network, proposals answered, metadata published when it moved; every
/// Ready shown to the [`History`] first.
impl ReadyHost for Core {
    fn node(&self) -> &RefCell<ControllerNode> {
        &self.node
    }

    fn observe(&self, ready: &ControllerReady) {
        self.history.borrow_mut().observe(self.id, ready);
    }

    fn send(&self, message: OutboundMessage) {
        self.send_raft(message);
    }

    fn resolve(&self, resolved: Resolved) {
        if let Some(waiter) = self.waiting.borrow_mut().remove(&resolved.id) {
            let _answered = waiter.send(resolved.outcome);
        }
    }

    fn not_leading(&self) {
        self.leader_work.stop_leading();
    }

    fn advanced(&self, applied_moved: bool) {
        if applied_moved {
            self.broadcast();
        }
    }
}

impl LeaderHost for Core {
    fn with_node<R>(&self, read: impl FnOnce(&ControllerNode) -> R) -> R {
        read(&self.node.borrow())
    }

    fn executor(&self) -> &dyn Executor {
        &*self.executor
    }

    fn leader_work(&self) -> &LeaderWork {
        &self.leader_work
    }

    fn wall_clock_ms(&self) -> i64 {
        i64::try_from(self.world.now_ms()).unwrap_or(i64::MAX)
    }

    fn move_reports(
        &self,
        state: &MetadataState,
        now: Instant,
    ) -> BTreeMap<(TopicId, u32), MoveReport> {
        self.in_sync.borrow().move_reports(state, now)
    }
}

impl RoundHost for Core {
    fn query<'a>(
        &'a self,
        due: &'a DueElection,
        target: &'a QueryTarget,
    ) -> LocalBoxFuture<'a, Option<QueryAnswer>> {
        Box::pin(async move {
            let request = due.query_request();
            let answer = self
                .world
                .call(
                    self.endpoint(),
                    Endpoint::Node(target.replica.0),
                    |call| Message::Query { call, request },
                    self.settings.query_timeout,
                )
                .await;
            match answer {
                Some(Answer::Query(response)) => QueryAnswer::from_wire(
                    due.partition_id(),
                    due.new_epoch,
                    target.replica,
                    &response,
                )
                .ok(),
                _ => None,
            }
        })
    }

    fn current_epoch(&self, due: &DueElection) -> Option<LeaderEpoch> {
        if !self.is_leader() {
            return None;
        }
        self.node
            .borrow()
            .state()
            .partition(due.topic_id, due.partition)
            .map(|record| record.leader_epoch)
    }

    fn propose(&self, command: Command) -> LocalBoxFuture<'_, Result<(), String>> {
        Box::pin(self.propose_and_wait(command))
    }
}

/// A move of the partition in progress, as [`Controller::move_view`] sees
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveView {
    /// When it started: which move it is.
    pub started_at_ms: i64,
    /// Bytes a second each learner copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
}

/// Node ids of `replicas` as the nodes are numbered.
fn nodes_of(replicas: &[Replica]) -> Vec<u32> {
    replicas
        .iter()
        .filter_map(|replica| u32::try_from(replica.node.0).ok())
        .collect()
}
