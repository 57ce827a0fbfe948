//! One simulated run: a cluster built from a seed, driven through a chaotic
//! phase and a healed phase, with every invariant checked after every step
//! (every task poll, every message delivery, every timer).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use corelog_broker::cluster::election::ElectionTimings;
use corelog_broker::metadata::{CleanupPolicy, TopicConfig};
use corelog_broker::replica::stream::StreamLimits;
use corelog_replication::{ReplicaConfig, RoleView};
use corelog_storage::journal::JournalConfig;
use corelog_storage::{LogConfig, RetentionPolicy};
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::message::replica_stream::PUSHES_PER_FRAME_MAX;
use corelog_wire::rng::SplitMix64;
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::checker::Checker;
use crate::client::{self, Client};
use crate::controller::{Controller, ControllerSettings, MoveView};
use crate::disk::{LogView, SyncDelay, ViewCache, current_view, durable_promise, durable_view};
use crate::executor::SimExecutor;
use crate::fig8::{Act, Fig8Schedule, NodeView};
use crate::network::{Answer, Endpoint, Envelope, Message, Network, NetworkFaults};
use crate::node::{Node, NodeSettings, PARTITION_DIR, SegmentFlush, Stats, wall_clock};
use crate::trace::Trace;
use crate::world::{Incarnation, Report, World};

/// Timer resolution of the nodes, the controller and the clients,
/// milliseconds. Messages, fsyncs and the replicas' own timers fire at
/// their exact times.
pub const TICK_MS: u64 = 5;
/// Length of the faulty phase, milliseconds of simulated time.
pub const CHAOS_MS: u64 = 2_500;
/// Length of the healed phase that follows, in which the cluster must
/// elect a leader and acknowledge new appends.
pub const HEAL_MS: u64 = 2_000;

/// How long before the end of a run a move still in progress must have
/// taken a step or had its learner copy something.
const COPYING_WINDOW_MS: u64 = 500;

/// The partition as [`Sim::move_stall`] compares it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NearTheEnd {
    /// The published replica set and learners.
    sets: (Vec<u32>, Vec<u32>),
    /// The published leader: moving it off a replica that leaves is a
    /// step of the move too.
    leader: Option<u32>,
    /// Each running node's log end.
    ends: BTreeMap<u32, Offset>,
    /// The highest high watermark of any node.
    committed: Offset,
}
/// How long a leadership counts as fresh for
/// [`SimConfig::fresh_leader_crash_per_million`], milliseconds.
pub const FRESH_LEADER_MS: u64 = 30;
/// Task polls at one instant beyond which the run is a livelock.
const POLLS_PER_INSTANT_MAX: u64 = 200_000;

thread_local! {
    /// The simulated time of the run on this thread, so that a panic (a
    /// failed assertion) can be reported with its time like a violation.
    static NOW_MS: Cell<u64> = const { Cell::new(0) };
}

/// The simulated time the last run on this thread reached.
#[must_use]
pub fn last_time_ms() -> u64 {
    NOW_MS.with(Cell::get)
}

/// Mixed into a seed for the operators' generator
/// ([`SimConfig::draw_operators`]).
const OPERATOR_SEED: u64 = 0x6f70_6572_6174_6f72;

/// Everything about a run that the seed decides before it starts.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nodes, 3 to 5.
    pub node_count: u32,
    /// Replicas of the partition: every node, or 3 of 4 or 5 on the seeds
    /// whose operator moves it ([`SimConfig::reassign_per_million`]).
    pub replication_factor: u32,
    /// Network fault rates.
    pub network: NetworkFaults,
    /// Crash chance per node per tick, per million.
    pub crash_per_million: u64,
    /// Extra crash chance per tick of a node that leads, per million:
    /// leadership churn, which the hard cases need (a leader that takes
    /// over an older epoch's uncommitted suffix and dies before its
    /// marker is replicated, Raft fig. 8).
    pub leader_crash_per_million: u64,
    /// Extra crash chance per tick of a leader in its first
    /// [`FRESH_LEADER_MS`], per million: the window in which its marker is
    /// not yet on a majority.
    pub fresh_leader_crash_per_million: u64,
    /// Chance that a leader which has committed nothing in its epoch yet
    /// crashes right after a follower's push answer reached it, per
    /// million: it dies between its first acknowledgement and its
    /// marker's commitment, with an older epoch's suffix perhaps on a
    /// majority (Raft fig. 8).
    pub first_ack_crash_per_million: u64,
    /// Chance per tick that a leading node starts a controlled shutdown,
    /// per million: it asks the controller to move its leadership (again
    /// every heartbeat interval), stops once it moved (or three session
    /// timeouts later), and restarts after a down time.
    pub leave_per_million: u64,
    /// Chance per tick that an operator asks for the leadership to move to
    /// a random node (`elect-leader --to`), per million.
    pub transfer_per_million: u64,
    /// Chance per tick that an operator puts a random node in maintenance,
    /// or takes the one in maintenance out, per million.
    pub maintenance_per_million: u64,
    /// Chance per tick that an operator moves the partition to other nodes
    /// (one or two replaced; `partition reassign`), or cancels the move in
    /// progress (one time in four), or decommissions one of its replicas'
    /// nodes or recommissions the one being decommissioned (one time in
    /// four without a move), per million.
    pub reassign_per_million: u64,
    /// Down time range after a crash, milliseconds.
    pub restart_ms: (u64, u64),
    /// Chance per tick that a partition forms, per million.
    pub partition_per_million: u64,
    /// Partition duration range, milliseconds.
    pub partition_ms: (u64, u64),
    /// Chance per tick that the leader stalls (takes in nothing, then all
    /// of it late), per million.
    pub stall_per_million: u64,
    /// Stall duration range, milliseconds.
    pub stall_ms: (u64, u64),
    /// Housekeeping (retention) chance per node per tick, per million.
    pub maintain_per_million: u64,
    /// Append chance per client per tick, per million.
    pub client_rate_per_million: u64,
    /// A client abandons a request unanswered this long, milliseconds.
    pub client_request_timeout_ms: u64,
    /// The nodes.
    pub node: NodeSettings,
    /// The controller.
    pub controller: ControllerSettings,
    /// Crash chance per controller process per tick, per million.
    pub controller_crash_per_million: u64,
    /// Whether the faults follow the [`Fig8Schedule`] (on three nodes, with
    /// tiny pushes) instead of random crashes and partitions.
    pub fig8_schedule: bool,
}

