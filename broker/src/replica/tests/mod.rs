//! Three replicas on memory disks, connected by an in-process transport
//! that can cut any of them off, on one glommio executor: the shell's
//! acknowledgement, catch-up, truncation, reset, step-down, idempotence and
//! crash guarantees. Waits are on conditions with a deadline.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use corelog_replication::election::{self, Decision};
use corelog_replication::{Batch, PushAck, PushResult, QueryResult};
use corelog_wire::batch::{
    self, BatchBuilder, BatchLimits, Compression, NewRecord, ProducerIdentity,
};
use corelog_wire::error::ErrorCode;
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId, TimestampMs};
use event_listener::Event;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use glommio::{LocalExecutorBuilder, Placement};

use super::*;
use crate::executor::GlommioExecutor;
use crate::metadata::{CleanupPolicy, TopicConfig};
use crate::partition::{OffsetQuery, PartitionError};
use corelog_storage::clock::ManualClock;
use corelog_storage::memory_disk::{Fault, MemoryDisk};
use corelog_storage::{
    DiskSpace, LogConfig, RetentionPolicy, StorageError, StorageObserver, TailCache,
};

mod streams;

type Node = ReplicatedPartition<MemoryDisk>;

const T0: i64 = 1_767_225_600_000;
const KEY: PartitionId = PartitionId {
    topic_id: 7,
    partition: 0,
};
const DIR: &str = "/data/orders-0";
const LONG: Duration = Duration::from_secs(10);
const IDS: [ReplicaId; 3] = [ReplicaId(1), ReplicaId(2), ReplicaId(3)];

fn on_executor<Fut: Future<Output = ()>>(test: impl FnOnce() -> Fut) {
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor starts");
    executor.run(test());
}

/// The replicas by id (with their incarnation: a crashed instance's tasks
/// must not reach anyone), and which of them are cut off.
#[derive(Default)]
struct Network {
    nodes: RefCell<BTreeMap<ReplicaId, (u64, Rc<Node>)>>,
    down: RefCell<BTreeSet<ReplicaId>>,
    incarnations: Cell<u64>,
}

impl Network {
    fn reachable(&self, from: &Link, to: ReplicaId) -> Result<Rc<Node>, TransportError> {
        let down = self.down.borrow();
        let nodes = self.nodes.borrow();
        let sender_alive = nodes
            .get(&from.from)
            .is_some_and(|(incarnation, _)| *incarnation == from.incarnation);
        match nodes.get(&to) {
            Some((_, node))
                if sender_alive && !down.contains(&from.from) && !down.contains(&to) =>
            {
                Ok(node.clone())
            }
            _ => Err(TransportError::Unreachable {
                to,
                reason: "cut off".to_owned(),
            }),
        }
    }
}

/// One replica instance's end of the network.
struct Link {
    from: ReplicaId,
    incarnation: u64,
    network: Rc<Network>,
}

impl PushTransport for Link {
    fn send_push(
        &self,
        to: ReplicaId,
        push: Push,
    ) -> LocalBoxFuture<'_, Result<PushAck, TransportError>> {
        Box::pin(async move {
            // Some latency, so that an acknowledgement cannot arrive before
            // the sender's next step.
            glommio::timer::sleep(Duration::from_micros(500)).await;
            let target = self.network.reachable(self, to)?;
            let ack = target
                .handle_push(push)
                .await
                .map_err(|error| TransportError::Refused {
                    to,
                    code: error.code(),
                    message: error.to_string(),
                })?;
            // The answer is lost if either end was cut off meanwhile.
            self.network.reachable(self, to)?;
            Ok(ack)
        })
    }
}

/// Records what fenced logs and metadata writes report.
#[derive(Default)]
struct FenceRecorder {
    fenced: RefCell<Vec<String>>,
}

impl StorageObserver for FenceRecorder {
    fn on_flush(&self, _bytes: u64, _elapsed: Duration) {}

    fn on_fenced(&self, dir: &Path, error: &StorageError) {
        self.fenced
            .borrow_mut()
            .push(format!("{}: {error}", dir.display()));
    }
}

struct Cluster {
    network: Rc<Network>,
    fences: Rc<FenceRecorder>,
    disks: BTreeMap<ReplicaId, MemoryDisk>,
    clock: Rc<ManualClock>,
    config: ReplicaConfig,
    segment_bytes: u64,
    retention_bytes: Option<u64>,
}

