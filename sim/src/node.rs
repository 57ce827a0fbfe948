//! A simulated broker holding one replica: the production replica shell
//! ([`ReplicatedPartition`]) on a [`SimDisk`], its appends made durable by
//! the production shard journal ([`ShardJournal`], group commit) as every
//! broker's are, its pushes carried by a
//! [`SimFrameCarrier`] (the broker's own replication streams batch them
//! into frames), its tasks and clock the simulator's.
//!
//! The host does what the broker's runtime does around a replica and no
//! more: it recovers the shard journal at start ([`recover_shard_journal`],
//! as the broker's shard start does) and opens the replica (recovering
//! from the disk), fills segments from the journal and reclaims its files
//! (the runtime's segment flusher), follows
//! the leadership the controller publishes with the broker's own
//! [`role_change`] rule, hands it pushes, queries and produce requests
//! converted by the broker's own wire conversions, gives it the time
//! (`tick`), runs its housekeeping (retention), and registers and
//! heartbeats with the controller. A crash drops every task of the process
//! and every unsynced byte; the restarted process is a new incarnation.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use corelog_broker::metadata::{ReplicationView, TopicConfig};
use corelog_broker::partition::PartitionSpec;
use corelog_broker::replica::stream::{
    FrameCarrier, NoStreamObserver, ReplicationStreams, StreamLimits,
};
use corelog_broker::replica::{
    Acks, ReplicaError, ReplicaSpec, ReplicatedPartition, RoleChange, push_answer, resignation,
    role_change,
};
use corelog_broker::runtime::replicas::serve_stream_frame;
use corelog_replication::wire::query_refusal;
use corelog_replication::{Batch, Push, ReplicaConfig, ReplicaId, ReplicationError};
use corelog_storage::clock::Clock;
use corelog_storage::disk::Disk;
use corelog_storage::journal::{Journal, JournalConfig, ShardJournal};
use corelog_storage::log::recover_shard_journal;
use corelog_storage::memory_disk::MemoryDisk;
use corelog_storage::{
    DiskSpace, LogConfig, ShardStorage, StorageError, StorageObserver, TailCache,
};
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_push::{
    PushResult as WirePushResult, ReplicaPushRequest, ReplicaPushResponse,
};
use corelog_wire::message::replica_stream::{ReplicaStreamRequest, ReplicaStreamResponse};
use corelog_wire::types::{PartitionId, TimestampMs};
use futures::future::LocalBoxFuture;

use crate::disk::{SimDisk, SyncDelay};
use crate::executor::{Owner, SimExecutor};
use crate::network::{Answer, Endpoint, Message, Published};
use crate::world::{Incarnation, Report, World};

/// The replica as the simulator runs it.
pub type Replica = ReplicatedPartition<SimDisk>;

/// The partition's directory on every node's disk.
pub const PARTITION_DIR: &str = "/data/events-0";
/// The shard journal's directory on every node's disk (the broker's
/// `<data>/journal/shard-<n>`).
pub const JOURNAL_DIR: &str = "/data/journal/shard-0";
/// The simulated wall clock starts here (2026-01-01), so that records'
/// timestamps look like a real broker's.
const EPOCH_MS: i64 = 1_767_225_600_000;

/// How the nodes of a run are set up, drawn per seed.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// The partition's topic id.
    pub topic_id: u64,
    /// The replicas' tunables.
    pub replica: ReplicaConfig,
    /// The broker's storage settings.
    pub log: LogConfig,
    /// The topic's settings.
    pub topic: TopicConfig,
    /// A produce not committed in this long fails (outcome unknown).
    pub produce_timeout: Duration,
    /// A stream frame not answered in this long counts as lost.
    pub push_timeout: Duration,
    /// The run injects no fault and every message arrives (if late), so a
    /// produce refused with `NOT_ENOUGH_REPLICAS` is a violation: slow is
    /// not gone.
    pub faultless: bool,
    /// The replication streams' frames and queues.
    pub stream: StreamLimits,
    /// Heartbeats to the controller, this often.
    pub heartbeat_ms: u64,
    /// Fsync duration range, milliseconds.
    pub sync_ms: (u64, u64),
    /// The shard journal's files and commits.
    pub journal: JournalConfig,
    /// The segment flusher's thresholds (the runtime's
    /// `run_segment_flusher`, scaled down to the simulated traffic).
    pub segment_flush: SegmentFlush,
    /// A leader reports its replicas in sync with each heartbeat (the
    /// broker's `PartitionReport`): on the seeds that move the partition,
    /// whose planner adds a learner on that word. Off on the others, so
    /// that their message schedule stays as it was before moves existed.
    pub reports_in_sync: bool,
}

