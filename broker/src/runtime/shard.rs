//! One shard: an executor that owns some partition replicas, serves
//! connections, and reaches the other shards only through
//! [`Shard::invoke_on`].
//!
//! This file holds the shard's state and its life: the mailbox,
//! readiness, in-flight requests and shutdown. What the shard does is split
//! by concern: routing partition operations to their owners
//! ([`super::routing`]), topics and metadata snapshots ([`super::topics`]),
//! replicated partitions ([`super::replicas`]), group coordinators
//! ([`super::groups`]) and housekeeping ([`super::maintenance`]).
//!
//! Work queues in a bounded mailbox per shard: a full one answers
//! `QUEUE_FULL` (retriable) rather than waiting unboundedly. Nothing on the
//! data path takes a lock. The client side of a shard (connections,
//! quotas, logins) belongs to the network layer above it.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahash::AHashMap;
use event_listener::Event;

use super::deletion::{DeletionQueue, TopicDeletions};
use super::invoke::{Address, Letter, Mailbox};
use crate::cluster::ClusterRole;
use crate::config::BrokerConfig;
use crate::executor::{Executor, GlommioExecutor};
use corelog_storage::clock::Clock;
use corelog_wire::producer_id::ProducerIdKey;
use corelog_wire::types::PartitionId;

use crate::group::service::Coordinator;
use crate::metadata::{MetadataSnapshot, ShardId};
use crate::metrics::{FollowerLagSample, ShardMetrics};
use crate::partition::PartitionError;
use crate::peer::Peers;
use crate::replica::ReplicatedPartition;
use crate::replica::stream::ReplicationStreams;
use corelog_storage::ShardStorage;
use corelog_storage::glommio_disk::GlommioDisk;

/// A replica this shard hosts.
pub(super) type Replica = Rc<ReplicatedPartition<GlommioDisk>>;

/// A shard's state. Lives on its executor's thread, behind an `Rc`.
pub struct Shard {
    /// This shard, for tasks and callbacks that outlive a borrow.
    pub(super) me: Weak<Shard>,
    /// This shard's index.
    pub id: ShardId,
    /// The broker's settings.
    pub config: Rc<BrokerConfig>,
    /// Metric handles.
    pub metrics: ShardMetrics,
    pub(super) disk: GlommioDisk,
    pub(crate) storage: ShardStorage,
    /// Tasks, timers and the monotonic clock of the replicas here.
    pub(super) executor: Rc<dyn Executor>,
    /// The replicas of the partitions placed on this shard.
    pub(super) replicas: RefCell<AHashMap<PartitionId, Replica>>,
    /// Connections to other brokers (replication pushes, lookups).
    pub(super) brokers: Rc<Peers>,
    /// The replication streams of the partitions this shard leads, made on
    /// first use.
    pub(super) streams: std::cell::OnceCell<Rc<ReplicationStreams>>,
    /// Group coordinators of the `__groups` partitions this shard leads, by index.
    pub(super) coordinators: RefCell<AHashMap<u32, Rc<Coordinator>>>,
    /// Partitions this shard should host but could not open, with what
    /// a request for one is answered (no paths: the log has those).
    pub(super) failed: RefCell<AHashMap<PartitionId, PartitionError>>,
    /// The follower lag series last published, so that those of
    /// leaderships gone are removed.
    pub(super) follower_lag_series: RefCell<Vec<FollowerLagSample>>,
    pub(super) snapshot: RefCell<Arc<MetadataSnapshot>>,
    /// Held while a snapshot is applied: two applications never interleave
    /// (a later one would close what an earlier one is still opening).
    pub(super) applying: async_lock::Mutex<()>,
    /// Every shard's mailbox address, by index (this one's included).
    pub(super) peers: Vec<Address>,
    pub(super) inbox: Mailbox,
    /// Deleted topics whose files the broker's shards are still removing.
    pub topic_deletions: Arc<TopicDeletions>,
    /// The key binding idempotent producer ids to principals
    /// ([`corelog_wire::producer_id`]).
    pub producer_ids: ProducerIdKey,
    /// This shard's share of that work (see [`super::deletion`]).
    pub(super) deletion_queue: DeletionQueue,
    /// Shard 0: the controller role (on voters) and the membership.
    cluster: RefCell<Option<ClusterRole>>,
    in_flight: Cell<u64>,
    drained: Event,
    /// Notified once when shutdown begins; connections stop reading.
    pub stopping: Event,
    /// Notified after every metadata snapshot this shard applies:
    /// connections of a user check that their credential still stands.
    pub metadata_applied: Event,
    is_stopping: Cell<bool>,
    /// Notified when the shard starts serving: until then it accepts no
    /// connections, so no client meets a broker that cannot serve yet.
    pub(super) ready: Event,
    pub(super) is_ready: Cell<bool>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("replicas", &self.replicas.borrow().len())
            .finish_non_exhaustive()
    }
}

/// What a shard is built from.
#[derive(Debug)]
pub struct ShardParts {
    /// Index.
    pub id: ShardId,
    /// Settings.
    pub config: Rc<BrokerConfig>,
    /// Metric handles.
    pub metrics: ShardMetrics,
    /// The shard's disk.
    pub disk: GlommioDisk,
    /// Resources shared by the shard's logs.
    pub storage: ShardStorage,
    /// Every shard's mailbox address, by index (this one's included).
    pub peers: Vec<Address>,
    /// This shard's mailbox.
    pub inbox: Mailbox,
    /// Deleted topics whose files the broker's shards are still removing.
    pub topic_deletions: Arc<TopicDeletions>,
    /// The key binding idempotent producer ids to principals.
    pub producer_ids: ProducerIdKey,
}