impl Cluster {
    async fn start(
        config: ReplicaConfig,
        segment_bytes: u64,
        retention_bytes: Option<u64>,
    ) -> Rc<Self> {
        let cluster = Rc::new(Cluster {
            network: Rc::new(Network::default()),
            fences: Rc::default(),
            disks: IDS
                .iter()
                .map(|id| {
                    let disk = MemoryDisk::new(512, 1 << 40);
                    // Every disk operation yields once: concurrent appends,
                    // flushes, reads and truncations interleave.
                    disk.set_yielding(true);
                    (*id, disk)
                })
                .collect(),
            clock: Rc::new(ManualClock::new(TimestampMs(T0))),
            config,
            segment_bytes,
            retention_bytes,
        });
        for id in IDS {
            cluster.open(id).await;
        }
        let ticker = Rc::clone(&cluster);
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(Duration::from_millis(2)).await;
                let nodes: Vec<Rc<Node>> = ticker
                    .network
                    .nodes
                    .borrow()
                    .values()
                    .map(|(_, node)| node.clone())
                    .collect();
                for node in nodes {
                    node.tick();
                }
            }
        })
        .detach();
        cluster
    }

    async fn default() -> Rc<Self> {
        Self::start(test_config(), 64 << 10, None).await
    }

    /// Opens (or reopens, recovering) a replica on its disk.
    async fn open(&self, id: ReplicaId) -> Rc<Node> {
        let disk = self.disks[&id].clone();
        let shard = shard_storage(&disk, self.clock.clone(), self.fences.clone());
        let spec = replica_spec(
            id,
            KEY,
            Path::new(DIR),
            self.config,
            self.segment_bytes,
            self.retention_bytes,
        );
        let incarnation = self.network.incarnations.get() + 1;
        self.network.incarnations.set(incarnation);
        let link = Rc::new(Link {
            from: id,
            incarnation,
            network: self.network.clone(),
        });
        let node = ReplicatedPartition::open(disk, spec, shard, link, Rc::new(GlommioExecutor))
            .await
            .expect("replica opens");
        self.network
            .nodes
            .borrow_mut()
            .insert(id, (incarnation, node.clone()));
        node
    }

    fn node(&self, id: ReplicaId) -> Rc<Node> {
        self.network.nodes.borrow()[&id].1.clone()
    }

    fn cut(&self, id: ReplicaId) {
        self.network.down.borrow_mut().insert(id);
    }

    fn heal(&self, id: ReplicaId) {
        self.network.down.borrow_mut().remove(&id);
    }

    /// Power loss on one replica: its disk keeps only what was synced, and
    /// it comes back recovered, with no role.
    async fn crash_and_reopen(&self, id: ReplicaId) -> Rc<Node> {
        self.network.nodes.borrow_mut().remove(&id);
        self.disks[&id].crash();
        self.open(id).await
    }

    /// Publishes `leader` for `epoch`: the leader leads, every other
    /// reachable replica follows.
    async fn publish(&self, leader: ReplicaId, epoch: LeaderEpoch) {
        self.node(leader)
            .become_leader(epoch, &IDS)
            .await
            .expect("becomes leader");
        for id in IDS.into_iter().filter(|id| *id != leader) {
            if !self.network.down.borrow().contains(&id) {
                self.node(id)
                    .become_follower(epoch, leader)
                    .await
                    .expect("becomes follower");
            }
        }
    }

    /// A leader of epoch 1 with one committed record, then cut off from
    /// both followers: it can append and sync, but commit nothing more.
    async fn leader_cut_off() -> (Rc<Self>, Rc<Node>) {
        let cluster = Self::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let leader = cluster.node(IDS[0]);
        leader.produce(plain(0), Acks::Quorum, LONG).await.unwrap();
        cluster.cut(IDS[1]);
        cluster.cut(IDS[2]);
        (cluster, leader)
    }

    /// A controller's election round for `epoch` among the reachable
    /// replicas, then publication.
    async fn elect(&self, epoch: LeaderEpoch) -> ReplicaId {
        let mut answers = Vec::new();
        for id in IDS {
            if self.network.down.borrow().contains(&id) {
                continue;
            }
            let query = Query {
                partition: KEY,
                new_epoch: epoch,
            };
            answers.push(self.node(id).handle_query(query).await.expect("answers"));
        }
        let Decision::Elect { leader, .. } = election::decide(epoch, &IDS, &answers) else {
            panic!("no leader elected from {answers:?}");
        };
        self.publish(leader, epoch).await;
        leader
    }
}

/// A shard's storage on `disk`, its log fences reported to `fences`.
fn shard_storage(
    disk: &MemoryDisk,
    clock: Rc<ManualClock>,
    fences: Rc<FenceRecorder>,
) -> ShardStorage {
    let probe = disk.clone();
    ShardStorage {
        clock,
        space: Rc::new(DiskSpace::new(0, move || {
            probe.free_bytes(Path::new("/data"))
        })),
        cache: TailCache::new(64 << 10),
        observer: fences,
        journal: None,
    }
}

/// Replica `id` of partition `key`, kept in `dir`, with small batches and
/// segments of `segment_bytes`.
fn replica_spec(
    id: ReplicaId,
    key: PartitionId,
    dir: &Path,
    config: ReplicaConfig,
    segment_bytes: u64,
    retention_bytes: Option<u64>,
) -> ReplicaSpec<'_> {
    let limits = BatchLimits {
        batch_bytes_max: 4 << 10,
        decompressed_bytes_max: 1 << 20,
    };
    ReplicaSpec {
        id,
        config,
        partition: PartitionSpec {
            topic: "orders",
            id: key,
            dir,
            config: TopicConfig {
                retention_ms: None,
                retention_bytes,
                segment_bytes,
                segment_ms: 1 << 40,
                max_message_bytes: 4 << 10,
                max_uncompressed_message_bytes: 16 << 10,
                cleanup_policy: CleanupPolicy::Delete,
            },
            broker_log: LogConfig {
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
            producer_state_retention_ms: 1 << 40,
        },
        high_watermark_signal: Arc::new(Event::new()),
    }
}

