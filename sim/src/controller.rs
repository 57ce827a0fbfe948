//! The controller, as the replicas see it, running the broker's own
//! controller logic: the metadata is the controller crate's
//! [`MetadataState`] (every change applied through its `apply`, with its
//! checks), broker sessions are the broker's [`SessionBook`], elections are
//! planned by its [`ElectionBook`] and run by its [`run_round`] (queries in
//! parallel, `decide`, `resolve`, the moved-epoch check), over the
//! simulated network.
//!
//! What is modelled rather than run: Raft. The controller is one process
//! whose proposals apply after a random commit delay and are never lost;
//! now and then its leadership "moves" (a new term: the election and
//! session bookkeeping start over, and rounds in flight are abandoned, as
//! they are on a real leader change), but the metadata itself is never
//! lost or forked. Publication is a broadcast of the partition's record on
//! the lossy network, periodically and after every change, standing in for
//! the brokers' metadata long-polls.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_broker::cluster::election::{
    AttemptOutcome, DueElection, ElectionBook, ElectionTimings, QueryTarget, RoundHost, run_round,
};
use corelog_broker::cluster::sessions::SessionBook;
use corelog_controller::{Command, LeaderEpoch, MetadataState, NodeId, Replica, ShardId, TopicId};
use corelog_replication::QueryAnswer;
use corelog_wire::rng::SplitMix64;
use futures::future::LocalBoxFuture;

use crate::network::{Answer, Endpoint, Message, Published};
use crate::world::{Report, World};

/// The topic simulated.
pub const TOPIC: TopicId = TopicId(0);

/// The controller's timings, drawn per seed (scaled down from
/// production's so that a run of a few seconds sees many failovers).
#[derive(Clone, Copy, Debug)]
pub struct ControllerSettings {
    /// A broker silent this long is fenced.
    pub session_timeout: Duration,
    /// The election bookkeeping's intervals.
    pub elections: ElectionTimings,
    /// A replica query unanswered this long counts as no answer.
    pub query_timeout: Duration,
    /// Raft commit delay range, milliseconds.
    pub commit_ms: (u64, u64),
    /// The leader ticks (sessions, elections) this often.
    pub tick_ms: u64,
    /// Metadata is rebroadcast this often.
    pub broadcast_ms: u64,
    /// Chance per tick that controller leadership moves, per million.
    pub failover_per_million: u64,
}

/// The controller's state, shared with its tasks.
struct Core {
    world: Rc<World>,
    settings: ControllerSettings,
    state: RefCell<MetadataState>,
    sessions: RefCell<SessionBook>,
    elections: RefCell<ElectionBook>,
    rng: RefCell<SplitMix64>,
    /// The modelled Raft term: its tasks are owned by `(0, term)`.
    term: std::cell::Cell<u64>,
    /// Where the simulated time started, as an instant.
    origin: Instant,
    /// Who hears the metadata broadcasts.
    listeners: Vec<Endpoint>,
}