/// When the segment flusher fills a log's segment from the journal: its
/// arguments to [`Journal::flush_candidates`], and how often it runs.
#[derive(Clone, Copy, Debug)]
pub struct SegmentFlush {
    /// It runs this often, milliseconds.
    pub every_ms: u64,
    /// A log holding this many bytes in the journal.
    pub bytes: u64,
    /// A log whose oldest held entry is this old.
    pub age: Duration,
    /// Past this many bytes held in all, the logs holding the oldest file.
    pub held_max: u64,
}

/// How often the interesting paths ran: a simulation that never truncates
/// or resets proves little about them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Follower truncations (seen by the checker as a log end moving back).
    pub truncations: u64,
    /// Follower resets (catch-up from below the leader's log start, seen by
    /// the checker as the log restarting elsewhere).
    pub resets: u64,
    /// Pushes sent that reset a follower to the leader's log start.
    pub reset_pushes: u64,
    /// Produces answered `REQUEST_TIMED_OUT`.
    pub produce_timeouts: u64,
    /// Runs that were slow and faultless (`SimConfig::draw`).
    pub slow_runs: u64,
    /// Retention deletions.
    pub retentions: u64,
    /// Mismatch acknowledgements received by leaders.
    pub mismatches: u64,
    /// Leaderships taken.
    pub leaderships: u64,
    /// Leaderships refused because the replica led the epoch before.
    pub already_led: u64,
    /// Leaderships resigned because they could never be taken.
    pub resignations: u64,
    /// Restarts.
    pub restarts: u64,
    /// Fig. 8 chains the schedule drove to their last election.
    pub fig8_chains: u64,
    /// Old-epoch suffixes a new leader got onto a follower before its
    /// marker (the fig. 8 schedule's third step; only safe if not counted
    /// committed).
    pub fig8_suffixes: u64,
    /// Restarts whose journal replay gave the log batches its segments
    /// lacked.
    pub journal_replays: u64,
    /// Batches those replays gave back.
    pub journal_replayed_batches: u64,
    /// Segment fills from the journal the flusher ran.
    pub segment_flushes: u64,
    /// Journal files removed once everything in them was released.
    pub journal_files_reclaimed: u64,
    /// Controller process crashes injected.
    pub controller_crashes: u64,
    /// Controlled shutdowns: a leading node asked to leave, then stopped.
    pub controlled_stops: u64,
    /// Of those, the ones whose leadership had moved before the stop, and
    /// sooner than its session would have expired.
    pub handed_off: u64,
    /// Leadership transfers an operator asked for.
    pub transfers_requested: u64,
    /// Of those, the ones after which the node asked for led.
    pub transfers_done: u64,
    /// Maintenance enabled or disabled by an operator.
    pub maintenance_changes: u64,
    /// Moves of the partition an operator started.
    pub reassignments_started: u64,
    /// Cancels of a move in progress an operator asked for.
    pub reassignments_cancelled: u64,
    /// Moves that ended (reached their goal, or back after a cancel).
    pub reassignments_ended: u64,
    /// Decommissions of a replica's node an operator asked for.
    pub decommissions: u64,
    /// Recommissions an operator asked for.
    pub recommissions: u64,
    /// Decommissions that took the partition off their node: seen when
    /// recommissioned, or at the end of the run.
    pub decommissions_done: u64,
    /// Controller processes restarted.
    pub controller_restarts: u64,
    /// Raft terms in which a controller process led.
    pub controller_terms: u64,
}