fn test_config() -> ReplicaConfig {
    ReplicaConfig {
        resend_timeout_ms: 40,
        heartbeat_interval_ms: 10,
        max_inflight_records: 64,
        max_push_bytes: 2 << 10,
        in_sync_lag_ms: 1_000,
    }
}

/// A batch of `records` records whose values identify it by `tag`.
fn make_batch(tag: u64, records: usize, producer: ProducerIdentity) -> BytesMut {
    let mut builder = BatchBuilder::new(Compression::None).producer(producer);
    for index in 0..records {
        let mut value = format!("{tag}:{index}:").into_bytes();
        value.resize(60, b'x');
        builder
            .push(&NewRecord {
                key: Some(Bytes::from(format!("key-{tag}"))),
                value: Some(Bytes::from(value)),
                timestamp: TimestampMs(T0 + tag as i64),
                ..NewRecord::default()
            })
            .unwrap();
    }
    BytesMut::from(&builder.build().unwrap()[..])
}

fn plain(tag: u64) -> BytesMut {
    make_batch(tag, 3, ProducerIdentity::NONE)
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        glommio::timer::sleep(Duration::from_millis(2)).await;
    }
}

/// Every durable batch of a replica's log from its start, committed or not.
async fn log_bytes(node: &Node) -> Vec<u8> {
    let log = node.partition().log();
    let mut bytes = Vec::new();
    let mut position = log.log_start();
    while position < log.durable_end() {
        let read = log.read(position, 64 << 10, None).await.unwrap();
        assert!(read.next_offset > position, "no progress at {position}");
        for chunk in &read.chunks {
            bytes.extend_from_slice(chunk);
        }
        position = read.next_offset;
    }
    bytes
}

/// Every committed batch a reader sees, from `from`.
async fn committed(node: &Node, from: Offset) -> Vec<Batch> {
    let mut found = Vec::new();
    let mut position = from;
    while position < node.high_watermark() {
        let read = node.read(position, 64 << 10).await.unwrap();
        found.extend(batches::split(&read.chunks, &BatchLimits::default()).unwrap());
        assert!(read.next_offset > position, "no progress at {position}");
        position = read.next_offset;
    }
    found
}

fn caught_up(cluster: &Cluster, leader: ReplicaId, follower: ReplicaId) -> bool {
    let (leader, follower) = (cluster.node(leader), cluster.node(follower));
    follower.durable_end() == leader.durable_end()
        && follower.high_watermark() == leader.high_watermark()
}

/// A produce request holds one append future per partition, boxed: with
/// one-record batches that is one allocation per record, which glibc
/// serves from its per-thread cache only up to 1,032 bytes. The rare disk
/// work of `carry_out` (a new epoch's metadata, a truncation) inlined into
/// every append once made this future 2.7 KiB.
#[test]
fn an_append_future_stays_small() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        let leader = cluster.node(IDS[0]);
        let append = leader.produce(plain(0), Acks::Quorum, LONG);
        let bytes = std::mem::size_of_val(&append);
        assert!(bytes <= 640, "an append's future is {bytes} bytes");
    });
}

#[test]
fn quorum_produce_resolves_only_once_a_majority_is_durable() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let leader = cluster.node(IDS[0]);
        for tag in 0..30 {
            let produced = leader
                .produce(plain(tag), Acks::Quorum, LONG)
                .await
                .unwrap();
            let end = produced.base_offset.plus(3);
            let durable = IDS
                .iter()
                .filter(|id| cluster.node(**id).durable_end() >= end)
                .count();
            assert!(
                durable >= 2,
                "batch {tag} acknowledged on {durable} replica(s)"
            );
            assert!(leader.high_watermark() >= end);
        }
        // The log was empty, so epoch 1 needed no marker: offset 0 is the
        // first client batch.
        let first = committed(&leader, Offset(0)).await;
        assert_eq!(
            (first[0].base, first[0].last, first[0].epoch),
            (Offset(0), Offset(2), LeaderEpoch(1))
        );
        assert!(
            !batch::validate(&first[0].bytes, &BatchLimits::default())
                .unwrap()
                .is_control()
        );
        assert_eq!(first.len(), 30);
        for id in &IDS[1..] {
            wait_until("followers catch up", || caught_up(&cluster, IDS[0], *id)).await;
        }
        let expected = log_bytes(&leader).await;
        for id in &IDS[1..] {
            assert_eq!(
                log_bytes(&cluster.node(*id)).await,
                expected,
                "replica {id} differs"
            );
            assert_eq!(committed(&cluster.node(*id), Offset(0)).await, first);
        }
    });
}