/// The controller.
pub struct Controller {
    core: Rc<Core>,
    last_tick_ms: u64,
    last_broadcast_ms: u64,
    /// Election rounds started (statistics).
    pub rounds: u64,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("published", &self.published())
            .field("term", &self.core.term.get())
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// A controller whose metadata holds the brokers `nodes` (registered
    /// at incarnation 1, unfenced) and one topic with one partition
    /// replicated on all of them, preferred leader first, led by it at
    /// epoch 0 as a newly created topic is.
    ///
    /// # Panics
    /// If the state machine refuses the setup (a simulator bug).
    #[must_use]
    pub fn new(
        world: Rc<World>,
        settings: ControllerSettings,
        nodes: &[u32],
        clients: &[u32],
        rng: SplitMix64,
    ) -> Controller {
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
            // The nodes use segments and retention far below the smallest
            // a topic may set (a run holds kilobytes): the controller keeps
            // the defaults, which nothing here reads.
            config: std::collections::BTreeMap::new(),
            assignments: vec![
                nodes
                    .iter()
                    .map(|node| Replica {
                        node: NodeId(u64::from(*node)),
                        shard: ShardId(0),
                    })
                    .collect(),
            ],
            created_at_ms: 0,
            owner: None,
        });
        let listeners = nodes
            .iter()
            .map(|node| Endpoint::Node(*node))
            .chain(clients.iter().map(|client| Endpoint::Client(*client)))
            .collect();
        let origin = world.executor.instant();
        let core = Rc::new(Core {
            world,
            settings,
            state: RefCell::new(state),
            sessions: RefCell::new(SessionBook::new(settings.session_timeout)),
            elections: RefCell::new(ElectionBook::with_timings(settings.elections)),
            rng: RefCell::new(rng),
            term: std::cell::Cell::new(1),
            origin,
            listeners,
        });
        Controller {
            core,
            last_tick_ms: 0,
            last_broadcast_ms: 0,
            rounds: 0,
        }
    }

    /// The partition's leadership as published now.
    #[must_use]
    pub fn published(&self) -> Published {
        self.core.published()
    }

    /// A message arrives.
    pub fn receive(&mut self, from: Endpoint, message: Message) {
        let core = &self.core;
        match message {
            Message::Register { node, incarnation } => {
                let command = Command::RegisterBroker {
                    node: NodeId(u64::from(node)),
                    host: "sim".to_owned(),
                    port: 1,
                    rack: None,
                    shard_count: 1,
                    incarnation,
                };
                let task = core.clone();
                core.spawn(async move {
                    match task.propose_and_apply(command).await {
                        Ok(()) => {
                            let version = task.state.borrow().version();
                            task.sessions.borrow_mut().registered(
                                NodeId(u64::from(node)),
                                version,
                                task.instant(),
                            );
                            task.world.send(
                                Endpoint::Controller,
                                from,
                                Message::Registered { incarnation },
                            );
                        }
                        Err(error) => task
                            .world
                            .log(|| format!("controller: registration of {node} refused: {error}")),
                    }
                });
            }
            Message::Heartbeat {
                node,
                incarnation,
                metadata_version,
            } => {
                let node_id = NodeId(u64::from(node));
                let heartbeat = core.sessions.borrow_mut().heartbeat(
                    &core.state.borrow(),
                    node_id,
                    incarnation,
                    metadata_version,
                    core.instant(),
                );
                match heartbeat {
                    Ok(heartbeat) => {
                        if let Some(command) = heartbeat.unfence {
                            let task = core.clone();
                            core.spawn(async move {
                                if let Err(error) = task.propose_and_apply(command).await {
                                    task.world.log(|| {
                                        format!("controller: unfence of {node} refused: {error}")
                                    });
                                }
                                task.sessions.borrow_mut().settled(node_id);
                            });
                        }
                    }
                    Err(_) => core.world.send(
                        Endpoint::Controller,
                        from,
                        Message::RegisterAgain { incarnation },
                    ),
                }
            }
            Message::Resign { node, epoch } => {
                let command = Command::ResignLeader {
                    topic_id: TOPIC,
                    partition: 0,
                    leader: NodeId(u64::from(node)),
                    epoch,
                };
                let task = core.clone();
                core.spawn(async move {
                    if let Err(error) = task.propose_and_apply(command).await {
                        task.world
                            .log(|| format!("controller: resignation of {node} refused: {error}"));
                    }
                });
            }
            Message::Answer { call, answer } => core.world.answer(call, answer),
            other => core
                .world
                .log(|| format!("controller: ignores {other:?} from {from:?}")),
        }
    }

    /// Timers: on each leader tick, maybe a modelled leadership move, then
    /// fences of expired sessions and the election rounds due; and the
    /// periodic metadata broadcast.
    pub fn tick(&mut self, faults: bool) {
        let core = self.core.clone();
        let now_ms = core.world.now_ms();
        if now_ms >= self.last_tick_ms + core.settings.tick_ms {
            self.last_tick_ms = now_ms;
            if faults
                && core
                    .rng
                    .borrow_mut()
                    .chance_per_million(core.settings.failover_per_million)
            {
                core.fail_over();
            }
            core.fence_expired();
            self.rounds += core.run_elections();
        }
        if now_ms >= self.last_broadcast_ms + core.settings.broadcast_ms {
            self.last_broadcast_ms = now_ms;
            core.broadcast();
        }
    }
}