/// Counts a request as in flight until dropped.
#[derive(Debug)]
pub struct InFlight {
    shard: Rc<Shard>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let left = self.shard.in_flight.get() - 1;
        self.shard.in_flight.set(left);
        self.shard.metrics.in_flight_requests.set(left as i64);
        if left == 0 {
            self.shard.drained.notify(usize::MAX);
        }
    }
}

impl Shard {
    /// Assembles a shard.
    #[must_use]
    pub fn new(parts: ShardParts) -> Rc<Shard> {
        let serving_alone = parts.config.is_single_node();
        let empty =
            MetadataSnapshot::empty(parts.config.shards, parts.config.node_id, !serving_alone);
        Rc::new_cyclic(|me| Shard {
            me: me.clone(),
            id: parts.id,
            config: parts.config,
            metrics: parts.metrics,
            disk: parts.disk,
            storage: parts.storage,
            executor: Rc::new(GlommioExecutor),
            replicas: RefCell::new(AHashMap::new()),
            brokers: Peers::new(),
            streams: std::cell::OnceCell::new(),
            coordinators: RefCell::new(AHashMap::new()),
            failed: RefCell::new(AHashMap::new()),
            follower_lag_series: RefCell::new(Vec::new()),
            snapshot: RefCell::new(Arc::new(empty)),
            applying: async_lock::Mutex::new(()),
            peers: parts.peers,
            inbox: parts.inbox,
            topic_deletions: parts.topic_deletions,
            producer_ids: parts.producer_ids,
            deletion_queue: DeletionQueue::default(),
            cluster: RefCell::new(None),
            in_flight: Cell::new(0),
            drained: Event::new(),
            stopping: Event::new(),
            metadata_applied: Event::new(),
            is_stopping: Cell::new(false),
            ready: Event::new(),
            // A cluster member accepts connections at once: its peers
            // reach the controller through the same listener. A single
            // node waits until it serves (see `MetadataSnapshot::serving`).
            is_ready: Cell::new(!serving_alone),
        })
    }

    /// Shard 0: installs the cluster role.
    ///
    /// # Panics
    /// On another shard: the controller and the membership live on shard 0.
    pub fn set_cluster(&self, role: ClusterRole) {
        assert!(self.id == ShardId(0), "the cluster role lives on shard 0");
        *self.cluster.borrow_mut() = Some(role);
    }

    /// The cluster role (shard 0, once started).
    #[must_use]
    pub fn cluster(&self) -> Option<ClusterRole> {
        self.cluster.borrow().clone()
    }

    /// The metadata snapshot this shard works from.
    #[must_use]
    pub fn snapshot(&self) -> Arc<MetadataSnapshot> {
        self.snapshot.borrow().clone()
    }

    /// The wall clock, for times that are stored or shown.
    #[must_use]
    pub fn clock(&self) -> &dyn Clock {
        &*self.storage.clock
    }

    /// Resolves once the shard serves clients (see
    /// [`MetadataSnapshot::serving`]).
    pub async fn wait_ready(&self) {
        while !self.is_ready.get() {
            let listener = self.ready.listen();
            if self.is_ready.get() {
                break;
            }
            listener.await;
        }
    }

    /// Marks the shard serving and wakes what waited for it.
    pub(super) fn mark_ready(&self) {
        if !self.is_ready.replace(true) {
            self.ready.notify(usize::MAX);
        }
    }

    /// Whether shutdown has begun.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.is_stopping.get()
    }

    /// Marks a request in flight until the guard drops.
    #[must_use]
    pub fn begin_request(self: &Rc<Self>) -> InFlight {
        let count = self.in_flight.get() + 1;
        self.in_flight.set(count);
        self.metrics.in_flight_requests.set(count as i64);
        InFlight {
            shard: self.clone(),
        }
    }

    /// Runs the work other shards send ([`super::invoke`]) until told to
    /// stop.
    pub async fn run_inbox(self: Rc<Self>) {
        while let Ok(letter) = self.inbox.recv_async().await {
            match letter {
                // Spawned in arrival order, so work for one partition
                // starts in order.
                Letter::Run(start) => start(self.clone()),
                Letter::Stop => {
                    self.shutdown().await;
                    return;
                }
            }
        }
    }

    /// Graceful shutdown of this shard: stop taking requests, let in-flight
    /// ones finish (bounded by the shutdown timeout), then close every
    /// replica so that the next start needs no recovery scan.
    async fn shutdown(&self) {
        self.is_stopping.set(true);
        self.stopping.notify(usize::MAX);
        let deadline = Instant::now() + Duration::from_millis(self.config.shutdown_timeout_ms);
        if !super::wait_until(&self.drained, deadline, || self.in_flight.get() == 0).await {
            tracing::warn!(
                shard = %self.id,
                in_flight = self.in_flight.get(),
                "shutdown timeout with requests in flight"
            );
        }
        self.close_replicas().await;
        tracing::info!(shard = %self.id, "shard stopped");
    }
}