#[test]
fn follower_that_was_down_catches_up_from_far_behind() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        cluster.cut(IDS[2]);
        let leader = cluster.node(IDS[0]);
        for tag in 0..300 {
            leader
                .produce(plain(tag), Acks::Quorum, LONG)
                .await
                .unwrap();
        }
        assert!(
            cluster.node(IDS[2]).durable_end() <= Offset(1),
            "the cut-off replica got records"
        );
        cluster.heal(IDS[2]);
        wait_until("the lagging follower catches up", || {
            caught_up(&cluster, IDS[0], IDS[2])
        })
        .await;
        assert_eq!(
            log_bytes(&cluster.node(IDS[2])).await,
            log_bytes(&leader).await
        );
    });
}

#[test]
fn divergent_tail_of_a_fenced_leader_is_truncated() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let old = cluster.node(IDS[0]);
        for tag in 0..5 {
            old.produce(plain(tag), Acks::Quorum, LONG).await.unwrap();
        }
        let committed_end = old.high_watermark();
        // Cut off, the old leader still writes: durable locally, never
        // committed.
        cluster.cut(IDS[0]);
        for tag in 100..103 {
            old.produce(plain(tag), Acks::Leader, LONG).await.unwrap();
        }
        let divergent_end = old.durable_end();
        assert!(divergent_end > committed_end);
        let leader = cluster.elect(LeaderEpoch(2)).await;
        assert_ne!(leader, IDS[0]);
        let new = cluster.node(leader);
        for tag in 200..206 {
            new.produce(plain(tag), Acks::Quorum, LONG).await.unwrap();
        }
        cluster.heal(IDS[0]);
        wait_until("the old leader follows and catches up", || {
            caught_up(&cluster, leader, IDS[0])
        })
        .await;
        assert_eq!(
            old.role(),
            RoleView::Follower {
                epoch: LeaderEpoch(2),
                leader
            }
        );
        assert_eq!(log_bytes(&old).await, log_bytes(&new).await);
        let tail: Vec<LeaderEpoch> = committed(&old, committed_end)
            .await
            .iter()
            .map(|batch| batch.epoch)
            .collect();
        assert!(
            old.partition()
                .log()
                .deletions()
                .iter()
                .any(|deleted| deleted.cause == corelog_storage::DeletionCause::Truncation),
            "the divergent tail was truncated, not reset"
        );
        assert!(
            tail.iter().all(|epoch| *epoch == LeaderEpoch(2)),
            "epoch-1 tail kept: {tail:?}"
        );
    });
}

#[test]
fn follower_below_the_leaders_log_start_is_reset() {
    on_executor(|| async {
        let cluster = Cluster::start(test_config(), 4 << 10, Some(8 << 10)).await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        cluster.cut(IDS[2]);
        let leader = cluster.node(IDS[0]);
        for tag in 0..200 {
            leader
                .produce(plain(tag), Acks::Quorum, LONG)
                .await
                .unwrap();
        }
        while leader.maintain().await.unwrap().is_some() {}
        let lagging = cluster.node(IDS[2]);
        assert!(
            leader.log_start() > lagging.durable_end(),
            "retention deleted too little"
        );
        assert!(leader.log_start() <= leader.high_watermark());
        cluster.heal(IDS[2]);
        wait_until("the reset follower catches up", || {
            caught_up(&cluster, IDS[0], IDS[2])
        })
        .await;
        assert_eq!(lagging.log_start(), leader.log_start());
        assert_eq!(log_bytes(&lagging).await, log_bytes(&leader).await);
        let reopened = cluster.crash_and_reopen(IDS[2]).await;
        assert_eq!(
            reopened.log_start(),
            leader.log_start(),
            "the reset survives a crash"
        );
    });
}

#[test]
fn produce_without_a_reachable_quorum_is_not_acknowledged() {
    on_executor(|| async {
        let (cluster, leader) = Cluster::leader_cut_off().await;
        let high_watermark = leader.high_watermark();
        let error = leader
            .produce(plain(1), Acks::Quorum, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::NotEnoughReplicas, "{error}");
        assert_eq!(leader.high_watermark(), high_watermark);
        assert!(leader.durable_end() > high_watermark, "appended locally");
        // Once a follower is back, the appended record commits.
        cluster.heal(IDS[1]);
        let end = leader.durable_end();
        wait_until("the record commits", || leader.high_watermark() >= end).await;
    });
}

/// A failed write of `replica-meta` is an I/O failure like a log's: the
/// replica fences and the broker is told (it exits with code 3), so a
/// leader cannot sit on its leadership with metadata it could not store.
#[test]
fn a_failed_metadata_write_fences_the_replica_and_is_reported() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.disks[&IDS[0]].fail_next(Fault::Write);
        let error = cluster
            .node(IDS[0])
            .become_leader(LeaderEpoch(1), &IDS)
            .await
            .expect_err("the epoch could not be stored");
        assert_eq!(error.code(), ErrorCode::StorageError, "{error}");
        let fences = cluster.fences.fenced.borrow().clone();
        assert_eq!(fences.len(), 1, "{fences:?}");
        assert!(fences[0].contains("replica-meta"), "{fences:?}");
        let refused = cluster
            .node(IDS[0])
            .produce(plain(0), Acks::Quorum, LONG)
            .await
            .expect_err("a fenced replica takes no writes");
        assert_ne!(refused.code(), ErrorCode::None);
    });
}