impl SimConfig {
    /// Draws a configuration: some seeds are calm, some very faulty.
    #[must_use]
    pub fn draw(rng: &mut SplitMix64) -> Self {
        let delay_high = rng.between(1, 20);
        let session_ms = rng.between(80, 300);
        // A third of the seeds roll tiny segments, so that retention outruns a
        // follower that is down or cut off and it must be reset.
        let segment_bytes = if rng.below(3) == 0 {
            rng.between(4, 6) << 10
        } else {
            rng.between(8, 32) << 10
        };
        let limits = BatchLimits {
            batch_bytes_max: 4 << 10,
            decompressed_bytes_max: 1 << 20,
        };
        let retention_bytes = (rng.below(3) > 0).then(|| rng.between(1, 6) * segment_bytes);
        let resend_timeout_ms = rng.between(30, 120);
        // A quarter of the seeds churn leaders hard on three nodes, with
        // tiny pushes and a lossy network: the interleavings where a new
        // leader holds an older epoch's uncommitted suffix and dies before
        // its marker is on a majority (Raft fig. 8) need all of that.
        let churn = rng.below(4) == 0;
        let max_push_bytes = if churn {
            rng.between(60, 200)
        } else {
            rng.between(100, 1_500)
        } as usize;
        let mut config = Self {
            node_count: if churn { 3 } else { rng.between(3, 5) as u32 },
            replication_factor: 0,
            network: NetworkFaults {
                loss_per_million: if churn {
                    rng.between(50_000, 250_000)
                } else {
                    rng.below(100_000)
                },
                duplicate_per_million: rng.below(50_000),
                delay_ms: (1, delay_high),
                long_delay_per_million: rng.below(20_000),
            },
            crash_per_million: rng.below(2_500),
            leader_crash_per_million: if churn {
                rng.between(10_000, 60_000)
            } else if rng.below(2) == 0 {
                0
            } else {
                rng.below(40_000)
            },
            fresh_leader_crash_per_million: if churn {
                rng.between(100_000, 500_000)
            } else if rng.below(2) == 0 {
                0
            } else {
                rng.below(300_000)
            },
            restart_ms: (rng.between(5, 50), rng.between(50, 1_000)),
            partition_per_million: rng.below(10_000),
            partition_ms: (20, rng.between(50, 600)),
            stall_per_million: 0,
            stall_ms: (0, 0),
            maintain_per_million: rng.between(5_000, 50_000),
            client_rate_per_million: rng.between(100_000, 500_000),
            client_request_timeout_ms: client::REQUEST_TIMEOUT_MS,
            node: NodeSettings {
                topic_id: 0,
                replica: ReplicaConfig {
                    resend_timeout_ms,
                    heartbeat_interval_ms: rng.between(10, 50),
                    max_inflight_records: rng.between(4, 64),
                    max_push_bytes: max_push_bytes as u64,
                    // A constant: drawing it would shift every seed's
                    // schedule. Reported only; nothing checks it yet.
                    in_sync_lag_ms: 1_000,
                },
                log: LogConfig {
                    segment_bytes,
                    segment_ms: 1 << 40,
                    retention: RetentionPolicy {
                        retention_ms: None,
                        retention_bytes: None,
                    },
                    index_interval_bytes: 1024,
                    flush_bytes_max: 64 << 10,
                    batch_limits: limits,
                },
                topic: TopicConfig {
                    retention_ms: None,
                    retention_bytes,
                    segment_bytes,
                    segment_ms: 1 << 40,
                    max_message_bytes: 4 << 10,
                    max_uncompressed_message_bytes: 16 << 10,
                    cleanup_policy: CleanupPolicy::Delete,
                },
                produce_timeout: Duration::from_millis(rng.between(150, 500)),
                // A lost push is resent once its frame is given up (the
                // leader waits for a push on its way, however slow): as soon
                // as the resend timeout, so that faults cost what they did
                // when the leader resent on that timer alone.
                push_timeout: Duration::from_millis(resend_timeout_ms),
                faultless: false,
                stream: {
                    // Frames of four to sixteen full pushes (heartbeats fill
                    // them up; the broker's hold four); queues of four to
                    // sixteen frames' worth, which fill while a follower is
                    // cut off or down. Less (one small frame in flight, a
                    // few pushes a frame) caps the stream below what the
                    // clients offer: queued pushes outlive the resend
                    // timeout and the run never catches up.
                    let frame_bytes_max = max_push_bytes * rng.between(4, 16) as usize;
                    StreamLimits {
                        frame_bytes_max,
                        frame_pushes_max: PUSHES_PER_FRAME_MAX,
                        frames_in_flight_max: rng.between(2, 4) as usize,
                        queued_bytes_max: frame_bytes_max * rng.between(4, 16) as usize,
                    }
                },
                heartbeat_ms: (session_ms / 4).max(TICK_MS),
                sync_ms: (1, rng.between(1, 15)),
                // Drawn below, after everything else.
                journal: JournalConfig::default(),
                segment_flush: SegmentFlush {
                    every_ms: 10,
                    bytes: 1 << 20,
                    age: Duration::from_secs(5),
                    held_max: 256 << 20,
                },
                reports_in_sync: false,
            },
            controller: ControllerSettings {
                session_timeout: Duration::from_millis(session_ms),
                elections: ElectionTimings {
                    retry_interval: Duration::from_millis(rng.between(40, 200)),
                    preferred_settle_time: Duration::from_millis(rng.between(200, 800)),
                    preferred_retry_interval: Duration::from_millis(rng.between(300, 1_500)),
                    transfer_timeout: Duration::from_millis(500),
                },
                query_timeout: Duration::from_millis(rng.between(40, 150)),
                voters: if rng.below(4) == 0 { 1 } else { 3 },
                tick_ms: 10,
                // Elections after 100 to 200 ms without a leader.
                election_tick: 10,
                heartbeat_tick: 2,
                snapshot_interval_entries: rng.between(4, 64),
                sync_ms: (1, rng.between(1, 10)),
                proposal_timeout: Duration::from_millis(500),
                send_timeout: Duration::from_millis(rng.between(20, 100)),
                broadcast_ms: 50,
            },
            controller_crash_per_million: rng.below(4_000),
            // Drawn last, so that the draws before it keep their values.
            first_ack_crash_per_million: if churn {
                rng.between(200_000, 800_000)
            } else if rng.below(2) == 0 {
                0
            } else {
                rng.below(200_000)
            },
            fig8_schedule: false,
            leave_per_million: 0,
            transfer_per_million: 0,
            maintenance_per_million: 0,
            reassign_per_million: 0,
        };
        // One seed in eight follows the fig. 8 schedule: it brings its own
        // crashes and cuts, and a lossy network or random crashes would
        // only break its chain.
        if rng.below(8) == 0 {
            config.fig8_schedule = true;
            config.node_count = 3;
            config.network.loss_per_million = config.network.loss_per_million.min(10_000);
            config.network.long_delay_per_million = 0;
            config.without_random_faults();
            config.node.replica.max_push_bytes = rng.between(60, 200);
            // A frame per push, pipelined as deep as pushes alone were: the
            // schedule loses exactly the pushes that carry the new epoch,
            // and a frame that also carried the old epoch's suffix would
            // take that with it and break the chain (the other seeds put
            // many pushes in a frame).
            config.node.stream.frame_pushes_max = 1;
            config.node.stream.frames_in_flight_max = 64;
            config.node.stream.queued_bytes_max = usize::MAX;
        }
        // The shard journal and its segment flusher, drawn last so that the
        // draws before keep their values: small files and commits, so that
        // runs roll files, reclaim them, split commits and bypass the
        // journal with large runs; segments filled from every few
        // milliseconds to never before a crash.
        let commit_bytes_max = rng.between(2, 8) << 10;
        let file_bytes = commit_bytes_max * rng.between(2, 8);
        config.node.journal = JournalConfig {
            file_bytes,
            allocate_bytes: (rng.between(1, 4) << 12).min(file_bytes),
            commit_bytes_max: commit_bytes_max as usize,
            bypass_bytes: rng.between(4 << 10, 64 << 10) as usize,
        };
        config.node.segment_flush = SegmentFlush {
            every_ms: rng.between(5, 300),
            bytes: rng.between(1, 64) << 10,
            age: Duration::from_millis(rng.between(20, 2_000)),
            held_max: rng.between(16, 256) << 10,
        };
        // Drawn last as well: one other seed in sixteen is slow and
        // faultless.
        if !config.fig8_schedule && rng.below(16) == 0 {
            config.make_slow_and_faultless(rng);
        }
        // Controlled shutdowns in half the seeds with random faults, drawn
        // after everything else.
        let leave_per_million = if rng.below(2) == 0 {
            rng.between(1_000, 20_000)
        } else {
            0
        };
        if !config.fig8_schedule && !config.node.faultless {
            config.leave_per_million = leave_per_million;
        }
        config.replication_factor = config.node_count;
        config
    }