/// A push, for the trace.
fn describe_push(push: &Push) -> String {
    let batches: Vec<_> = push.batches.iter().map(Batch::meta).collect();
    format!(
        "push e{} from {} start {} prev {:?} reset {:?} hw {} {batches:?}",
        push.epoch, push.leader, push.start, push.prev_epoch, push.reset_to, push.hw
    )
}

/// The wall-clock time at simulated time `now_ms`.
#[must_use]
pub fn wall_clock(now_ms: u64) -> TimestampMs {
    let elapsed = i64::try_from(now_ms).unwrap_or(i64::MAX);
    TimestampMs(EPOCH_MS.saturating_add(elapsed))
}

/// The simulated wall clock.
#[derive(Debug)]
struct SimClock(SimExecutor);

impl Clock for SimClock {
    fn now(&self) -> TimestampMs {
        wall_clock(self.0.now_ms())
    }
}

/// A log fence without an injected disk fault is a bug: the broker would
/// exit, the simulation reports it.
struct FenceReporter {
    world: Rc<World>,
    node: Incarnation,
}

impl StorageObserver for FenceReporter {
    fn on_flush(&self, _bytes: u64, _elapsed: Duration) {}

    fn on_fenced(&self, dir: &Path, error: &StorageError) {
        self.world.report(Report::Violation(format!(
            "{:?}: log in {} fenced without a disk fault: {error}",
            self.node,
            dir.display()
        )));
    }
}

/// Replication stream frames over the simulated network, as
/// `ReplicaStream` requests: the broker's own [`ReplicationStreams`] batch
/// the replica's pushes into frames; this only carries them (and counts
/// what the statistics want).
#[derive(Debug)]
pub struct SimFrameCarrier {
    world: Rc<World>,
    from: u32,
    timeout: Duration,
    stats: Rc<RefCell<Stats>>,
}

impl FrameCarrier for SimFrameCarrier {
    fn carry(
        &self,
        to: ReplicaId,
        request: ReplicaStreamRequest,
        raw: Vec<Bytes>,
    ) -> LocalBoxFuture<'_, Result<ReplicaStreamResponse, String>> {
        Box::pin(async move {
            for reset_to in request.pushes.iter().filter_map(|push| push.reset_to) {
                self.stats.borrow_mut().reset_pushes += 1;
                let from = self.from;
                self.world
                    .log(|| format!("{from}: push resetting {to} to {reset_to}"));
            }
            let mut joined = BytesMut::new();
            for part in &raw {
                joined.extend_from_slice(part);
            }
            let raw = joined.freeze();
            let answer = self
                .world
                .call(
                    Endpoint::Node(self.from),
                    Endpoint::Node(to.0),
                    |call| Message::Stream { call, request, raw },
                    self.timeout,
                )
                .await;
            match answer {
                Some(Answer::Stream(response)) => {
                    let mismatches = response
                        .answers
                        .iter()
                        .filter(|answer| matches!(answer.result, WirePushResult::Mismatch { .. }))
                        .count();
                    self.stats.borrow_mut().mismatches += mismatches as u64;
                    Ok(response)
                }
                Some(Answer::Query(_) | Answer::Raft { .. }) => {
                    Err("another call's kind of answer to a stream frame".to_owned())
                }
                None => Err("no answer in time".to_owned()),
            }
        })
    }
}

/// A follower's side of one push of a frame: the replica answers it as
/// received, as the broker's shard has it do (`serve_push`).
async fn serve_push(
    world: Rc<World>,
    id: u32,
    replica: Rc<Replica>,
    limits: BatchLimits,
    request: ReplicaPushRequest,
    records: Bytes,
) -> ReplicaPushResponse {
    world.log(|| {
        // Cut apart again for the trace only (the closure runs only when
        // tracing).
        match Push::from_wire(&request, records.clone(), &limits) {
            Ok(push) => format!("{id}: receives {}", describe_push(&push)),
            Err(error) => format!("{id}: receives a malformed push: {error}"),
        }
    });
    let answered = replica.answer_push(&request, records).await;
    if let Err(ReplicaError::Refused(ReplicationError::Protocol(error))) = &answered {
        // Only a broken leader sends what the follower refuses as malformed,
        // and every leader here runs the production code: these were
        // assertions in the state machine before issue 36, and must still
        // fail the seed.
        world.report(Report::Violation(format!(
            "{id}: refused a push as malformed: {error}"
        )));
    }
    let response = push_answer(answered);
    world.log(|| {
        if response.error_code == ErrorCode::None.code() {
            format!("{id}: answers {:?}", response.result)
        } else {
            format!("{id}: refuses: {:?}", response.error_message)
        }
    });
    response
}