#[test]
fn a_metadata_write_out_of_descriptors_fences_the_replica_for_a_reopen_not_a_failed_disk() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        let disk = &cluster.disks[&IDS[0]];
        disk.set_descriptor_limit(Some(disk.open_handle_count()));
        let error = cluster
            .node(IDS[0])
            .become_leader(LeaderEpoch(1), &IDS)
            .await
            .expect_err("the epoch could not be stored");
        assert_eq!(error.code(), ErrorCode::OutOfFileDescriptors, "{error}");
        let node = cluster.node(IDS[0]);
        assert!(
            node.fenced_out_of_descriptors() && !node.fenced_no_space(),
            "fenced for a reopen once descriptors are back"
        );
        assert!(
            !error.client_message().contains(DIR),
            "{}",
            error.client_message()
        );
    });
}

#[test]
fn stepping_down_fails_pending_produces_with_not_leader() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let leader = cluster.node(IDS[0]);
        cluster.cut(IDS[1]);
        cluster.cut(IDS[2]);
        let before = leader.durable_end();
        let producing = leader.clone();
        let pending =
            glommio::spawn_local(
                async move { producing.produce(plain(1), Acks::Quorum, LONG).await },
            );
        wait_until("the batch is durable locally", || {
            leader.durable_end() > before
        })
        .await;
        let query = Query {
            partition: KEY,
            new_epoch: LeaderEpoch(2),
        };
        leader.handle_query(query).await.unwrap();
        let error = pending.await.unwrap_err();
        assert_eq!(
            error,
            ReplicaError::SteppedDown {
                epoch: LeaderEpoch(1)
            }
        );
        assert_eq!(error.code(), ErrorCode::NotLeader);
        let refused = leader
            .produce(plain(2), Acks::Quorum, LONG)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), ErrorCode::NotLeader);
    });
}

#[test]
fn idempotent_retry_after_a_leader_change_returns_the_original_offset() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let producer = |sequence| ProducerIdentity {
            producer_id: 42,
            producer_epoch: 0,
            base_sequence: sequence,
        };
        let first = make_batch(1, 2, producer(0));
        let second = make_batch(2, 2, producer(2));
        let old = cluster.node(IDS[0]);
        let first_at = old
            .produce(first.clone(), Acks::Quorum, LONG)
            .await
            .unwrap();
        let second_at = old
            .produce(second.clone(), Acks::Quorum, LONG)
            .await
            .unwrap();
        for id in &IDS[1..] {
            wait_until("followers catch up", || caught_up(&cluster, IDS[0], *id)).await;
        }
        // The next leader restarts first: its producer state comes back
        // from its (replicated) log alone.
        cluster.cut(IDS[0]);
        cluster.crash_and_reopen(IDS[1]).await;
        let leader = cluster.elect(LeaderEpoch(2)).await;
        let new = cluster.node(leader);
        let retried = new.produce(first, Acks::Quorum, LONG).await.unwrap();
        assert!(retried.duplicate);
        assert_eq!(retried.base_offset, first_at.base_offset);
        let retried = new.produce(second, Acks::Quorum, LONG).await.unwrap();
        assert_eq!(
            (retried.base_offset, retried.duplicate),
            (second_at.base_offset, true)
        );
        let third = new
            .produce(make_batch(3, 2, producer(4)), Acks::Quorum, LONG)
            .await
            .unwrap();
        assert!(!third.duplicate && third.base_offset > second_at.base_offset);
    });
}

#[test]
fn crash_of_every_replica_keeps_every_acknowledged_record() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let leader = cluster.node(IDS[0]);
        // Pipelined produces, sharing group commits and pushes.
        let tasks: Vec<_> = (0..40)
            .map(|tag| {
                let leader = leader.clone();
                glommio::spawn_local(
                    async move { leader.produce(plain(tag), Acks::Quorum, LONG).await },
                )
            })
            .collect();
        let mut acknowledged = Vec::new();
        for task in tasks {
            acknowledged.push(task.await.unwrap().base_offset);
        }
        // More in flight when the power goes: they may or may not survive.
        for tag in 40..50 {
            let leader = leader.clone();
            glommio::spawn_local(
                async move { leader.produce(plain(tag), Acks::Quorum, LONG).await },
            )
            .detach();
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
        let acknowledged_end = leader.high_watermark();
        let before = committed(&leader, Offset(0)).await;
        for id in IDS {
            cluster.crash_and_reopen(id).await;
        }
        let winner = cluster.elect(LeaderEpoch(2)).await;
        let new = cluster.node(winner);
        let end = new.durable_end();
        wait_until("the new leader commits its log", || {
            new.high_watermark() >= end
        })
        .await;
        let after = committed(&new, Offset(0)).await;
        let kept: Vec<&Batch> = after
            .iter()
            .filter(|batch| batch.base < acknowledged_end)
            .collect();
        let expected: Vec<&Batch> = before
            .iter()
            .filter(|batch| batch.base < acknowledged_end)
            .collect();
        assert_eq!(kept, expected, "acknowledged records changed");
        for offset in acknowledged {
            assert!(
                after.iter().any(|batch| batch.base == offset),
                "offset {offset} lost"
            );
        }
    });
}