    /// Operators' leadership transfers and maintenance, in half the seeds
    /// with random faults. Drawn from a generator of their own, so that
    /// every other draw of a seed, and so its run without operators, stays
    /// as it was before operators existed.
    fn draw_operators(&mut self, seed: u64) {
        let mut rng = SplitMix64::new(seed ^ OPERATOR_SEED);
        if rng.below(2) == 0 && !self.fig8_schedule && !self.node.faultless {
            self.transfer_per_million = rng.between(2_000, 20_000);
            self.maintenance_per_million = rng.between(500, 5_000);
            // Nodes beyond the replicas to move them to.
            if self.node_count > 3 {
                self.replication_factor = 3;
                self.reassign_per_million = rng.between(10_000, 40_000);
                self.node.reports_in_sync = true;
            }
        }
    }

    /// No random crash (of nodes or controller processes) and no random
    /// partition.
    fn without_random_faults(&mut self) {
        self.crash_per_million = 0;
        self.leader_crash_per_million = 0;
        self.fresh_leader_crash_per_million = 0;
        self.first_ack_crash_per_million = 0;
        self.partition_per_million = 0;
        self.controller_crash_per_million = 0;
        self.leave_per_million = 0;
        self.transfer_per_million = 0;
        self.maintenance_per_million = 0;
        self.reassign_per_million = 0;
    }

    /// An overloaded cluster, as the leaders see it: no crash, cut or
    /// loss, but every message takes up to 8 times the resend timeout,
    /// and many produces time out before their answers come. Every push is
    /// answered, just late, so no produce may be refused with
    /// `NOT_ENOUGH_REPLICAS` (`NodeSettings::faultless`), and no push may
    /// be resent while it is on its way (the resends would pile up).
    fn make_slow_and_faultless(&mut self, rng: &mut SplitMix64) {
        let resend_ms = self.node.replica.resend_timeout_ms;
        self.network = NetworkFaults {
            loss_per_million: 0,
            duplicate_per_million: 0,
            // A run heals for 2 s: answers must fit many times in it.
            delay_ms: (resend_ms, (resend_ms * rng.between(3, 8)).min(300)),
            long_delay_per_million: 0,
        };
        let round_trip_max = 2 * self.network.delay_ms.1;
        self.without_random_faults();
        self.node.faultless = true;
        // What a window of records per round trip can carry: the clients
        // must not outrun it, or every produce times out in a queue.
        self.node.replica.max_inflight_records = self.node.replica.max_inflight_records.max(64);
        self.client_rate_per_million = rng.between(20_000, 100_000);
        // Frames are given up only well after their answers come: a
        // transport that times out a push that is merely late makes it
        // lost, and the follower unreachable.
        self.node.push_timeout = Duration::from_millis(round_trip_max * 6);
        self.node.stream.queued_bytes_max = usize::MAX;
        let produce_timeout_ms = rng.between(round_trip_max, round_trip_max * 2);
        self.node.produce_timeout = Duration::from_millis(produce_timeout_ms);
        // A client waits for the answer of a produce that timed out, so
        // that it counts progress rather than abandoning every request.
        self.client_request_timeout_ms = produce_timeout_ms + round_trip_max + 100;
        // Now and then the leader takes in nothing for longer than a
        // produce waits (an overloaded process): no follower's answer
        // arrives during the wait, though every one is on its way, and the
        // frames are answered before their timeout.
        self.stall_per_million = 5_000;
        self.stall_ms = (produce_timeout_ms, produce_timeout_ms + round_trip_max);
        // Sessions and controller calls outlast the delays: a broker fenced
        // for a late heartbeat would be a fault.
        let session_ms = round_trip_max * 10;
        self.controller.session_timeout = Duration::from_millis(session_ms);
        self.node.heartbeat_ms = session_ms / 8;
        self.controller.voters = 1;
        self.controller.query_timeout = Duration::from_millis(round_trip_max * 4);
        self.controller.send_timeout = Duration::from_millis(round_trip_max * 4);
    }
}

/// What a successful run did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// Appends acknowledged to clients.
    pub acknowledged: u64,
    /// Batches committed.
    pub committed: usize,
    /// Election rounds.
    pub rounds: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Partitions formed.
    pub partitions: u64,
    /// Task polls.
    pub polls: u64,
    /// Coverage of the interesting paths.
    pub stats: Stats,
}

/// A failed run: which seed, when, what.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Simulated time of the violation, milliseconds.
    pub time_ms: u64,
    /// What was violated.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sim seed {} failed at {} ms: {}\n  replay: make sim SEED={}",
            self.seed, self.time_ms, self.message, self.seed
        )
    }
}