/// One running process of a node.
#[derive(Debug)]
struct Process {
    owner: Owner,
    stats: Rc<RefCell<Stats>>,
    /// The replica, once opened.
    replica: RefCell<Option<Rc<Replica>>>,
    /// The shard journal, once recovered.
    journal: RefCell<Option<Rc<ShardJournal<SimDisk>>>>,
    last_segment_flush_ms: Cell<u64>,
    /// The newest leadership published to this process.
    published: RefCell<Option<Published>>,
    registered: Cell<bool>,
    last_heartbeat_ms: Cell<u64>,
    /// A controlled shutdown began (at the first time): it stops once
    /// its leadership moved, or at the second.
    leaving_until_ms: Cell<Option<(u64, u64)>>,
}

/// One simulated broker.
#[derive(Debug)]
pub struct Node {
    id: u32,
    world: Rc<World>,
    settings: Rc<NodeSettings>,
    disk: MemoryDisk,
    delay: Rc<SyncDelay>,
    stats: Rc<RefCell<Stats>>,
    incarnation: u64,
    /// `None` while down.
    process: Option<Rc<Process>>,
    restart_at_ms: Option<u64>,
}

impl Node {
    /// A node with an empty disk, started.
    #[must_use]
    pub fn new(
        id: u32,
        world: Rc<World>,
        settings: Rc<NodeSettings>,
        delay: Rc<SyncDelay>,
        stats: Rc<RefCell<Stats>>,
    ) -> Node {
        let disk = MemoryDisk::new(512, 1 << 40);
        let mut node = Node {
            id,
            world,
            settings,
            disk,
            delay,
            stats,
            incarnation: 0,
            process: None,
            restart_at_ms: None,
        };
        node.start();
        node
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The current process.
    #[must_use]
    pub fn incarnation(&self) -> Incarnation {
        (self.id, self.incarnation)
    }

    /// The disk, for the checker.
    #[must_use]
    pub fn disk(&self) -> &MemoryDisk {
        &self.disk
    }

    /// The replica, if the node is up and it is open.
    #[must_use]
    pub fn replica(&self) -> Option<Rc<Replica>> {
        self.process.as_ref()?.replica.borrow().clone()
    }

    /// Whether the node is down.
    #[must_use]
    pub fn is_down(&self) -> bool {
        self.process.is_none()
    }

    fn owner(&self) -> Owner {
        (self.id, self.incarnation)
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::Node(self.id)
    }

    /// Starts a new process: opens (recovers) the replica on its own task.
    fn start(&mut self) {
        self.incarnation += 1;
        self.restart_at_ms = None;
        let process = Rc::new(Process {
            owner: self.owner(),
            stats: self.stats.clone(),
            replica: RefCell::new(None),
            journal: RefCell::new(None),
            last_segment_flush_ms: Cell::new(0),
            published: RefCell::new(None),
            registered: Cell::new(false),
            last_heartbeat_ms: Cell::new(0),
            leaving_until_ms: Cell::new(None),
        });
        self.process = Some(process.clone());
        let executor = self.world.executor.clone();
        let world = self.world.clone();
        let settings = self.settings.clone();
        let disk = SimDisk::new(self.disk.clone(), self.delay.clone());
        let probe = self.disk.clone();
        let stats = self.stats.clone();
        let (id, incarnation) = (self.id, self.incarnation);
        executor.spawn(self.owner(), async move {
            let mut storage = ShardStorage {
                clock: Rc::new(SimClock(world.executor.clone())),
                space: Rc::new(DiskSpace::new(0, move || {
                    probe.free_bytes(Path::new(PARTITION_DIR))
                })),
                cache: TailCache::new(64 << 10),
                observer: Rc::new(FenceReporter {
                    world: world.clone(),
                    node: (id, incarnation),
                }),
                journal: None,
            };
            // The broker's shard start: the journal's recovered entries go
            // into the partition's segments before it opens.
            let journal_dir = Path::new(JOURNAL_DIR);
            let log = settings.log;
            match recover_shard_journal(&disk, journal_dir, settings.journal, log, &storage).await {
                Ok((journal, replayed)) => {
                    world.log(|| format!("{id}: shard journal recovered: {replayed:?}"));
                    if replayed.batches > 0 {
                        let mut stats = stats.borrow_mut();
                        stats.journal_replays += 1;
                        stats.journal_replayed_batches += replayed.batches;
                    }
                    let journal = Rc::new(journal);
                    *process.journal.borrow_mut() = Some(journal.clone());
                    storage.journal = Some(journal);
                }
                Err(error) => {
                    world.report(Report::Violation(format!(
                        "{id}: the shard journal does not recover after a crash: {error}"
                    )));
                    return;
                }
            }
            let spec = ReplicaSpec {
                id: ReplicaId(id),
                config: settings.replica,
                partition: PartitionSpec {
                    topic: "events",
                    id: PartitionId {
                        topic_id: settings.topic_id,
                        partition: 0,
                    },
                    dir: Path::new(PARTITION_DIR),
                    config: settings.topic,
                    broker_log: settings.log,
                    producer_state_retention_ms: 1 << 40,
                },
                high_watermark_signal: Default::default(),
            };
            let executor = world.executor.for_owner((id, incarnation));
            let carrier = Rc::new(SimFrameCarrier {
                world: world.clone(),
                from: id,
                timeout: settings.push_timeout,
                stats,
            });
            let streams = ReplicationStreams::new(
                ReplicaId(id),
                carrier,
                executor.clone(),
                settings.stream,
                Rc::new(NoStreamObserver),
            );
            let transport = Rc::new(streams.transport(PartitionId {
                topic_id: settings.topic_id,
                partition: 0,
            }));
            match ReplicatedPartition::open(disk, spec, storage, transport, executor).await {
                Ok(replica) => {
                    world.log(|| {
                        format!(
                            "{id}: opened (incarnation {incarnation}), log {}..{}, hw {}, {:?}",
                            replica.log_start(),
                            replica.durable_end(),
                            replica.high_watermark(),
                            replica.meta()
                        )
                    });
                    *process.replica.borrow_mut() = Some(replica);
                    follow(&world, &process, id);
                }
                Err(error) => world.report(Report::Violation(format!(
                    "{id}: the replica does not open after a crash: {error}"
                ))),
            }
        });
    }

    /// A message arrives.
    pub fn receive(&mut self, from: Endpoint, message: Message) {
        let Some(process) = self.process.clone() else {
            return;
        };
        match message {
            Message::Stream { call, request, raw } => {
                let limits = self.settings.log.batch_limits;
                let world = self.world.clone();
                let id = self.id;
                self.serve(&process, from, call, move |replica| async move {
                    let serve = |push, records| {
                        serve_push(world.clone(), id, replica.clone(), limits, push, records)
                    };
                    Answer::Stream(serve_stream_frame(request, &raw, serve).await)
                });
            }
            Message::Query { call, request } => {
                self.serve(&process, from, call, move |replica| async move {
                    Answer::Query(replica.serve_query(&request).await)
                });
            }
            Message::Answer { call, answer } => self.world.answer(call, answer),
            Message::Metadata(published) => {
                let newer = process
                    .published
                    .borrow()
                    .as_ref()
                    .is_none_or(|known| published.version > known.version);
                if newer {
                    *process.published.borrow_mut() = Some(published);
                    follow(&self.world, &process, self.id);
                }
            }
            Message::Registered { incarnation } if incarnation == self.incarnation => {
                process.registered.set(true);
            }
            Message::RegisterAgain { incarnation } if incarnation == self.incarnation => {
                process.registered.set(false);
            }
            Message::Append {
                client,
                request,
                batch,
            } => self.produce(&process, client, request, batch),
            other => {
                self.world.log(|| format!("{}: ignores {other:?}", self.id));
            }
        }
    }

    /// Answers call `call` from `from` with what `handle` makes of it, on
    /// the process's own task; refuses while the replica is not open.
    fn serve<F, Fut>(&self, process: &Rc<Process>, from: Endpoint, call: u64, handle: F)
    where
        F: FnOnce(Rc<Replica>) -> Fut + 'static,
        Fut: Future<Output = Answer> + 'static,
    {
        let world = self.world.clone();
        let me = self.endpoint();
        let replica = process.replica.borrow().clone();
        self.world.executor.spawn(process.owner, async move {
            let answer = match replica {
                Some(replica) => handle(replica).await,
                None => {
                    let message = "the replica is not open yet; retry".to_owned();
                    match from {
                        Endpoint::Controller(_) => {
                            Answer::Query(query_refusal(ErrorCode::LeaderNotAvailable, message))
                        }
                        _ => Answer::Stream(ReplicaStreamResponse {
                            error_code: ErrorCode::LeaderNotAvailable.code(),
                            error_message: Some(message),
                            answers: Vec::new(),
                        }),
                    }
                }
            };
            world.send(me, from, Message::Answer { call, answer });
        });
    }

    /// A client's batch: produced with `acks=quorum`, answered when
    /// committed (reported to the checker) or failed.
    fn produce(&self, process: &Rc<Process>, client: u32, request: u64, batch: Bytes) {
        let Some(replica) = process.replica.borrow().clone() else {
            return;
        };
        let world = self.world.clone();
        let (me, by) = (self.endpoint(), self.incarnation());
        let timeout = self.settings.produce_timeout;
        let limits: BatchLimits = self.settings.log.batch_limits;
        let faultless = self.settings.faultless;
        let stats = self.stats.clone();
        let hint = process
            .published
            .borrow()
            .as_ref()
            .and_then(|published| published.leader);
        self.world.executor.spawn(process.owner, async move {
            let values = match batch::decode_records(&batch, &limits) {
                Ok(records) => records
                    .into_iter()
                    .filter_map(|record| record.value)
                    .collect(),
                Err(error) => {
                    world.report(Report::Violation(format!(
                        "a client batch does not decode: {error}"
                    )));
                    return;
                }
            };
            let reply = match replica
                .produce(BytesMut::from(&batch[..]), Acks::Quorum, timeout)
                .await
            {
                Ok(produced) => {
                    world.report(Report::Acknowledged {
                        by,
                        client,
                        request,
                        base: produced.base_offset,
                        values,
                    });
                    Message::AppendOk {
                        request,
                        offset: produced.base_offset,
                    }
                }
                Err(error) => {
                    world.log(|| {
                        format!(
                            "{}: append of client {client} request {request} failed: {error}",
                            by.0
                        )
                    });
                    match error.code() {
                        ErrorCode::RequestTimedOut => stats.borrow_mut().produce_timeouts += 1,
                        ErrorCode::NotEnoughReplicas if faultless => {
                            world.report(Report::Violation(format!(
                                "{}: append of client {client} request {request} answered \
                                 NOT_ENOUGH_REPLICAS with every replica reachable: {error}",
                                by.0
                            )));
                        }
                        _ => {}
                    }
                    Message::AppendFailed { request, hint }
                }
            };
            world.send(me, Endpoint::Client(client), reply);
        });
    }

    /// Timers: restart when due; the replica's tick; registration and
    /// heartbeats; housekeeping when `maintain`.
    pub fn tick(&mut self, maintain: bool) {
        let now = self.world.now_ms();
        let Some(process) = self.process.clone() else {
            if self.restart_at_ms.is_some_and(|at| at <= now) {
                self.restart();
            }
            return;
        };
        let replica = process.replica.borrow().clone();
        if let Some(replica) = &replica {
            replica.tick();
        }
        if now >= process.last_heartbeat_ms.get() + self.settings.heartbeat_ms {
            process.last_heartbeat_ms.set(now);
            // A leaving process sends no heartbeat, and asks again until
            // it stops, as the broker's call retries.
            let message = if process.leaving_until_ms.get().is_some() {
                Message::Leave {
                    node: self.id,
                    incarnation: self.incarnation,
                }
            } else if process.registered.get() {
                Message::Heartbeat {
                    node: self.id,
                    incarnation: self.incarnation,
                    metadata_version: process
                        .published
                        .borrow()
                        .as_ref()
                        .map_or(0, |published| published.version),
                }
            } else {
                Message::Register {
                    node: self.id,
                    incarnation: self.incarnation,
                }
            };
            self.world.send_to_controllers(self.endpoint(), &message);
            // A leader reports its replicas in sync, as the broker's
            // `PartitionReport`: a move adds a learner on its word.
            if self.settings.reports_in_sync
                && process.registered.get()
                && process.leaving_until_ms.get().is_none()
                && let Some(replica) = &replica
                && let Some(led) = replica.led_report(self.id)
            {
                let report = Message::Report {
                    node: self.id,
                    incarnation: self.incarnation,
                    led,
                };
                self.world.send_to_controllers(self.endpoint(), &report);
            }
        }
        let flush = self.settings.segment_flush;
        if now >= process.last_segment_flush_ms.get() + flush.every_ms
            && let Some(replica) = &replica
        {
            process.last_segment_flush_ms.set(now);
            self.flush_segments(&process, replica.clone());
        }
        if maintain && let Some(replica) = replica {
            let world = self.world.clone();
            let stats = self.stats.clone();
            let id = self.id;
            self.world.executor.spawn(process.owner, async move {
                match replica.maintain().await {
                    Ok(Some(deleted)) => {
                        stats.borrow_mut().retentions += 1;
                        world.log(|| format!("{id}: retention deleted {deleted:?}"));
                    }
                    Ok(None) => {}
                    Err(error) => world.log(|| format!("{id}: housekeeping failed: {error}")),
                }
            });
        }
    }

    /// The runtime's segment flusher, one round: the logs the journal names
    /// fill their segments, then released journal files are removed.
    fn flush_segments(&self, process: &Rc<Process>, replica: Rc<Replica>) {
        let Some(journal) = process.journal.borrow().clone() else {
            return;
        };
        let flush = self.settings.segment_flush;
        let partition = PartitionId {
            topic_id: self.settings.topic_id,
            partition: 0,
        };
        let world = self.world.clone();
        let stats = self.stats.clone();
        let id = self.id;
        self.world.executor.spawn(process.owner, async move {
            let candidates = journal.flush_candidates(flush.bytes, flush.age, flush.held_max);
            if candidates.contains(&partition) {
                stats.borrow_mut().segment_flushes += 1;
                if let Err(error) = replica.partition().flush_segment().await {
                    world.log(|| format!("{id}: segment flush failed: {error}"));
                }
            }
            match journal.reclaim().await {
                Ok(0) => {}
                Ok(files) => {
                    stats.borrow_mut().journal_files_reclaimed += files as u64;
                    world.log(|| format!("{id}: {files} journal files reclaimed"));
                }
                Err(error) => world.log(|| format!("{id}: journal reclaim failed: {error}")),
            }
        });
    }

    /// Starts a controlled shutdown (the broker's SIGTERM): asks the
    /// controller to move this node's leadership, and stops heartbeating;
    /// [`Node::ready_to_stop`] says when to stop it. False when down or
    /// already leaving.
    pub fn leave(&mut self, until_ms: u64) -> bool {
        let Some(process) = &self.process else {
            return false;
        };
        let now = self.world.now_ms();
        if process
            .leaving_until_ms
            .replace(Some((now, until_ms)))
            .is_some()
        {
            return false;
        }
        let message = Message::Leave {
            node: self.id,
            incarnation: self.incarnation,
        };
        self.world.send_to_controllers(self.endpoint(), &message);
        true
    }

    /// For a leaving process: `Some(Some(ms))` once the published
    /// leadership is another node's (or none), `ms` after the leave began;
    /// `Some(None)` when its wait ran out; `None` while it should keep
    /// serving, or when it is not leaving.
    #[must_use]
    pub fn ready_to_stop(&self) -> Option<Option<u64>> {
        let process = self.process.as_ref()?;
        let (since_ms, until_ms) = process.leaving_until_ms.get()?;
        let now = self.world.now_ms();
        let moved = process
            .published
            .borrow()
            .as_ref()
            .is_some_and(|published| published.leader != Some(self.id));
        if moved {
            Some(Some(now - since_ms))
        } else {
            (now >= until_ms).then_some(None)
        }
    }

    /// Crashes the process: its tasks stop where they are, only synced
    /// bytes and names survive; it restarts at `restart_at_ms`.
    pub fn crash(&mut self, restart_at_ms: u64) {
        if self.process.take().is_none() {
            return;
        }
        self.world.executor.cancel(self.owner());
        self.disk.crash();
        self.restart_at_ms = Some(restart_at_ms);
        let id = self.id;
        self.world
            .log(|| format!("{id}: crash, restarting at {restart_at_ms}"));
    }

    /// Starts a new process on the disk as the crash left it.
    pub fn restart(&mut self) {
        if self.process.is_some() {
            return;
        }
        self.stats.borrow_mut().restarts += 1;
        self.start();
    }
}

/// Starts the role change the newest published leadership asks of the
/// replica, if it is open and one is asked (the runtime's
/// `follow_leadership`).
fn follow(world: &Rc<World>, process: &Rc<Process>, id: u32) {
    let Some(replica) = process.replica.borrow().clone() else {
        return;
    };
    let Some(published) = process.published.borrow().clone() else {
        return;
    };
    let view = ReplicationView {
        replicas: published.replicas.clone(),
        leader: published.leader,
        epoch: published.epoch,
        learners: published.learners.clone(),
        learner_throttle_bytes_per_s: published.learner_throttle_bytes_per_s,
        local: true,
    };
    let learners: Vec<ReplicaId> = view.learners.iter().copied().map(ReplicaId).collect();
    // Named now, leading or not: a leadership that starts takes up the
    // newest, not those of the view that started it.
    replica.set_learners(&learners, view.learner_throttle_bytes_per_s);
    let Some(change) = role_change(replica.role(), &view, id) else {
        return;
    };
    let task_world = world.clone();
    let stats = process.stats.clone();
    world.executor.spawn(process.owner, async move {
        let world = task_world;
        let result = match &change {
            RoleChange::Lead { epoch, replicas } => replica.become_leader(*epoch, replicas).await,
            RoleChange::Follow { epoch, leader } => replica.become_follower(*epoch, *leader).await,
        };
        match result {
            Ok(()) => {
                if matches!(change, RoleChange::Lead { .. }) {
                    stats.borrow_mut().leaderships += 1;
                }
                // A new leadership starts without learners: name the
                // newest.
                replica.refresh_learners();
                world.log(|| format!("{id}: {change:?}"));
            }
            Err(ReplicaError::Refused(error @ ReplicationError::ConflictingLeader { .. })) => {
                world.report(Report::Violation(format!(
                    "{id}: {change:?} refused: {error}"
                )));
            }
            Err(error) => {
                if matches!(
                    error,
                    ReplicaError::Refused(ReplicationError::AlreadyLed { .. })
                ) {
                    stats.borrow_mut().already_led += 1;
                }
                world.log(|| format!("{id}: {change:?} refused: {error}"));
                if let Some(epoch) = resignation(&change, &error) {
                    stats.borrow_mut().resignations += 1;
                    world.send_to_controllers(
                        Endpoint::Node(id),
                        &Message::Resign { node: id, epoch },
                    );
                }
            }
        }
    });
}