#[test]
fn query_answer_is_durable_before_it_is_returned() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        let node = cluster.node(IDS[0]);
        let query = Query {
            partition: KEY,
            new_epoch: LeaderEpoch(5),
        };
        let answer = node.handle_query(query).await.unwrap();
        assert_eq!(
            answer.result,
            QueryResult::State {
                last_epoch: None,
                log_end: Offset(0)
            }
        );
        let node = cluster.crash_and_reopen(IDS[0]).await;
        assert_eq!(node.meta().fenced_epoch, LeaderEpoch(5));
        let stale = Push {
            partition: KEY,
            epoch: LeaderEpoch(4),
            leader: IDS[1],
            start: Offset(0),
            prev_epoch: None,
            reset_to: None,
            hw: Offset(0),
            log_start: Offset(0),
            batches: Vec::new(),
        };
        let ack = node.handle_push(stale).await.unwrap();
        assert_eq!(
            ack.result,
            PushResult::Fenced {
                epoch: LeaderEpoch(5)
            }
        );
    });
}

/// Regression: an empty log needs no marker, but a record appended before
/// the leadership's metadata is durable can survive a crash that the
/// metadata does not, and the replica then refuses to open (its log has an
/// epoch its history lacks). Found by the simulator (seed 52). The state
/// machine accepts writes only once the shell reported the metadata
/// written.
#[test]
fn a_produce_waits_until_an_empty_logs_leadership_is_durable() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        let leader = cluster.node(IDS[0]);
        let mut taking = pin!(leader.become_leader(LeaderEpoch(1), &IDS));
        assert!(
            futures::poll!(&mut taking).is_pending(),
            "the metadata write yields on the yielding disk"
        );
        assert_eq!(
            leader.role(),
            RoleView::Leader {
                epoch: LeaderEpoch(1),
                accepting_writes: false
            }
        );
        let refused = leader.produce(plain(1), Acks::Leader, LONG).await;
        assert!(
            matches!(refused, Err(ReplicaError::LeaderNotReady { .. })),
            "{refused:?}"
        );
        taking.await.unwrap();
        let produced = leader.produce(plain(2), Acks::Leader, LONG).await.unwrap();
        assert_eq!(produced.base_offset, Offset(0));
    });
}

/// Regression: a restarted replica starts with its high watermark at its
/// log start, and as a new leader it learns how much of its log is
/// committed only when its epoch's marker commits. Until then a read found
/// no records (and a consumer at the tail was told its position is out of
/// range); now it answers the retriable `LEADER_NOT_AVAILABLE`. Seen as a
/// flaky `one_core` test: a fetch right after a one-voter restart got 0 of
/// 3 records.
#[test]
fn a_new_leader_serves_reads_once_its_marker_is_committed() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let old = cluster.node(IDS[0]);
        for tag in 0..3 {
            old.produce(plain(tag), Acks::Quorum, LONG).await.unwrap();
        }
        let committed_end = old.high_watermark();
        for id in IDS {
            cluster.crash_and_reopen(id).await;
        }
        cluster.cut(IDS[1]);
        cluster.cut(IDS[2]);
        let leader = cluster.node(IDS[0]);
        leader.become_leader(LeaderEpoch(2), &IDS).await.unwrap();
        for from in [Offset(0), committed_end] {
            let refused = leader.read(from, 64 << 10).await;
            assert!(
                matches!(
                    refused,
                    Err(ReplicaError::LeaderNotReady {
                        epoch: LeaderEpoch(2)
                    })
                ),
                "read from {from}: {refused:?}"
            );
        }
        let latest = leader.list_offset(OffsetQuery::Latest).await;
        assert!(
            matches!(latest, Err(ReplicaError::LeaderNotReady { .. })),
            "{latest:?}"
        );
        cluster.heal(IDS[1]);
        cluster
            .node(IDS[1])
            .become_follower(LeaderEpoch(2), IDS[0])
            .await
            .unwrap();
        wait_until("the marker commits", || {
            leader.high_watermark() > committed_end
        })
        .await;
        let read = committed(&leader, Offset(0)).await;
        assert_eq!(
            read.iter()
                .filter(|batch| batch.base < committed_end)
                .count(),
            3,
            "every batch of epoch 1 is served again"
        );
    });
}