/// What the checker last saw of a node's replica: a step that changes
/// none of it needs no new check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Observation {
    who: Incarnation,
    generation: u64,
    high_watermark: Offset,
    role: RoleView,
    log_start: Offset,
    log_end: Offset,
    durable_end: Offset,
}

/// The checker's per-node memory.
#[derive(Debug, Default)]
struct Watch {
    last: Option<Observation>,
    /// Disk generation of `fence` and `led`.
    fence_generation: Option<u64>,
    /// The durably promised epoch.
    fence: LeaderEpoch,
    /// The epoch durably recorded as led.
    led: Option<LeaderEpoch>,
    cache: ViewCache,
}

/// Who brings a crashed node back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    /// It restarts after a random down time.
    AfterDownTime,
    /// The fig. 8 schedule restarts it; what it had sent is lost with it.
    BySchedule,
}

/// A node's leadership, as the fault injector first saw it.
#[derive(Clone, Copy, Debug)]
struct Leadership {
    epoch: LeaderEpoch,
    since_ms: u64,
    /// The high watermark then: until it moves, nothing of this epoch is
    /// committed.
    high_watermark: Offset,
}

/// The whole simulated world.
struct Sim {
    seed: u64,
    config: SimConfig,
    world: Rc<World>,
    nodes: BTreeMap<u32, Node>,
    controller: Controller,
    clients: BTreeMap<u32, Client>,
    checker: Checker,
    watches: BTreeMap<u32, Watch>,
    /// A step removed data (a crash): check durability after it.
    removed: Option<&'static str>,
    /// Each node's current leadership as first seen.
    leaderships: BTreeMap<u32, Leadership>,
    /// The transfer an operator asked for: to which node, given up when.
    transfer: Option<(u32, u64)>,
    /// The partition's move in progress when last looked at, and the
    /// metadata version it was seen in.
    moving: (u64, Option<MoveView>),
    /// The partition [`COPYING_WINDOW_MS`] before the run ends: a move
    /// still in progress must have moved on since.
    near_the_end: Option<NearTheEnd>,
    /// Nodes to crash once the tasks ready now have run.
    crash_soon: Vec<(u32, Restart)>,
    /// The fig. 8 schedule, on the seeds that follow it.
    schedule: Option<Fig8Schedule>,
    rng: SplitMix64,
    stats: Rc<RefCell<Stats>>,
    outcome: Outcome,
}

/// Runs `seed`; prints its trace if `trace`.
///
/// # Errors
/// The first invariant violation, or a lack of progress once healed.
pub fn run(seed: u64, trace: bool) -> Result<Outcome, Failure> {
    NOW_MS.with(|now| now.set(0));
    let mut rng = SplitMix64::new(seed);
    let mut config = SimConfig::draw(&mut rng);
    config.draw_operators(seed);
    let trace = Trace::new(trace);
    let network = Network::new(config.network, rng.fork());
    let world = Rc::new(World::new(SimExecutor::new(), network, trace));
    world.log(|| format!("seed {seed}: {config:?}"));
    let ids: Vec<u32> = (1..=config.node_count).collect();
    let client_ids = vec![1, 2];
    let settings = Rc::new(config.node.clone());
    let stats = Rc::new(RefCell::new(Stats {
        slow_runs: u64::from(config.node.faultless),
        ..Stats::default()
    }));
    let nodes = ids
        .iter()
        .map(|id| {
            let delay = SyncDelay::new(world.executor.clone(), rng.fork(), settings.sync_ms);
            let node = Node::new(*id, world.clone(), settings.clone(), delay, stats.clone());
            (*id, node)
        })
        .collect();
    let controller = Controller::new(
        world.clone(),
        config.controller,
        &ids,
        config.replication_factor as usize,
        &client_ids,
        rng.fork(),
    );
    let clients = client_ids
        .iter()
        .map(|id| {
            let client = Client::new(
                *id,
                ids.clone(),
                config.client_rate_per_million,
                config.client_request_timeout_ms,
            );
            (*id, client)
        })
        .collect();
    let schedule = config.fig8_schedule.then(Fig8Schedule::default);
    let mut sim = Sim {
        seed,
        checker: Checker::new(config.node.log.batch_limits),
        config,
        world,
        nodes,
        controller,
        clients,
        watches: BTreeMap::new(),
        removed: None,
        leaderships: BTreeMap::new(),
        transfer: None,
        moving: (0, None),
        near_the_end: None,
        crash_soon: Vec::new(),
        schedule,
        rng,
        stats,
        outcome: Outcome::default(),
    };
    sim.run()?;
    Ok(sim.outcome)
}

impl Sim {
    fn fail(&self, message: String) -> Failure {
        Failure {
            seed: self.seed,
            time_ms: self.world.now_ms(),
            message,
        }
    }

