//! One simulated run: a cluster built from a seed, driven through a chaotic
//! phase and a healed phase, with every invariant checked after every
//! event.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use corelog_replication::{PartitionKey, ReplicaConfig, ReplicaId};

use crate::checker::Checker;
use crate::client::Client;
use crate::controller_model::Controller;
use crate::disk::Disk;
use crate::network::{Endpoint, Envelope, Network, NetworkFaults};
use crate::node::{Ctx, Node, Stats};
use crate::rng::Rng;
use crate::trace::Trace;

/// Timer resolution: nodes, the controller and clients tick this often,
/// milliseconds. Messages and fsyncs complete at their exact times.
pub const TICK_MS: u64 = 5;
/// Length of the faulty phase, milliseconds of simulated time.
pub const CHAOS_MS: u64 = 2_000;
/// Length of the healed phase that follows, in which the cluster must
/// elect a leader and acknowledge new appends.
pub const HEAL_MS: u64 = 1_500;

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

/// The one partition simulated.
const PARTITION: PartitionKey = PartitionKey(1);

/// Everything about a run that the seed decides before it starts.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nodes (replicas), 3 to 5.
    pub node_count: u32,
    /// Network fault rates.
    pub network: NetworkFaults,
    /// Fsync delay range, milliseconds.
    pub fsync_ms: (u64, u64),
    /// Crash chance per node per tick, per million.
    pub crash_per_million: u64,
    /// Down time range after a crash, milliseconds.
    pub restart_ms: (u64, u64),
    /// Chance per tick that a partition forms, per million.
    pub partition_per_million: u64,
    /// Partition duration range, milliseconds.
    pub partition_ms: (u64, u64),
    /// Retention chance per node per tick, per million.
    pub retention_per_million: u64,
    /// Append chance per client per tick, per million.
    pub client_rate_per_million: u64,
    /// The replicas' tunables.
    pub replica: ReplicaConfig,
}