/// A replica that has just restarted knows no high watermark (it starts at
/// the log start). In the moment before it takes a leadership the
/// metadata already names it for, it must not tell a reader that the log
/// ends there (the soak saw "offset 15859 is past the end of the log ...
/// the log holds 0..0" for 38 s): it answers NOT_LEADER, and the reader
/// looks the leader up again.
#[test]
fn a_replica_that_does_not_lead_never_says_the_log_ends_below_a_reader() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let leader = cluster.node(IDS[0]);
        for tag in 0..3 {
            leader
                .produce(plain(tag), Acks::Quorum, LONG)
                .await
                .unwrap();
        }
        let committed_end = leader.high_watermark();
        let restarted = cluster.crash_and_reopen(IDS[0]).await;
        assert_eq!(restarted.role(), RoleView::Offline);
        assert!(restarted.high_watermark() < committed_end);
        let read = restarted.read(committed_end, 64 << 10).await;
        assert!(
            matches!(&read, Err(error @ ReplicaError::NotLeader { .. }) if error.code() == ErrorCode::NotLeader),
            "{read:?}"
        );
        let latest = restarted.list_offset(OffsetQuery::Latest).await;
        assert!(
            matches!(latest, Err(ReplicaError::NotLeader { .. })),
            "{latest:?}"
        );
        // What it holds below its high watermark it still serves, and the
        // leader still tells a reader ahead of the log where it ends.
        let leader = cluster.node(IDS[1]);
        leader.become_leader(LeaderEpoch(2), &IDS).await.unwrap();
        cluster
            .node(IDS[2])
            .become_follower(LeaderEpoch(2), IDS[1])
            .await
            .unwrap();
        wait_until("the new leader commits its marker", || {
            leader.high_watermark() > committed_end
        })
        .await;
        let ahead = leader.read(leader.high_watermark().plus(5), 64 << 10).await;
        assert!(
            matches!(&ahead, Err(error) if error.code() == ErrorCode::OffsetOutOfRange),
            "{ahead:?}"
        );
    });
}

/// A push that truncates a divergent tail and raises the high watermark
/// past it in one step: while the truncation is carried out (the yielding
/// disk interleaves a reader), no read below the high watermark may serve
/// the old tail (sim seed 541 saw the follower's state-machine high
/// watermark above records it had not cut yet).
#[test]
fn a_read_never_sees_a_divergent_tail_below_the_high_watermark() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        cluster.publish(IDS[0], LeaderEpoch(1)).await;
        let old = cluster.node(IDS[0]);
        for tag in 0..3 {
            old.produce(plain(tag), Acks::Quorum, LONG).await.unwrap();
        }
        let committed_end = old.high_watermark();
        cluster.cut(IDS[0]);
        for tag in 100..104 {
            old.produce(plain(tag), Acks::Leader, LONG).await.unwrap();
        }
        assert!(old.durable_end() > committed_end);
        let leader = cluster.elect(LeaderEpoch(2)).await;
        let new = cluster.node(leader);
        for tag in 200..206 {
            new.produce(plain(tag), Acks::Quorum, LONG).await.unwrap();
        }
        // The old leader stays cut off: the push below is the only one.
        old.become_follower(LeaderEpoch(2), leader).await.unwrap();
        let push = Push {
            partition: KEY,
            epoch: LeaderEpoch(2),
            leader,
            start: committed_end,
            prev_epoch: Some(LeaderEpoch(1)),
            reset_to: None,
            hw: new.high_watermark(),
            log_start: Offset(0),
            batches: committed(&new, committed_end).await,
        };
        let done = Rc::new(Cell::new(false));
        let reader = {
            let (old, done) = (old.clone(), done.clone());
            glommio::spawn_local(async move {
                let mut rounds = 0_u32;
                while !done.get() {
                    let high_watermark = old.high_watermark();
                    let mut position = committed_end;
                    // Records below the high watermark may still be on
                    // their way to disk (an empty read); never old ones.
                    while position < high_watermark {
                        let read = old.read(position, 64 << 10).await.unwrap();
                        let found = batches::split(&read.chunks, &BatchLimits::default()).unwrap();
                        for batch in &found {
                            assert_eq!(batch.epoch, LeaderEpoch(2), "read {:?}", batch.meta());
                        }
                        if read.next_offset <= position {
                            break;
                        }
                        position = read.next_offset;
                    }
                    rounds += 1;
                    glommio::executor().yield_task_queue_now().await;
                }
                rounds
            })
        };
        old.handle_push(push).await.unwrap();
        wait_until("the push commits on the old leader", || {
            old.high_watermark() == new.high_watermark()
        })
        .await;
        done.set(true);
        let rounds = reader.await;
        assert!(rounds > 1, "the reader ran while the push was carried out");
        let read = committed(&old, committed_end).await;
        assert!(
            read.iter().all(|batch| batch.epoch == LeaderEpoch(2)),
            "{read:?}"
        );
    });
}

#[test]
fn reads_stop_at_the_high_watermark() {
    on_executor(|| async {
        let (cluster, leader) = Cluster::leader_cut_off().await;
        let produced = leader.produce(plain(1), Acks::Leader, LONG).await.unwrap();
        let high_watermark = leader.high_watermark();
        assert_eq!(high_watermark, produced.base_offset);
        let read = leader.read(high_watermark, 64 << 10).await.unwrap();
        assert!(read.chunks.is_empty() && read.readable_end == high_watermark);
        let beyond = leader
            .read(high_watermark.plus(1), 64 << 10)
            .await
            .unwrap_err();
        assert_eq!(beyond.code(), ErrorCode::OffsetOutOfRange);
        // The reader is told where the end is.
        let bounds = PartitionError::from(beyond).bounds;
        assert_eq!(
            bounds.map(|bounds| bounds.high_watermark),
            Some(high_watermark)
        );
        let below = committed(&leader, Offset(0)).await;
        assert!(below.iter().all(|batch| batch.last < high_watermark));
        let signal = leader.high_watermark_signal();
        let moved = signal.listen();
        cluster.heal(IDS[1]);
        moved.await;
        wait_until("the record commits", || {
            leader.high_watermark() > high_watermark
        })
        .await;
        let read = leader.read(high_watermark, 64 << 10).await.unwrap();
        assert_eq!(
            batches::split(&read.chunks, &BatchLimits::default()).unwrap()[0].base,
            produced.base_offset
        );
    });
}