impl Core {
    fn instant(&self) -> Instant {
        self.origin + Duration::from_millis(self.world.now_ms())
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.world.executor.spawn((0, self.term.get()), task);
    }

    fn published(&self) -> Published {
        let state = self.state.borrow();
        let record = state.partition(TOPIC, 0);
        Published {
            version: state.version(),
            leader: record
                .and_then(|record| record.leader)
                .and_then(|node| u32::try_from(node.0).ok()),
            epoch: record.map_or(LeaderEpoch(0), |record| record.leader_epoch),
            replicas: record
                .map(|record| {
                    record
                        .replicas
                        .iter()
                        .filter_map(|replica| u32::try_from(replica.node.0).ok())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn broadcast(&self) {
        let published = self.published();
        for to in &self.listeners {
            self.world.send(
                Endpoint::Controller,
                *to,
                Message::Metadata(published.clone()),
            );
        }
    }

    /// Proposes `command`: it applies after the commit delay, through the
    /// state machine's checks, and the new metadata is broadcast.
    async fn propose_and_apply(&self, command: Command) -> Result<(), String> {
        let (low, high) = self.settings.commit_ms;
        let delay = self.rng.borrow_mut().between(low, high);
        self.world
            .executor
            .sleep(Duration::from_millis(delay))
            .await;
        let applied = {
            let mut state = self.state.borrow_mut();
            let index = state.version() + 1;
            let applied = state.apply(index, &command);
            if let Err(error) = state.check_invariants() {
                self.world.report(Report::Violation(format!(
                    "controller metadata broken after {command:?}: {error}"
                )));
            }
            applied
        };
        match applied {
            Ok(outcome) => {
                self.world
                    .log(|| format!("controller: applied {command:?}: {outcome:?}"));
                self.broadcast();
                Ok(())
            }
            Err(error) => Err(error.to_string()),
        }
    }

    /// A new controller leader: the bookkeeping starts over and the old
    /// leader's tasks stop.
    fn fail_over(&self) {
        let old = self.term.get();
        self.world.executor.cancel((0, old));
        self.term.set(old + 1);
        self.sessions.borrow_mut().stop_leading();
        self.world
            .log(|| format!("controller: leadership moves (term {})", old + 1));
    }

    fn fence_expired(self: &Rc<Self>) {
        let fences = self
            .sessions
            .borrow_mut()
            .expired(&self.state.borrow(), self.instant());
        for command in fences {
            let Command::FenceBroker { node } = command else {
                continue;
            };
            self.world
                .log(|| format!("controller: session of {node} expired: fencing it"));
            let task = self.clone();
            self.spawn(async move {
                let fenced = task.propose_and_apply(command).await;
                task.sessions.borrow_mut().settled(node);
                if fenced.is_ok() {
                    task.run_elections();
                }
            });
        }
    }

    /// Starts the rounds due; returns how many.
    fn run_elections(self: &Rc<Self>) -> u64 {
        let planned = {
            let mut book = self.elections.borrow_mut();
            book.follow_term(self.term.get());
            book.plan(&self.state.borrow(), self.instant())
        };
        let started = planned.len() as u64;
        for due in planned {
            self.world.log(|| {
                format!(
                    "controller: election round for epoch {} ({}), querying {:?}",
                    due.new_epoch,
                    due.reason,
                    due.targets.iter().map(|t| t.replica.0).collect::<Vec<_>>()
                )
            });
            let task = self.clone();
            self.spawn(async move {
                let outcome = run_round(&*task, &due).await;
                task.world
                    .log(|| format!("controller: round for epoch {}: {outcome:?}", due.new_epoch));
                task.elections.borrow_mut().finish(&due, outcome);
                if matches!(outcome, AttemptOutcome::Unpublished { .. }) {
                    // Retried at the bookkeeping's interval, from the next tick.
                }
            });
        }
        started
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
                    Endpoint::Controller,
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
        self.state
            .borrow()
            .partition(due.topic_id, due.partition)
            .map(|record| record.leader_epoch)
    }

    fn propose(&self, command: Command) -> LocalBoxFuture<'_, Result<(), String>> {
        Box::pin(self.propose_and_apply(command))
    }
}