    fn run(&mut self) -> Result<(), Failure> {
        let end_ms = CHAOS_MS + HEAL_MS;
        let mut next_tick_ms = 0;
        let mut healed = false;
        loop {
            self.run_ready()?;
            if !self.crash_soon.is_empty() {
                self.crash_soon_now();
                self.check()?;
                self.drive_schedule();
            }
            let executor = &self.world.executor;
            let next = [
                Some(next_tick_ms),
                self.world.network.borrow().next_due(),
                executor.next_timer_ms(),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(next_tick_ms);
            if next > end_ms {
                break;
            }
            executor.advance_to(next);
            NOW_MS.with(|now| now.set(next));
            if !healed && next >= CHAOS_MS {
                healed = true;
                self.heal();
            }
            loop {
                let envelope = self.world.network.borrow_mut().deliver(next);
                let Some(envelope) = envelope else {
                    break;
                };
                self.deliver(envelope);
                self.drive_schedule();
            }
            if next_tick_ms <= next {
                self.tick(healed);
                next_tick_ms += TICK_MS;
            }
            self.check()?;
        }
        self.removed = Some("the end of the run");
        self.check()?;
        self.check_progress()
    }

    /// Polls every ready task, checking after each.
    fn run_ready(&mut self) -> Result<(), Failure> {
        let mut polls = 0;
        while self.world.executor.poll_one() {
            polls += 1;
            self.outcome.polls += 1;
            self.check()?;
            self.drive_schedule();
            if polls > POLLS_PER_INSTANT_MAX {
                return Err(self.fail(format!(
                    "livelock: {POLLS_PER_INSTANT_MAX} task polls without time moving"
                )));
            }
        }
        Ok(())
    }

    fn deliver(&mut self, envelope: Envelope) {
        let Envelope { from, to, message } = envelope;
        match to {
            Endpoint::Node(id) => {
                let push_answer = matches!(
                    message,
                    Message::Answer {
                        answer: Answer::Stream(_),
                        ..
                    }
                );
                if push_answer && self.world.now_ms() < CHAOS_MS {
                    self.maybe_crash_after_first_ack(id);
                }
                if let (Some(schedule), Endpoint::Node(sender)) = (&mut self.schedule, from)
                    && self.world.now_ms() < CHAOS_MS
                {
                    let limits = self.config.node.log.batch_limits;
                    let pushed_epoch = match &message {
                        Message::Stream { raw, .. } => batch::batches(raw, &limits)
                            .flatten()
                            .filter_map(|found| found.header.leader_epoch())
                            .max(),
                        _ => None,
                    };
                    let now_ms = self.world.now_ms();
                    let acts = schedule.on_deliver(sender, id, push_answer, pushed_epoch, now_ms);
                    if acts.contains(&Act::Lose) {
                        self.world.log(|| {
                            format!("fig. 8 schedule: loses a stream frame {sender} -> {id}")
                        });
                        return;
                    }
                    self.carry_out_schedule(acts);
                }
                if let Some(node) = self.nodes.get_mut(&id) {
                    node.receive(from, message);
                }
            }
            Endpoint::Controller(id) => self.controller.receive(id, from, message),
            Endpoint::Client(id) => {
                if let Some(client) = self.clients.get_mut(&id) {
                    client.receive(message);
                }
            }
        }
    }

    fn tick(&mut self, healed: bool) {
        if !healed {
            self.inject_faults();
        }
        if self.config.reassign_per_million > 0 {
            self.observe_move();
            if self.near_the_end.is_none()
                && self.world.now_ms() + COPYING_WINDOW_MS >= CHAOS_MS + HEAL_MS
            {
                self.near_the_end = Some(self.partition_now());
            }
        }
        self.world
            .network
            .borrow_mut()
            .heal_due(self.world.now_ms());
        for node in self.nodes.values_mut() {
            let maintain = self
                .rng
                .chance_per_million(self.config.maintain_per_million);
            node.tick(maintain);
        }
        let stopping: Vec<(u32, Option<u64>)> = self
            .nodes
            .values()
            .filter_map(|node| Some((node.id(), node.ready_to_stop()?)))
            .collect();
        let session_ms = self.config.controller.session_timeout.as_millis() as u64;
        for (id, moved_after_ms) in stopping {
            self.world.log(|| {
                format!(
                    "{id}: stops after its controlled shutdown (leadership moved after {moved_after_ms:?} ms)"
                )
            });
            // Moved sooner than a silent node's session expires: the
            // controller fenced it on its word, not on its silence.
            let handed_off = moved_after_ms.is_some_and(|ms| ms < session_ms);
            let mut stats = self.stats.borrow_mut();
            stats.controlled_stops += 1;
            stats.handed_off += u64::from(handed_off);
            drop(stats);
            self.crash(id, Restart::AfterDownTime);
        }
        self.controller.tick();
        let timestamp = wall_clock(self.world.now_ms());
        for client in self.clients.values_mut() {
            client.tick(&self.world, &mut self.rng, timestamp);
        }
    }

    /// An operator's leadership transfers and maintenance, at their
    /// configured rates; counts the transfers that took effect.
    fn operate(&mut self) {
        // No draw at all on the seeds without them, so that they replay as
        // before.
        if self.config.transfer_per_million == 0 && self.config.maintenance_per_million == 0 {
            return;
        }
        if self.config.reassign_per_million > 0 {
            self.reassign();
        }
        let now_ms = self.world.now_ms();
        if let Some((to, give_up_ms)) = self.transfer {
            if self.leadership(to).is_some() {
                self.stats.borrow_mut().transfers_done += 1;
                self.transfer = None;
            } else if now_ms >= give_up_ms {
                self.world.log(|| format!("transfer to {to}: given up"));
                self.transfer = None;
            }
        }
        let ids: Vec<u32> = self.nodes.keys().copied().collect();
        if self.transfer.is_none()
            && self
                .rng
                .chance_per_million(self.config.transfer_per_million)
        {
            // As `elect-leader` checks: a replica that is up and not in
            // maintenance.
            let to = ids[self.rng.below(ids.len() as u64) as usize];
            let eligible = !self.nodes[&to].is_down()
                && self.controller.in_maintenance() != Some(to)
                && self.leadership(to).is_none()
                && self
                    .controller
                    .published()
                    .is_some_and(|published| published.replicas.contains(&to));
            if eligible && self.controller.request_transfer(to) {
                self.stats.borrow_mut().transfers_requested += 1;
                let timeout_ms = self.config.controller.elections.retry_interval.as_millis() as u64;
                self.transfer = Some((to, now_ms + 20 * timeout_ms));
            }
        }
        if self
            .rng
            .chance_per_million(self.config.maintenance_per_million)
        {
            let change = match self.controller.in_maintenance() {
                Some(node) => (node, false),
                None => (ids[self.rng.below(ids.len() as u64) as usize], true),
            };
            if self.controller.set_maintenance(change.0, change.1) {
                self.stats.borrow_mut().maintenance_changes += 1;
            }
        }
    }

    /// An operator's moves of the partition: one or two replicas replaced
    /// by nodes outside the set, sometimes throttled, now and then
    /// cancelled; or a node decommissioned (the controller leader then
    /// moves the partition off it) or recommissioned; counts the moves
    /// that ended.
    fn reassign(&mut self) {
        if !self
            .rng
            .chance_per_million(self.config.reassign_per_million)
        {
            return;
        }
        let Some(published) = self.controller.published() else {
            return;
        };
        if self.rng.below(4) == 0 {
            self.decommission(&published.replicas);
            return;
        }
        if self.moving.1.is_some() {
            if self.rng.below(4) == 0 && self.controller.cancel_reassignment() {
                self.stats.borrow_mut().reassignments_cancelled += 1;
            }
            return;
        }
        let mut target = published.replicas;
        let mut outside: Vec<u32> = self
            .nodes
            .keys()
            .copied()
            .filter(|id| !target.contains(id))
            .collect();
        if target.is_empty() || outside.is_empty() {
            return;
        }
        let swaps = 1 + self.rng.below(outside.len().min(2) as u64) as usize;
        for _ in 0..swaps {
            let into = outside.remove(self.rng.below(outside.len() as u64) as usize);
            let slot = self.rng.below(target.len() as u64) as usize;
            target[slot] = into;
        }
        // A preferred leader anywhere in the set.
        let turn = self.rng.below(target.len() as u64) as usize;
        target.rotate_left(turn);
        let throttle = if self.rng.below(2) == 0 {
            0
        } else {
            self.rng.between(2_000, 50_000)
        };
        self.controller.start_reassignment(&target, throttle);
    }

    /// An operator decommissions a node of the partition's `replicas` (the
    /// controller leader then moves the partition off it), or
    /// recommissions the node being decommissioned: once the partition is
    /// off it, or now and then before (turning its move back).
    fn decommission(&mut self, replicas: &[u32]) {
        match self.controller.decommissioning() {
            Some(node) => {
                let done = !replicas.contains(&node);
                if (done || self.rng.below(4) == 0) && self.controller.set_decommission(node, None)
                {
                    let mut stats = self.stats.borrow_mut();
                    stats.recommissions += 1;
                    stats.decommissions_done += u64::from(done);
                }
            }
            None if !replicas.is_empty() => {
                let node = replicas[self.rng.below(replicas.len() as u64) as usize];
                let max_moves = 1 + self.rng.below(2) as u16;
                if self.controller.set_decommission(node, Some(max_moves)) {
                    self.stats.borrow_mut().decommissions += 1;
                }
            }
            None => {}
        }
    }

    /// Counts the moves that started and ended, as the most advanced
    /// controller process's metadata shows them (one behind the last view
    /// is not looked at: it would show an ended move as not yet started).
    fn observe_move(&mut self) {
        let Some((version, moving)) = self.controller.move_view() else {
            return;
        };
        let (seen_version, seen) = self.moving;
        if version < seen_version {
            return;
        }
        if moving.map(|view| view.started_at_ms) != seen.map(|view| view.started_at_ms) {
            let mut stats = self.stats.borrow_mut();
            if seen.is_some() {
                stats.reassignments_ended += 1;
            }
            if moving.is_some() {
                stats.reassignments_started += 1;
            }
        }
        self.moving = (version, moving);
    }

    /// The partition's sets, log ends and committed end now.
    fn partition_now(&self) -> NearTheEnd {
        let published = self.controller.published();
        NearTheEnd {
            leader: published.as_ref().and_then(|published| published.leader),
            sets: published
                .map(|published| (published.replicas, published.learners))
                .unwrap_or_default(),
            ends: self
                .nodes
                .values()
                .filter_map(|node| Some((node.id(), node.replica()?.appended_end())))
                .collect(),
            committed: self
                .nodes
                .values()
                .filter_map(|node| Some(node.replica()?.high_watermark()))
                .max()
                .unwrap_or(Offset(0)),
        }
    }

    /// Why a move still in progress at the end of the run is stalled, if it
    /// is. Once healed its steps wait only for reports, rounds and its
    /// learner: in the last [`COPYING_WINDOW_MS`] it took a step (changed
    /// the set, or moved the leadership off a leaving replica), or its
    /// next learner (the first) copied without holding the committed log
    /// at the start (a throttled move, or one copying about as fast as
    /// producers append).
    fn move_stall(&self) -> Option<String> {
        let before = self.near_the_end.as_ref()?;
        let now = self.partition_now();
        if now.sets != before.sets || now.leader != before.leader {
            return None;
        }
        let Some(learner) = now.sets.1.first() else {
            return Some(format!(
                "it waits for no learner and took no step in the last {COPYING_WINDOW_MS} ms"
            ));
        };
        let (earlier, end) = (before.ends.get(learner), now.ends.get(learner));
        match (earlier, end) {
            (Some(earlier), _) if *earlier >= before.committed => Some(format!(
                "learner {learner} held the committed log {COPYING_WINDOW_MS} ms ago (end \
                 {earlier}, committed {}) and was not added",
                before.committed
            )),
            (Some(earlier), Some(end)) if end > earlier => None,
            _ => Some(format!(
                "learner {learner} copied nothing in the last {COPYING_WINDOW_MS} ms (end \
                 {end:?}, before {earlier:?})"
            )),
        }
    }

    /// The leadership `id` holds now, recorded as first seen.
    fn leadership(&mut self, id: u32) -> Option<Leadership> {
        let replica = self.nodes.get(&id)?.replica();
        let Some(RoleView::Leader { epoch, .. }) = replica.as_ref().map(|replica| replica.role())
        else {
            self.leaderships.remove(&id);
            return None;
        };
        let seen = Leadership {
            epoch,
            since_ms: self.world.now_ms(),
            high_watermark: replica.map_or(Offset(0), |replica| replica.high_watermark()),
        };
        let known = self.leaderships.entry(id).or_insert(seen);
        if known.epoch != epoch {
            *known = seen;
        }
        Some(*known)
    }

    /// A push answer is reaching `id`: if it leads an epoch that has
    /// committed nothing yet, perhaps crash it once the answer is handled.
    fn maybe_crash_after_first_ack(&mut self, id: u32) {
        let Some(leadership) = self.leadership(id) else {
            return;
        };
        let committed_nothing = self.nodes[&id]
            .replica()
            .is_some_and(|replica| replica.high_watermark() == leadership.high_watermark);
        if committed_nothing
            && self
                .rng
                .chance_per_million(self.config.first_ack_crash_per_million)
        {
            self.world
                .log(|| format!("{id}: crashes once its first push answer is handled"));
            self.crash_soon.push((id, Restart::AfterDownTime));
        }
    }

    fn crash_soon_now(&mut self) {
        for (id, restart) in std::mem::take(&mut self.crash_soon) {
            self.crash(id, restart);
        }
    }

    /// Lets the fig. 8 schedule look at the nodes, and does what it asks.
    fn drive_schedule(&mut self) {
        let now_ms = self.world.now_ms();
        if now_ms >= CHAOS_MS {
            return;
        }
        let Some(schedule) = &mut self.schedule else {
            return;
        };
        let views: Vec<NodeView> = self
            .nodes
            .values()
            .map(|node| {
                let replica = node.replica();
                let role = replica
                    .as_ref()
                    .map_or(RoleView::Offline, |replica| replica.role());
                let marker = match (&replica, role) {
                    (Some(replica), RoleView::Leader { epoch, .. }) => {
                        replica.meta().history.start_of(epoch)
                    }
                    _ => None,
                };
                NodeView {
                    id: node.id(),
                    down: node.is_down() || replica.is_none(),
                    role,
                    appended_end: replica
                        .as_ref()
                        .map_or(Offset(0), |replica| replica.appended_end()),
                    durable_end: replica
                        .as_ref()
                        .map_or(Offset(0), |replica| replica.durable_end()),
                    marker,
                }
            })
            .collect();
        let chains = schedule.completed;
        let acts = schedule.observe(&views, now_ms);
        if schedule.completed > chains {
            self.stats.borrow_mut().fig8_chains += 1;
        }
        self.carry_out_schedule(acts);
    }

    fn carry_out_schedule(&mut self, acts: Vec<Act>) {
        for act in acts {
            self.world.log(|| format!("fig. 8 schedule: {act:?}"));
            match act {
                Act::Cut { from, to } => self
                    .world
                    .network
                    .borrow_mut()
                    .cut(Endpoint::Node(from), Endpoint::Node(to)),
                Act::HealCuts => self.world.network.borrow_mut().heal_cuts(),
                Act::Crash(id) => self.crash(id, Restart::BySchedule),
                Act::CrashAfterHandling(id) => {
                    self.stats.borrow_mut().fig8_suffixes += 1;
                    self.crash_soon.push((id, Restart::BySchedule));
                }
                Act::Lose => {}
                Act::Restart(id) => {
                    if let Some(node) = self.nodes.get_mut(&id) {
                        node.restart();
                    }
                }
            }
        }
    }

    fn crash(&mut self, id: u32, restart: Restart) {
        let restart_at = match restart {
            Restart::AfterDownTime => {
                let (low, high) = self.config.restart_ms;
                self.world.now_ms() + self.rng.between(low, high)
            }
            Restart::BySchedule => {
                self.world
                    .network
                    .borrow_mut()
                    .lose_in_flight_from(Endpoint::Node(id));
                u64::MAX
            }
        };
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        if !node.is_down() {
            self.outcome.crashes += 1;
            node.crash(restart_at);
            self.removed = Some("a crash");
        }
    }

    fn inject_faults(&mut self) {
        let now_ms = self.world.now_ms();
        let ids: Vec<u32> = self.nodes.keys().copied().collect();
        for id in ids {
            let leading = self.leadership(id);
            let fresh =
                leading.is_some_and(|leadership| now_ms < leadership.since_ms + FRESH_LEADER_MS);
            let mut chance = self.config.crash_per_million;
            if leading.is_some() {
                chance += self.config.leader_crash_per_million;
            }
            if fresh {
                chance += self.config.fresh_leader_crash_per_million;
            }
            if !self.nodes[&id].is_down() && self.rng.chance_per_million(chance) {
                self.crash(id, Restart::AfterDownTime);
            } else if leading.is_some()
                && self.rng.chance_per_million(self.config.leave_per_million)
            {
                // The broker waits 10 s against a 2 s session timeout.
                let until_ms =
                    now_ms + 3 * self.config.controller.session_timeout.as_millis() as u64;
                if let Some(node) = self.nodes.get_mut(&id)
                    && node.leave(until_ms)
                {
                    self.world
                        .log(|| format!("{id}: controlled shutdown, stops by {until_ms}"));
                }
            }
        }
        for id in self.controller.ids() {
            if !self.controller.is_down(id)
                && self
                    .rng
                    .chance_per_million(self.config.controller_crash_per_million)
            {
                let (low, high) = self.config.restart_ms;
                let restart_at = now_ms + self.rng.between(low, high);
                self.stats.borrow_mut().controller_crashes += 1;
                self.controller.crash(id, restart_at);
            }
        }
        if self
            .rng
            .chance_per_million(self.config.partition_per_million)
        {
            self.form_partition();
        }
        self.operate();
        if self.config.stall_per_million > 0
            && self.rng.chance_per_million(self.config.stall_per_million)
        {
            let ids: Vec<u32> = self.nodes.keys().copied().collect();
            let leader = ids.into_iter().find(|id| self.leadership(*id).is_some());
            // One stall at a time, over before the run heals.
            let stalled = |id| {
                self.world
                    .network
                    .borrow()
                    .is_stalled(Endpoint::Node(id), now_ms)
            };
            if let Some(leader) = leader.filter(|id| !stalled(*id)) {
                let (low, high) = self.config.stall_ms;
                let until = (now_ms + self.rng.between(low, high)).min(CHAOS_MS);
                self.world
                    .log(|| format!("stall: node {leader} takes in nothing until {until} ms"));
                self.world
                    .network
                    .borrow_mut()
                    .stall(Endpoint::Node(leader), until);
            }
        }
    }

    /// A random partition: a node or a controller process isolated, the
    /// cluster split in two, a one-way link failure, or a node cut from
    /// every controller process.
    fn form_partition(&mut self) {
        let nodes: Vec<Endpoint> = self.nodes.keys().map(|id| Endpoint::Node(*id)).collect();
        let controllers: Vec<Endpoint> = self
            .controller
            .ids()
            .into_iter()
            .map(Endpoint::Controller)
            .collect();
        let servers: Vec<Endpoint> = nodes.iter().chain(&controllers).copied().collect();
        let mut everyone = servers.clone();
        everyone.extend(self.clients.keys().map(|id| Endpoint::Client(*id)));
        let pick = |rng: &mut SplitMix64, from: &[Endpoint]| from[rng.index(from.len())];
        let mut links = BTreeSet::new();
        let kind = self.rng.below(4);
        match kind {
            0 => {
                let isolated = pick(&mut self.rng, &servers);
                for other in &everyone {
                    if *other != isolated {
                        links.insert((isolated, *other));
                        links.insert((*other, isolated));
                    }
                }
            }
            1 => {
                let side: BTreeSet<Endpoint> = everyone
                    .iter()
                    .copied()
                    .filter(|_| self.rng.below(2) == 0)
                    .collect();
                for a in &everyone {
                    for b in &everyone {
                        if side.contains(a) != side.contains(b) {
                            links.insert((*a, *b));
                        }
                    }
                }
            }
            2 => {
                let from = pick(&mut self.rng, &everyone);
                let to = pick(&mut self.rng, &nodes);
                if from != to {
                    links.insert((from, to));
                }
            }
            _ => {
                let node = pick(&mut self.rng, &nodes);
                for controller in &controllers {
                    links.insert((node, *controller));
                    links.insert((*controller, node));
                }
            }
        }
        let (low, high) = self.config.partition_ms;
        let heal_at = self.world.now_ms() + self.rng.between(low, high);
        self.outcome.partitions += 1;
        self.world
            .log(|| format!("partition {kind} until {heal_at}: {links:?}"));
        self.world.network.borrow_mut().partition(links, heal_at);
    }

    /// The end of the faulty phase: heal the network, restart every node,
    /// and start counting progress.
    fn heal(&mut self) {
        self.world
            .log(|| "heal: network healed, nodes restarting".to_string());
        self.world.network.borrow_mut().heal_all();
        let now = self.world.now_ms();
        for client in self.clients.values_mut() {
            client.mark(now);
        }
        for node in self.nodes.values_mut() {
            node.restart();
        }
        self.controller.restart_all();
    }

    /// Checks every invariant the last step may have touched.
    fn check(&mut self) -> Result<(), Failure> {
        let limits = self.config.node.log.batch_limits;
        let dir = Path::new(PARTITION_DIR);
        let mut fences_moved = false;
        let mut removed = self.removed.take();
        for node in self.nodes.values() {
            let id = node.id();
            let watch = self.watches.entry(id).or_default();
            let generation = node.disk().generation();
            if watch.fence_generation != Some(generation) {
                watch.fence_generation = Some(generation);
                match durable_promise(node.disk(), dir) {
                    Ok((fence, led)) => {
                        fences_moved |= fence != watch.fence;
                        watch.fence = fence;
                        watch.led = led;
                    }
                    Err(error) => self.checker.report(format!("node {id}: {error}")),
                }
            }
            let Some(replica) = node.replica() else {
                continue;
            };
            if self.config.node.faultless && replica.resends() > 0 {
                // Nothing was lost: a resend gave a slow follower its
                // pushes twice.
                self.checker.report(format!(
                    "node {id} resent to a follower with nothing lost (slow is not gone)"
                ));
            }
            let who = node.incarnation();
            let observation = Observation {
                who,
                generation,
                high_watermark: replica.high_watermark(),
                role: replica.role(),
                log_start: replica.log_start(),
                log_end: replica.appended_end(),
                durable_end: replica.durable_end(),
            };
            let previous = watch.last.filter(|seen| seen.who == who);
            if previous == Some(observation) {
                continue;
            }
            watch.last = Some(observation);
            if let Some(reason) = replica.broken() {
                self.checker.report(format!(
                    "{who:?}: replica fenced without a disk fault: {reason}"
                ));
                continue;
            }
            if let Some(previous) = previous {
                let moved_start = observation.log_start != previous.log_start;
                if moved_start && observation.log_end != previous.log_end {
                    self.stats.borrow_mut().resets += 1;
                    removed = Some("a reset");
                } else if observation.log_end < previous.log_end {
                    self.stats.borrow_mut().truncations += 1;
                    removed = Some("a truncation");
                } else if moved_start {
                    removed.get_or_insert("retention");
                }
            }
            let view = match current_view(node.disk(), dir, &limits, &mut watch.cache) {
                Ok(view) => view,
                Err(error) => {
                    self.checker.report(format!("node {id}: {error}"));
                    continue;
                }
            };
            let leading = match observation.role {
                RoleView::Leader { epoch, .. } => Some(epoch),
                _ => None,
            };
            // A leadership counts once it is durable: before, the replica
            // appends nothing in it, and a crash then forgets it (so the
            // restarted process may take the same epoch, harmlessly).
            if let Some(epoch) = leading
                && watch.led == Some(epoch)
            {
                fences_moved |= self.checker.on_leader(who, epoch);
            }
            self.checker
                .on_high_watermark(who, observation.high_watermark, &view, leading);
            if let Some(epoch) = leading {
                self.checker
                    .check_leader_holds(who, epoch, &view, observation.durable_end);
                if let Some(start) = replica.meta().history.start_of(epoch) {
                    self.checker.check_leader_covers_acknowledged(
                        who,
                        epoch,
                        observation.high_watermark,
                        start,
                    );
                }
            }
        }
        if fences_moved {
            let fences: BTreeMap<u32, LeaderEpoch> = self
                .watches
                .iter()
                .map(|(id, watch)| (*id, watch.fence))
                .collect();
            let nodes = &self.nodes;
            self.checker.track_fences(&fences, |who| {
                let node = nodes.get(&who.0).filter(|node| node.incarnation() == who)?;
                Some(node.replica()?.appended_end())
            });
        }
        if let Err(violation) = self.controller.check() {
            self.checker.report(violation);
        }
        let reports = std::mem::take(&mut *self.world.reports.borrow_mut());
        for report in reports {
            match report {
                Report::Acknowledged {
                    by,
                    client,
                    request,
                    base,
                    values,
                } => {
                    self.world.log(|| {
                        format!(
                            "{}: acknowledged client {client} request {request} at {base}",
                            by.0
                        )
                    });
                    self.checker.on_acknowledged(by, base, &values);
                }
                Report::Violation(message) => self.checker.report(message),
            }
        }
        if let Some(why) = removed {
            let disks: Result<BTreeMap<u32, LogView>, String> = self
                .nodes
                .values()
                .map(|node| Ok((node.id(), durable_view(node.disk(), dir, &limits)?)))
                .collect();
            match disks {
                Ok(disks) if self.config.replication_factor < self.config.node_count => {
                    // The partition lives on a subset that moves: what is
                    // committed must be on enough of the current set that
                    // every election quorum of it holds it.
                    let set = self
                        .controller
                        .published()
                        .map(|published| published.replicas)
                        .unwrap_or_default();
                    let on_set: BTreeMap<u32, LogView> = disks
                        .into_iter()
                        .filter(|(id, _)| set.contains(id))
                        .collect();
                    self.checker.check_durability_for_elections(&on_set, why);
                }
                Ok(disks) => self.checker.check_durability(&disks, why),
                Err(error) => self.checker.report(error),
            }
        }
        match self.checker.violation() {
            Some(violation) => Err(self.fail(violation.to_string())),
            None => Ok(()),
        }
    }

    /// Liveness: after healing, the cluster must have acknowledged appends
    /// that clients sent after the heal.
    fn check_progress(&mut self) -> Result<(), Failure> {
        self.outcome.acknowledged = self.checker.ack_count;
        self.outcome.committed = self.checker.committed_count();
        self.outcome.rounds = self.controller.rounds();
        {
            let mut stats = self.stats.borrow_mut();
            // A decommission still marked at the end, its node off the
            // partition.
            if let Some(node) = self.controller.decommissioning()
                && let Some(published) = self.controller.published()
                && !published.replicas.contains(&node)
            {
                stats.decommissions_done += 1;
            }
            stats.controller_terms = self.controller.terms_led();
            stats.controller_restarts = self.controller.restarts;
        }
        self.outcome.stats = *self.stats.borrow();
        let progress: u64 = self
            .clients
            .values()
            .map(|client| client.acknowledged_since_mark)
            .sum();
        if let (_, Some(moving)) = self.moving
            && let Some(stall) = self.move_stall()
        {
            return Err(self.fail(format!(
                "the move started at {} ms did not end in the {HEAL_MS} ms after healing, \
                 and {stall}; controller publishes {:?}",
                moving.started_at_ms,
                self.controller.published()
            )));
        }
        if progress == 0 {
            let roles: Vec<String> = self
                .nodes
                .values()
                .map(|node| match node.replica() {
                    Some(replica) => format!(
                        "{}: {:?} hw {} durable end {}",
                        node.id(),
                        replica.role(),
                        replica.high_watermark(),
                        replica.durable_end()
                    ),
                    None => format!("{}: down or opening", node.id()),
                })
                .collect();
            return Err(self.fail(format!(
                "no append acknowledged in {HEAL_MS} ms after healing; controller publishes \
                 {:?}; {}",
                self.controller.published(),
                roles.join("; ")
            )));
        }
        Ok(())
    }
}