/// Readers long-poll on the high watermark signal. A leader's local flush
/// moves its durable end before the high watermark: waking readers then
/// only makes them read nothing and wait again (on a single node, one
/// wasted read pass per partition per group commit).
#[test]
fn a_local_flush_that_commits_nothing_does_not_wake_readers() {
    on_executor(|| async {
        let (cluster, leader) = Cluster::leader_cut_off().await;
        let high_watermark = leader.high_watermark();
        let signal = leader.high_watermark_signal();
        let woken = signal.listen();
        leader.produce(plain(1), Acks::Leader, LONG).await.unwrap();
        assert!(leader.durable_end() > high_watermark, "flushed locally");
        assert_eq!(leader.high_watermark(), high_watermark);
        assert!(
            woken.now_or_never().is_none(),
            "readers were woken although nothing new is readable"
        );
        let moved = signal.listen();
        cluster.heal(IDS[1]);
        moved.await;
        assert!(leader.high_watermark() > high_watermark);
    });
}

/// A push is refused as it is received (`serve_push`, the shard's one call
/// into the replica), with `INVALID_REQUEST` and nothing changed: batches
/// elsewhere than the push says, and a damaged batch. (Before issue 36 the
/// broker's `check_push` did this on a typed push.)
#[test]
fn malformed_push_is_refused_without_changing_anything() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        let node = cluster.node(IDS[1]);
        let mut bytes = plain(0);
        batch::set_leader_epoch(&mut bytes, LeaderEpoch(1));
        let push = |start| Push {
            partition: KEY,
            epoch: LeaderEpoch(1),
            leader: IDS[0],
            start: Offset(start),
            prev_epoch: None,
            reset_to: None,
            hw: Offset(0),
            log_start: Offset(0),
            batches: Vec::new(),
        };
        let send = |start, raw: Bytes| {
            let mut request = push(start).to_wire();
            request.records_len = u32::try_from(raw.len()).unwrap();
            let node = Rc::clone(&node);
            async move { node.serve_push(&request, raw).await }
        };
        let mut damaged = bytes.to_vec();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        // The batch's header says offset 0; and a flipped bit.
        for (start, raw) in [(5, bytes.clone().freeze()), (0, Bytes::from(damaged))] {
            let answer = send(start, raw).await;
            assert_eq!(
                answer.error_code,
                ErrorCode::InvalidRequest.code(),
                "{answer:?}"
            );
        }
        assert_eq!(node.role(), RoleView::Offline);
        assert_eq!(node.meta(), corelog_replication::ReplicaMeta::new());
        let answer = send(0, bytes.freeze()).await;
        let ack = PushAck::from_wire(IDS[1], KEY, LeaderEpoch(1), answer).unwrap();
        assert_eq!(
            ack.result,
            PushResult::Ok {
                durable_end: Offset(3),
                log_end: Offset(3)
            }
        );
    });
}

/// The summary names where each committed epoch run starts, the newest
/// `EPOCH_STARTS_MAX`: after the first run on an empty log, each start
/// holds its leader's epoch-start marker (consumer lag subtracts them).
#[test]
fn the_summary_names_the_newest_epoch_starts_each_a_marker() {
    on_executor(|| async {
        let cluster = Cluster::default().await;
        let leader = cluster.node(IDS[0]);
        let changes = EPOCH_STARTS_MAX as u32 + 6;
        for epoch in 1..=changes {
            cluster.publish(IDS[0], LeaderEpoch(epoch)).await;
            leader
                .produce(plain(u64::from(epoch)), Acks::Quorum, LONG)
                .await
                .unwrap();
        }
        let summary = leader.replica_summary();
        assert_eq!(summary.log, leader.summary());
        let starts = &summary.epoch_starts;
        assert_eq!(starts.len(), EPOCH_STARTS_MAX, "{starts:?}");
        assert!(
            starts.windows(2).all(|pair| pair[0] < pair[1]),
            "{starts:?}"
        );
        let batches = committed(&leader, Offset(0)).await;
        let markers: Vec<Offset> = batches
            .iter()
            .filter(|found| {
                batch::validate(&found.bytes, &BatchLimits::default())
                    .unwrap()
                    .is_control()
            })
            .map(|found| found.base)
            .collect();
        // Epoch 1 took an empty log: no marker. Every later epoch has one.
        assert_eq!(markers.len(), changes as usize - 1);
        assert_eq!(starts[..], markers[markers.len() - EPOCH_STARTS_MAX..]);
    });
}