impl SimConfig {
    /// Draws a configuration: some seeds are calm, some very faulty.
    #[must_use]
    pub fn draw(rng: &mut Rng) -> Self {
        let delay_high = rng.between(1, 20);
        let fsync_high = rng.between(1, 15);
        Self {
            node_count: rng.between(3, 5) as u32,
            network: NetworkFaults {
                loss_per_million: rng.below(100_000),
                duplicate_per_million: rng.below(50_000),
                delay_ms: (1, delay_high),
                long_delay_per_million: rng.below(20_000),
            },
            fsync_ms: (1, fsync_high),
            crash_per_million: rng.below(2_500),
            restart_ms: (rng.between(5, 50), rng.between(50, 400)),
            partition_per_million: rng.below(10_000),
            partition_ms: (20, rng.between(50, 600)),
            retention_per_million: rng.below(4_000),
            client_rate_per_million: rng.between(100_000, 500_000),
            replica: ReplicaConfig {
                resend_timeout_ms: rng.between(30, 120),
                heartbeat_interval_ms: rng.between(10, 50),
                max_inflight_records: rng.between(4, 64),
                max_push_bytes: rng.between(30, 400),
            },
        }
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
    /// Events processed.
    pub events: u64,
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

/// The whole simulated world.
#[derive(Debug)]
struct Sim {
    seed: u64,
    config: SimConfig,
    now_ms: u64,
    nodes: BTreeMap<ReplicaId, Node>,
    controller: Controller,
    clients: BTreeMap<u32, Client>,
    network: Network,
    checker: Checker,
    rng: Rng,
    trace: Trace,
    outcome: Outcome,
}

/// Runs `seed`; prints its trace if `trace`.
///
/// # Errors
/// The first invariant violation, or a lack of progress once healed.
pub fn run(seed: u64, trace: bool) -> Result<Outcome, Failure> {
    NOW_MS.with(|now| now.set(0));
    let mut rng = Rng::new(seed);
    let config = SimConfig::draw(&mut rng);
    let mut trace = Trace::new(trace);
    trace.log(0, || format!("seed {seed}: {config:?}"));
    let replicas: Vec<ReplicaId> = (1..=config.node_count).map(ReplicaId).collect();
    let client_ids = vec![1, 2];
    let network = Network::new(config.network, rng.fork());
    let mut sim = Sim {
        seed,
        now_ms: 0,
        nodes: replicas
            .iter()
            .map(|id| (*id, Node::new(*id, PARTITION, config.replica)))
            .collect(),
        controller: Controller::new(PARTITION, replicas.clone(), client_ids.clone()),
        clients: client_ids
            .iter()
            .map(|id| {
                (
                    *id,
                    Client::new(*id, replicas.clone(), config.client_rate_per_million),
                )
            })
            .collect(),
        network,
        checker: Checker::default(),
        rng,
        trace,
        outcome: Outcome::default(),
        config,
    };
    sim.run()?;
    Ok(sim.outcome)
}

impl Sim {
    fn fail(&self, message: String) -> Failure {
        Failure {
            seed: self.seed,
            time_ms: self.now_ms,
            message,
        }
    }

    fn run(&mut self) -> Result<(), Failure> {
        let end_ms = CHAOS_MS + HEAL_MS;
        let mut next_tick_ms = 0;
        let mut healed = false;
        loop {
            let next_message = self.network.next_due().unwrap_or(u64::MAX);
            let next_fsync = self
                .nodes
                .values()
                .filter_map(Node::fsync_due)
                .min()
                .unwrap_or(u64::MAX);
            let next = next_tick_ms.min(next_message).min(next_fsync);
            if next > end_ms {
                break;
            }
            self.now_ms = next;
            NOW_MS.with(|now| now.set(next));
            if !healed && self.now_ms >= CHAOS_MS {
                healed = true;
                self.heal();
            }
            while let Some(envelope) = self.network.deliver(self.now_ms) {
                self.deliver(envelope)?;
            }
            if next_fsync <= self.now_ms {
                let due: Vec<ReplicaId> = self
                    .nodes
                    .values()
                    .filter(|node| node.fsync_due().is_some_and(|at| at <= self.now_ms))
                    .map(Node::id)
                    .collect();
                for id in due {
                    self.with_node(id, |node, ctx| node.complete_fsync(ctx))?;
                }
            }
            if next_tick_ms <= self.now_ms {
                self.tick(healed)?;
                next_tick_ms += TICK_MS;
            }
        }
        self.check_progress()
    }

    /// Runs `f` on node `id` with a context, then checks the invariants.
    fn with_node(
        &mut self,
        id: ReplicaId,
        f: impl FnOnce(&mut Node, &mut Ctx<'_>),
    ) -> Result<(), Failure> {
        self.outcome.events += 1;
        let removed_data = {
            let Some(node) = self.nodes.get_mut(&id) else {
                return Ok(());
            };
            let mut ctx = Ctx {
                now_ms: self.now_ms,
                network: &mut self.network,
                checker: &mut self.checker,
                rng: &mut self.rng,
                trace: &mut self.trace,
                fsync_ms: self.config.fsync_ms,
                removed_data: None,
                stats: &mut self.outcome.stats,
            };
            f(node, &mut ctx);
            ctx.removed_data
        };
        self.check(removed_data)
    }

    fn deliver(&mut self, envelope: Envelope) -> Result<(), Failure> {
        let Envelope { from, to, message } = envelope;
        match to {
            Endpoint::Node(id) => self.with_node(id, |node, ctx| node.receive(from, message, ctx)),
            Endpoint::Controller => {
                self.controller
                    .receive(message, self.now_ms, &mut self.network, &mut self.trace);
                Ok(())
            }
            Endpoint::Client(id) => {
                if let Some(client) = self.clients.get_mut(&id) {
                    client.receive(message);
                }
                Ok(())
            }
        }
    }

    fn tick(&mut self, healed: bool) -> Result<(), Failure> {
        if !healed {
            self.inject_faults()?;
        }
        self.network.heal_due(self.now_ms);
        let retention = self.config.retention_per_million;
        let ids: Vec<ReplicaId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.with_node(id, |node, ctx| node.tick(ctx, retention))?;
        }
        self.controller.tick(
            self.now_ms,
            &mut self.network,
            &mut self.rng,
            &mut self.trace,
        );
        for client in self.clients.values_mut() {
            client.tick(self.now_ms, &mut self.network, &mut self.rng);
        }
        Ok(())
    }

    fn inject_faults(&mut self) -> Result<(), Failure> {
        let ids: Vec<ReplicaId> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.rng.chance(self.config.crash_per_million) {
                let (low, high) = self.config.restart_ms;
                let restart_at = self.now_ms + self.rng.between(low, high);
                self.outcome.crashes += 1;
                self.with_node(id, |node, ctx| node.crash(restart_at, ctx))?;
            }
        }
        if self.rng.chance(self.config.partition_per_million) {
            self.form_partition();
        }
        Ok(())
    }

    /// A random partition: a node isolated, the cluster split in two, a
    /// one-way link failure, or a node cut from the controller.
    fn form_partition(&mut self) {
        let nodes: Vec<Endpoint> = self.nodes.keys().map(|id| Endpoint::Node(*id)).collect();
        let mut everyone = nodes.clone();
        everyone.push(Endpoint::Controller);
        everyone.extend(self.clients.keys().map(|id| Endpoint::Client(*id)));
        let pick = |rng: &mut Rng, from: &[Endpoint]| from[rng.below(from.len() as u64) as usize];
        let mut links = BTreeSet::new();
        let kind = self.rng.below(4);
        match kind {
            0 => {
                let isolated = pick(&mut self.rng, &nodes);
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
                links.insert((node, Endpoint::Controller));
                links.insert((Endpoint::Controller, node));
            }
        }
        let (low, high) = self.config.partition_ms;
        let heal_at = self.now_ms + self.rng.between(low, high);
        self.outcome.partitions += 1;
        let now = self.now_ms;
        self.trace.log(now, || {
            format!("partition {kind} until {heal_at}: {links:?}")
        });
        self.network.partition(links, heal_at);
    }

    /// The end of the faulty phase: heal the network, restart every node,
    /// and start counting progress.
    fn heal(&mut self) {
        let now = self.now_ms;
        self.trace
            .log(now, || "heal: network healed, nodes restarting".to_string());
        self.network.heal_all();
        for client in self.clients.values_mut() {
            client.mark(now);
        }
        let down: Vec<ReplicaId> = self
            .nodes
            .values()
            .filter(|node| node.is_down())
            .map(Node::id)
            .collect();
        for id in down {
            // Errors surface through the checker on the next check.
            let _ = self.with_node(id, |node, ctx| node.restart(ctx));
        }
    }

    fn check(&mut self, removed_data: Option<&'static str>) -> Result<(), Failure> {
        let disks: BTreeMap<ReplicaId, &Disk> = self
            .nodes
            .iter()
            .map(|(id, node)| (*id, node.disk()))
            .collect();
        if let Some(why) = removed_data {
            self.checker.check_durability(&disks, why);
        }
        self.checker.track_fences(&disks);
        for node in self.nodes.values() {
            node.check(&mut self.checker);
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
        self.outcome.rounds = self.controller.rounds;
        let progress: u64 = self
            .clients
            .values()
            .map(|client| client.acknowledged_since_mark)
            .sum();
        if progress == 0 {
            let roles: Vec<String> = self
                .nodes
                .values()
                .map(|node| match node.replica() {
                    Some(replica) => format!(
                        "{}: {:?} hw {} end {}",
                        node.id(),
                        replica.role(),
                        replica.high_watermark(),
                        replica.log_end()
                    ),
                    None => format!("{}: down", node.id()),
                })
                .collect();
            return Err(self.fail(format!(
                "no append acknowledged in {HEAL_MS} ms after healing; controller: {:?}; {}",
                self.controller.current(),
                roles.join("; ")
            )));
        }
        Ok(())
    }
}
